"""Local training and evaluation over `EncodedSentences` (tensor slices, no per-sentence Python loop).

`local_train` runs the client's entity-weighted training (docs/mechanism.md step 5): minibatches of the selected
sentences, loss = weighted mean of per-sentence losses with weights omega(x). It trains the model in place
and returns the mean training loss and the number of optimizer steps, which callers in private runs must not
send anywhere; the caller takes `theta_local - theta_t` and clips the WHOLE update (uedp.privacy.clipping),
never gradients step by step.

- Gradient accumulation (`grad_accum` = k): each optimizer step takes the mean of the gradients of k consecutive
  minibatches (the last step of a run may have fewer). `local_steps` counts optimizer steps (k minibatches each).
- The optimizer (sgd, adam, adamw) and its state start fresh every round: `local_train` builds it. Weight decay
  is decoupled and pulls toward the round's global weights p_start (the weights `local_train` starts from), never
  toward zero: p -= lr * weight_decay * (p - p_start), before the optimizer's own update (torch's AdamW order).
- The learning rate is the one the training message carries: the server computes each round's from the
  schedule (uedp.config.ClientTrainConfig.scheduled_lr), so a node never schedules anything itself.
- Precision (uedp.models.precision): the forward runs under the model's autocast (uedp.tasks); a float16 model
  trains with dynamic loss scaling (a step with non-finite gradients is skipped and still counts). The
  training loss is summed on the model's device and read once at the end (no host wait per step).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from uedp.config_values import from_wire, to_wire
from uedp.errors import ConfigError
from uedp.models.base import UedpModel
from uedp.models.precision import LossScaler, needs_loss_scaling, prepare
from uedp.prepare.encoding import EncodedSentences
from uedp.tasks import evaluate, per_sentence_loss, weighted_loss
from uedp.tokenization import Batch


@dataclass(frozen=True)
class LocalTraining:
    """One round's local training settings, sent in the training message's "config" record (the app's own
    settings: uedp.protocol) from the server's `train.*` config: ClientTrainConfig's fields except the lr
    schedule's (uedp.config.SCHEDULE_FIELDS: the server applies them to `lr` before sending). The defaults live in
    uedp.config.ClientTrainConfig only, so they cannot drift: a caller that builds one by hand writes
    `LocalTraining.from_config(ClientTrainConfig(optimizer="adam", lr=3e-3))`."""

    optimizer: str  # sgd | adam | adamw
    lr: float  # this round's learning rate (the server applies train.lr_schedule: ClientTrainConfig.for_round)
    momentum: float
    local_epochs: int
    local_steps: int | None  # exactly this many optimizer steps (cycling), instead of epochs; None: local_epochs
    batch_size: int
    grad_accum: int  # minibatches per optimizer step (the mean of their gradients)
    weight_decay: float  # decoupled, toward the round's start weights (sgd and adamw)

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"train.optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if not (self.lr > 0 and self.batch_size >= 1 and self.local_epochs >= 1
                and (self.local_steps is None or self.local_steps >= 1)
                and self.grad_accum >= 1 and self.weight_decay >= 0):
            raise ConfigError(f"bad local training settings: {self}")
        if self.weight_decay > 0 and self.optimizer == "adam":
            raise ConfigError("train.weight_decay applies to train.optimizer sgd or adamw; with adam choose adamw")

    @classmethod
    def from_config(cls, train: Any) -> LocalTraining:
        """From uedp.config.ClientTrainConfig (or anything with its fields; local_steps 0 reads as None)."""
        return cls(**{name: from_wire(f"train.{name}", getattr(train, name)) for name in cls.__dataclass_fields__})

    def to_record(self) -> dict[str, Any]:
        """The message's "config" record (a dict of its values: flwr's ConfigRecord takes it as is; it has no
        None, so local_steps None travels as its run-config number, uedp.config_values.to_wire)."""
        return {name: to_wire(f"train.{name}", getattr(self, name)) for name in self.__dataclass_fields__}

    @classmethod
    def from_record(cls, record: Any) -> LocalTraining:
        """From a training message's "config" record; ValueError naming a missing field (the record's other keys,
        e.g. "server-round" and the schedule's, are not read)."""
        missing = [name for name in cls.__dataclass_fields__ if name not in record]
        if missing:
            raise ValueError(f"training message's config record lacks {', '.join(missing)}")
        return cls(**{name: from_wire(f"train.{name}", record[name]) for name in cls.__dataclass_fields__})


OPTIMIZERS = ("sgd", "adam", "adamw")


