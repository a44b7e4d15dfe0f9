"""Deliberately BROKEN variants of the mechanism, for the audit only (never for a real run).

They mimic the two defects of the paper's published code (contract section 6) so that the audit can show
it detects them:

(a) `too_little_noise()`: a context manager that makes the server's noise source draw with standard
    deviation `broken_std(sigma)` instead of sigma. The published code uses sigma**2 as the standard
    deviation; at our scales sigma is about 1 or below, where squaring barely changes it (sigma = 0.92
    gives 0.85), so we take min(sigma**2, sigma / 100): at least 100 times too little noise.
    Implementation: `server.app.GaussianNoise` is replaced, inside the `with` block only, by a factory
    returning `ReducedNoise(GaussianNoise(...))` (a NoiseSource wrapper that records what it was asked
    for and what it drew).
(b) `per_step_clip_client_update`: the client function of `AuditGrid` (a LocalGrid that calls a given
    client function) that clips each local step's gradient to beta (by hand, with torch ops, over all
    parameters together) and never clips the update theta_local - theta_t. `no_server_recheck()` also
    turns off the server's re-check of update norms (the published code has none; ours would re-clip the
    update to beta and undo the defect - the audit reports both).

Every patch is undone when its `with` block exits, also on error.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

from experiments.local_grid import LocalGrid, LocalReply
from uedp.config import RunConfig
from uedp.models.base import get_weights, set_weights
from uedp.pipeline import UserData, load_manifest, load_user_data, new_model
from uedp.privacy.noise import GaussianNoise
from uedp.protocol import TrainInstructions
from uedp.tasks import per_sentence_loss, weighted_loss
from uedp.training import batch_of

ClientFn = Callable[[RunConfig, int, list[np.ndarray], TrainInstructions],
                    tuple[list[np.ndarray], dict[str, float]]]


def broken_std(sigma: float) -> float:
    """The control's noise standard deviation: min(sigma**2, sigma / 100)."""
    return min(sigma * sigma, sigma / 100.0)


class ReducedNoise:
    """NoiseSource wrapper drawing N(0, broken_std(std)^2); remembers the stds asked for and drawn."""

    def __init__(self, inner: GaussianNoise) -> None:
        self.inner = inner
        self.reproducible = inner.reproducible
        self.warning = "BROKEN CONTROL: too little noise"
        self.asked: set[float] = set()
        self.drawn: set[float] = set()

    def normal(self, shape: tuple[int, ...], std: float) -> np.ndarray:
        self.asked.add(float(std))
        used = broken_std(float(std))
        self.drawn.add(used)
        return self.inner.normal(shape, used)


@contextlib.contextmanager
def too_little_noise() -> Iterator[list[ReducedNoise]]:
    """Inside the block, run_server's noise source is a ReducedNoise (collected in the yielded list)."""
    import server.app as server_app

    made: list[ReducedNoise] = []
    original = server_app.GaussianNoise

    def factory(*, seed: int | None = None) -> ReducedNoise:
        made.append(ReducedNoise(original(seed=seed)))
        return made[-1]

    server_app.GaussianNoise = factory
    try:
        yield made
    finally:
        server_app.GaussianNoise = original


@contextlib.contextmanager
def no_server_recheck() -> Iterator[None]:
    """Inside the block, the strategies' server-side norm re-check accepts any norm (shape/NaN checks stay)."""
    import strategies.base as base

    original = base.aggregate

    def aggregate_unchecked(updates, *, template, w_max, beta, sigma, Z, noise):
        return original(updates, template=template, w_max=1.0, beta=base.UNBOUNDED_NORM, sigma=sigma, Z=Z,
                        noise=noise)

    base.aggregate = aggregate_unchecked
    try:
        yield
    finally:
        base.aggregate = original


@functools.lru_cache(maxsize=512)
def _user_data(cfg_key: tuple, partition_id: int) -> UserData:
    return load_user_data(RunConfig.from_flat(dict(cfg_key)), partition_id)


@functools.lru_cache(maxsize=2)
def _model(cfg_key: tuple):
    cfg = RunConfig.from_flat(dict(cfg_key))
    return new_model(cfg, load_manifest(cfg))


def per_step_clip_client_update(cfg: RunConfig, partition_id: int, weights: list[np.ndarray],
                                ins: TrainInstructions) -> tuple[list[np.ndarray], dict[str, float]]:
    """BROKEN CONTROL (b): like client.app.client_update, but each step's gradient is clipped to beta and
    the update is NOT clipped. Returns the update and its norm (`update_norm`, for the audit report)."""
    from client.app import select

    key = tuple(sorted(cfg.to_flat().items()))
    data = _user_data(key, partition_id)
    model = _model(key)
    set_weights(model, weights)
    rows, omega = select(data, ins)
    w = torch.zeros(len(data.sids), dtype=torch.float32)
    w[torch.as_tensor(rows, dtype=torch.long)] = torch.as_tensor(omega, dtype=torch.float32)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=ins.lr, momentum=ins.momentum)
    model.train()
    rows_t = torch.as_tensor(rows, dtype=torch.long)
    if len(rows_t):
        for _ in range(ins.local_epochs):
            for chunk in rows_t[torch.randperm(len(rows_t))].split(ins.batch_size):
                loss = weighted_loss(per_sentence_loss(model, batch_of(data.encoded, chunk)), w[chunk])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                grads = [p.grad for p in params if p.grad is not None]
                norm = torch.sqrt(sum((g.detach() ** 2).sum() for g in grads))
                factor = torch.clamp(ins.beta / (norm + 1e-12), max=1.0)
                for g in grads:  # the per-STEP gradient clip of the published code
                    g.mul_(factor)
                opt.step()
    delta = [(new - old) * ins.w_u for new, old in zip(get_weights(model), weights)]
    norm = float(np.sqrt(sum(float((d.astype(np.float64) ** 2).sum()) for d in delta)))
    return [np.asarray(d, dtype=np.float32) for d in delta], {"update_norm": norm}


@dataclass
class AuditGrid(LocalGrid):
    """A LocalGrid whose nodes run `client_fn`; metrics of private runs are kept here, never sent."""

    client_fn: ClientFn | None = None
    update_norms: list[float] = field(default_factory=list)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[LocalReply]:
        if self.client_fn is None:
            return super().send_and_receive(messages, timeout=timeout)
        replies = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            self.calls += 1
            ins = TrainInstructions.from_record(msg.content["config"])
            update, metrics = self.client_fn(self.cfg, node, msg.content["arrays"].to_numpy_ndarrays(), ins)
            if "update_norm" in metrics:
                self.update_norms.append(metrics.pop("update_norm"))
            content = RecordDict({"update": ArrayRecord(update)})
            if metrics and not ins.private:
                content["metrics"] = MetricRecord(metrics)
            replies.append(LocalReply(content))
        return replies
