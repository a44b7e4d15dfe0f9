"""Local training and evaluation over `EncodedSentences` (tensor slices, no per-sentence Python loop).

`local_train` runs the client's entity-weighted training (docs/mechanism.md step 5): minibatches of the selected
sentences, loss = weighted mean of per-sentence losses with weights omega(x). It trains the model in place
and returns the mean training loss and the number of steps, which callers in private runs must not send
anywhere; the caller takes `theta_local - theta_t` and clips the WHOLE update (uedp.privacy.clipping),
never gradients step by step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from uedp.errors import ConfigError
from uedp.models.base import UedpModel
from uedp.pipeline import EncodedSentences
from uedp.tasks import evaluate, per_sentence_loss, weighted_loss
from uedp.tokenization import Batch


@dataclass(frozen=True)
class LocalTraining:
    """One round's local training settings, sent in the training message's "config" record (the app's own
    settings: uedp.protocol) from the server's `train.*` config (uedp.config.ClientTrainConfig holds the
    defaults: none here, so they cannot drift)."""

    optimizer: str  # sgd | adam
    lr: float
    momentum: float
    local_epochs: int
    local_steps: int  # > 0: exactly this many minibatch steps (cycling), instead of epochs
    batch_size: int

    def __post_init__(self) -> None:
        if self.optimizer not in ("sgd", "adam"):
            raise ConfigError(f"train.optimizer must be sgd or adam, got {self.optimizer!r}")
        if self.lr <= 0 or self.batch_size < 1 or self.local_epochs < 1 or self.local_steps < 0:
            raise ConfigError(f"bad local training settings: {self}")

    @classmethod
    def from_config(cls, train: Any) -> LocalTraining:
        """From uedp.config.ClientTrainConfig (or anything with its fields)."""
        return cls(**{name: getattr(train, name) for name in cls.__dataclass_fields__})

    def to_record(self) -> dict[str, Any]:
        """The message's "config" record (a dict of its values: flwr's ConfigRecord takes it as is)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_record(cls, record: Any) -> LocalTraining:
        """From a training message's "config" record; ValueError naming a missing field."""
        missing = [name for name in cls.__dataclass_fields__ if name not in record]
        if missing:
            raise ValueError(f"training message's config record lacks {', '.join(missing)}")
        return cls(**{name: record[name] for name in cls.__dataclass_fields__})


class LocalOptimizer:
    """SGD (with momentum) or Adam for the client's local steps, written out with tensor ops.

    The same updates as torch.optim.SGD(lr, momentum) (dampening 0, no Nesterov, no weight decay) and
    torch.optim.Adam(lr) (betas 0.9 / 0.999, eps 1e-8): tests/test_training.py compares them step by step.
    Why not torch.optim: constructing one imports torch._dynamo (~1.7 s), and Flower starts a fresh ClientApp
    process for every training message, so each client round would pay it (docs/performance.md,
    "Overhead and round latency")."""

    BETAS = (0.9, 0.999)
    EPS = 1e-8

    def __init__(self, params: list[torch.nn.Parameter], *, name: str, lr: float, momentum: float) -> None:
        if name not in ("sgd", "adam"):
            raise ConfigError(f"unknown optimizer {name!r}; choose sgd or adam")
        self.params, self.name, self.lr, self.momentum = params, name, float(lr), float(momentum)
        self.state: list[dict[str, Any]] = [{} for _ in params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        b1, b2 = self.BETAS
        for p, state in zip(self.params, self.state):
            if p.grad is None:
                continue
            g = p.grad
            if self.name == "sgd":
                if self.momentum:
                    buf = state.get("momentum")
                    state["momentum"] = buf = g.clone() if buf is None else buf.mul_(self.momentum).add_(g)
                    g = buf
                p.add_(g, alpha=-self.lr)
                continue
            t = state["step"] = state.get("step", 0) + 1  # per parameter, as torch counts it
            m = state.setdefault("exp_avg", torch.zeros_like(p)).lerp_(g, 1 - b1)
            v = state.setdefault("exp_avg_sq", torch.zeros_like(p)).mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / math.sqrt(1 - b2**t)).add_(self.EPS)
            p.addcdiv_(m, denom, value=-self.lr / (1 - b1**t))


def batch_of(data: EncodedSentences, rows: torch.Tensor) -> Batch:
    """The rows `rows` of `data` as a Batch, trimmed to the longest selected sentence."""
    mask = data.mask[rows]
    width = int(mask.sum(dim=1).max())
    return Batch(data.ids[rows, :width], mask[:, :width],
                 None if data.labels is None else data.labels[rows], rows)


def _minibatches(n_rows: torch.Tensor, cfg: LocalTraining, gen: torch.Generator) -> Iterator[torch.Tensor]:
    if cfg.local_steps > 0:
        steps = 0
        while True:
            for chunk in n_rows[torch.randperm(len(n_rows), generator=gen)].split(cfg.batch_size):
                yield chunk
                steps += 1
                if steps == cfg.local_steps:
                    return
    for _ in range(cfg.local_epochs):
        yield from n_rows[torch.randperm(len(n_rows), generator=gen)].split(cfg.batch_size)


def local_train(
    model: UedpModel,
    data: EncodedSentences,
    rows: torch.Tensor,
    weights: torch.Tensor,
    cfg: LocalTraining,
    *,
    generator: torch.Generator | None = None,
    before_step: Callable[[list[torch.nn.Parameter]], None] | None = None,
) -> tuple[float, int]:
    """Train `model` in place on `data[rows]` with per-sentence weights `weights[rows]`, on the model's device
    (`data`, `rows` and `weights` stay on the CPU and each minibatch moves to the model; the shuffling draws
    from a CPU generator, so the minibatches are the same on every device).

    `before_step`, if given, is called with the model's parameters (gradients computed) before each
    optimizer step; real runs pass none (the audit's per-step-clipping control does).
    Returns (mean training loss over the steps, number of steps); callers in private runs must not send
    these anywhere."""
    if len(rows) == 0:
        return 0.0, 0
    gen = generator or torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,)).item()))
    params = list(model.parameters())
    device = params[0].device if params else torch.device("cpu")  # the batches follow the model
    opt = LocalOptimizer(params, name=cfg.optimizer, lr=cfg.lr, momentum=cfg.momentum)
    model.train()
    total, steps = 0.0, 0
    for chunk in _minibatches(rows, cfg, gen):
        batch = batch_of(data, chunk)
        if device.type != "cpu":
            batch = batch.to(device)
        loss = weighted_loss(per_sentence_loss(model, batch), weights[chunk])
        opt.zero_grad()
        loss.backward()
        if before_step is not None:
            before_step(params)
        opt.step()
        total += float(loss.detach())
        steps += 1
    return total / max(steps, 1), steps


@torch.no_grad()
def evaluate_encoded(model: UedpModel, data: EncodedSentences, *, batch_size: int = 256) -> dict[str, float]:
    """Whole-set metrics (perplexity, or error / macro-F1) of `model` on `data`."""
    model.eval()
    order = torch.argsort(data.mask.sum(dim=1))  # length-sorted batches: little padding
    return evaluate(model, (batch_of(data, chunk) for chunk in order.split(batch_size)))