class LocalOptimizer:
    """SGD (with momentum), Adam or AdamW for the client's local steps, written out with tensor ops.

    The same updates as torch.optim.SGD(lr, momentum) (dampening 0, no Nesterov), torch.optim.Adam(lr) and
    torch.optim.AdamW(lr, weight_decay) (betas 0.9 / 0.999, eps 1e-8), except that weight decay is decoupled and
    pulls toward `start` (the round's global weights), not toward zero: p -= lr * weight_decay * (p - p_start),
    applied before the update as AdamW does (so AdamW here on p equals torch's AdamW on p - p_start);
    tests/test_training.py compares them step by step. One is built per round: its state (momentum, moments,
    step counts) starts fresh every round and never leaves the node.
    Why not torch.optim: constructing one imports torch._dynamo (~1.7 s), and Flower starts a fresh ClientApp
    process for every training message, so each client round would pay it (docs/performance.md,
    "Overhead and round latency")."""

    BETAS = (0.9, 0.999)
    EPS = 1e-8

    def __init__(self, params: list[torch.nn.Parameter], *, name: str, lr: float, momentum: float,
                 weight_decay: float = 0.0, start: list[torch.Tensor] | None = None) -> None:
        if name not in OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
        if weight_decay and name == "adam":
            raise ConfigError("train.weight_decay applies to train.optimizer sgd or adamw; with adam choose adamw")
        self.params, self.name, self.lr, self.momentum = params, name, float(lr), float(momentum)
        self.weight_decay = float(weight_decay)
        # the weights the decay pulls toward: the round's start (copied here unless given)
        self.start = ([p.detach().clone() for p in params] if start is None else start) if self.weight_decay else []
        self.state: list[dict[str, Any]] = [{} for _ in params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        b1, b2 = self.BETAS
        for i, (p, state) in enumerate(zip(self.params, self.state)):
            if p.grad is None:
                continue
            g = p.grad
            if self.weight_decay:  # decoupled, toward the round's start
                p.sub_(p - self.start[i], alpha=self.lr * self.weight_decay)
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
    if cfg.local_steps is not None:
        steps, wanted = 0, cfg.local_steps * cfg.grad_accum  # local_steps counts optimizer steps
        while True:
            for chunk in n_rows[torch.randperm(len(n_rows), generator=gen)].split(cfg.batch_size):
                yield chunk
                steps += 1
                if steps == wanted:
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

    Each optimizer step takes the mean gradient of `cfg.grad_accum` minibatches (module docstring); a float16
    model's loss is scaled (uedp.models.precision.LossScaler) and a step with non-finite gradients skipped.
    `before_step`, if given, is called with the model's parameters (gradients computed, and unscaled) before each
    optimizer step; real runs pass none (the audit's per-step-clipping control does).
    Returns (mean training loss over the minibatches, number of optimizer steps); callers in private runs must
    not send these anywhere."""
    if len(rows) == 0:
        return 0.0, 0
    gen = generator or torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,)).item()))
    prepare(model)  # mixed precision's cast rules (a no-op in float32): trainable weights float32 from here on
    params = list(model.parameters())
    device = params[0].device if params else torch.device("cpu")  # the batches follow the model
    trainable = [p for p in params if p.requires_grad]
    # the trained weights only: frozen ones get no gradient, and the decay copies only what it pulls back
    opt = LocalOptimizer(trainable, name=cfg.optimizer, lr=cfg.lr, momentum=cfg.momentum,
                         weight_decay=cfg.weight_decay)
    scaler = LossScaler() if needs_loss_scaling(model) else None
    model.train()
    # the summed loss stays on the device (read once at the end); float64 sums as Python's floats did (mps: float32)
    total = torch.zeros((), dtype=torch.float32 if device.type == "mps" else torch.float64, device=device)
    k = cfg.grad_accum
    steps, pending = 0, 0
    opt.zero_grad()

    def step(n: int) -> None:
        """The optimizer step on the mean gradient of the last `n` minibatches (each backward took loss / k)."""
        if n != k:  # a partial last group: the mean over its own minibatches
            with torch.no_grad():
                for p in trainable:
                    if p.grad is not None:
                        p.grad.mul_(k / n)
        finite = scaler.unscale(trainable) if scaler is not None else True
        if finite:
            if before_step is not None:
                before_step(params)
            opt.step()
        if scaler is not None:
            scaler.update(finite)
        opt.zero_grad()

    minibatches = 0
    for chunk in _minibatches(rows, cfg, gen):
        batch = batch_of(data, chunk)
        if device.type != "cpu":
            batch = batch.to(device)
        loss = weighted_loss(per_sentence_loss(model, batch), weights[chunk])
        scaled = loss if k == 1 else loss / k
        (scaled if scaler is None else scaler.scaled(scaled)).backward()
        total += loss.detach()
        minibatches += 1
        pending += 1
        if pending == k:
            step(pending)
            steps, pending = steps + 1, 0
    if pending:
        step(pending)
        steps += 1
    return float(total) / max(minibatches, 1), steps


@torch.no_grad()
def evaluate_encoded(model: UedpModel, data: EncodedSentences, *, batch_size: int = 256) -> dict[str, float]:
    """Whole-set metrics (perplexity, or error / macro-F1) of `model` on `data`."""
    model.eval()
    order = torch.argsort(data.mask.sum(dim=1))  # length-sorted batches: little padding
    return evaluate(model, (batch_of(data, chunk) for chunk in order.split(batch_size)))
