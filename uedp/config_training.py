"""The nodes' local training and the server's optimizer: the `train` and `server` groups of the run
configuration (uedp.config.RunConfig), and the learning-rate schedule the server computes for each round."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from uedp.config_values import show as _show
from uedp.errors import ConfigError

OPTIMIZERS = ("sgd", "adam", "adamw")  # train.optimizer
SERVER_OPTIMIZERS = ("sgd", "adam")  # server.optimizer
LR_SCHEDULES = ("constant", "cosine", "linear")  # train.lr_schedule
# train.* fields the server applies to the round's lr (ClientTrainConfig.for_round): not uedp.training.LocalTraining's
SCHEDULE_FIELDS = ("lr_schedule", "warmup_rounds")


@dataclass
class ClientTrainConfig:
    """The nodes' local training (uedp.training.LocalTraining mirrors the fields it sends; docs/own-model.md,
    "Training options"). The optimizer's state starts fresh every round."""

    optimizer: str = "sgd"  # sgd | adam | adamw (Adam with decoupled weight decay toward the round's start)
    lr: float = 0.5  # the base learning rate; the round's lr follows lr_schedule (the server sends it)
    momentum: float = 0.0  # sgd only
    local_epochs: int = 1
    # exactly this many OPTIMIZER steps (each of grad_accum minibatches), not epochs; None: local_epochs epochs
    local_steps: int | None = None
    batch_size: int = 16  # sentences per minibatch
    # minibatches per optimizer step: the step takes the mean of their gradients (an effective batch of
    # grad_accum * batch_size); privacy is unaffected, the clip bounds the whole update
    grad_accum: int = 1
    # decoupled weight decay toward the round's global weights (p -= lr * weight_decay * (p - p_start)), never toward
    # zero (that would spend clip budget on shrinking the model); optimizers sgd and adamw (adam: use adamw)
    weight_decay: float = 0.0
    # the learning rate over rounds: constant | cosine | linear, a public function of the round number and
    # federation.rounds only (ClientTrainConfig.scheduled_lr), computed by the server, so a resumed run sends the
    # same lr; warmup_rounds: rounds 1..warmup_rounds ramp up linearly to lr first
    lr_schedule: str = "constant"
    warmup_rounds: int = 0

    @staticmethod
    def scheduled_lr(lr: float, schedule: str, warmup_rounds: int, rnd: int, rounds: int) -> float:
        """The learning rate of round `rnd` (1-based) of `rounds`: `lr * rnd / warmup_rounds` while
        rnd <= warmup_rounds; then, with p = (rnd - warmup_rounds - 1) / (rounds - warmup_rounds) (0 at the first
        round after the warmup, below 1 at the last, so no round gets lr 0; rounds past `rounds` take the last
        round's), constant: lr; cosine: lr * (1 + cos(pi * p)) / 2; linear: lr * (1 - p)."""
        if schedule not in LR_SCHEDULES:
            raise ConfigError(f"train.lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got {_show(schedule)}")
        if rnd <= warmup_rounds:
            return lr * rnd / warmup_rounds
        if schedule == "constant":
            return lr
        span = max(rounds - warmup_rounds, 1)
        p = min(rnd - warmup_rounds - 1, span - 1) / span
        return lr * (1 + math.cos(math.pi * p)) / 2 if schedule == "cosine" else lr * (1 - p)

    def schedule_record(self, rounds: int) -> dict[str, Any]:
        """What the training record carries, beside uedp.training.LocalTraining's fields, for the server to
        schedule the lr: federation.rounds as "lr_rounds" (nothing for a constant lr without warmup: the record is
        then the same every round)."""
        if self.lr_schedule == "constant" and self.warmup_rounds == 0:
            return {}
        return {"lr_schedule": self.lr_schedule, "warmup_rounds": self.warmup_rounds, "lr_rounds": rounds}

    @classmethod
    def for_round(cls, record: Mapping[str, Any], rnd: int) -> dict[str, Any]:
        """The training record of round `rnd`: `record` (its "lr" the base lr) with "lr" the round's, when the
        record's lr_schedule / warmup_rounds schedule one (then it must carry "lr_rounds": `schedule_record`);
        unchanged otherwise. The server calls it (uedp.flower.strategy configure_train, with the ledger's round
        number, resumes included)."""
        if record.get("lr_schedule", "constant") == "constant" and int(record.get("warmup_rounds", 0)) == 0:
            return dict(record)
        if "lr_rounds" not in record:
            raise ValueError("the training record schedules the lr (lr_schedule, warmup_rounds) but lacks lr_rounds, "
                             "the planned rounds: add uedp.config.ClientTrainConfig.schedule_record(rounds)")
        lr = cls.scheduled_lr(float(record["lr"]), str(record["lr_schedule"]), int(record["warmup_rounds"]), rnd,
                              int(record["lr_rounds"]))
        return {**record, "lr": lr}


@dataclass
class ServerConfig:
    optimizer: str = "sgd"  # sgd | adam
    lr: float = 1.0
    momentum: float = 0.0
