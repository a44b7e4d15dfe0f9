"""The project's server optimizer, as the strategy UeDP's wrapper applies released updates with.

`ModelOptimizer(model, name=, lr=, momentum=)` is what strategies/build.py wraps in uedp.flower.UserEntityDP: it
holds the server's torch model and applies each released (noisy, mean) update to it as a pseudo-gradient,
theta <- theta - lr * g with g = -update (torch SGD, optional momentum; or Adam: server.optimizer), then
returns the model's trainable parameters as the next global arrays. Applying a released update is
post-processing and costs no privacy (docs/mechanism.md step 9). A Flower app wraps Flower's FedAvg / FedAdam instead
(uedp.flower.optimizer); this one keeps the project's torch optimizers (and their exact arithmetic).

It is a Flower Strategy only so that it can be wrapped: it samples, sends and aggregates nothing itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from uedp.errors import ConfigError
from uedp.models.base import get_weights, set_weights, trainable_parameters


class TorchServerOptimizer:
    """Torch SGD or Adam over `model`'s trainable parameters, stepping with -update as the gradient (not the
    Flower-facing uedp.flower.optimizer.ServerOptimizer, which wraps a strategy)."""

    def __init__(self, model: torch.nn.Module, *, name: str, lr: float, momentum: float = 0.0) -> None:
        self.params = [p for _, p in trainable_parameters(model)]
        if lr <= 0:
            raise ConfigError(f"server.lr must be > 0, got {lr}")
        if name == "sgd":
            self.opt: torch.optim.Optimizer = torch.optim.SGD(self.params, lr=lr, momentum=momentum)
        elif name == "adam":
            self.opt = torch.optim.Adam(self.params, lr=lr)
        else:
            raise ConfigError(f"server.optimizer must be sgd or adam, got {name!r}")

    def apply(self, update: Sequence[np.ndarray]) -> None:
        if len(update) != len(self.params):
            raise ValueError(f"update has {len(update)} arrays for {len(self.params)} parameters")
        for p, u in zip(self.params, update):
            p.grad = -torch.as_tensor(np.asarray(u), dtype=p.dtype).reshape(p.shape)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def state_dict(self) -> dict[str, Any]:
        return self.opt.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.opt.load_state_dict(state)


class ModelOptimizer(Strategy):
    """The server's model and its optimizer, applying released updates (module docstring)."""

    def __init__(self, model: torch.nn.Module, *, name: str, lr: float, momentum: float = 0.0) -> None:
        self.model = model
        self.optimizer = TorchServerOptimizer(model, name=name, lr=lr, momentum=momentum)

    def apply_update(self, server_round: int, arrays: ArrayRecord, update: Sequence[np.ndarray]) -> ArrayRecord:
        """Load `arrays` (the current global model: a no-op copy when the model already holds them), apply
        `update` with the optimizer, and return the model's trainable parameters."""
        set_weights(self.model, arrays.to_numpy_ndarrays())
        self.optimizer.apply(update)
        return ArrayRecord(get_weights(self.model))

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)

    def _not_a_round_strategy(self) -> TypeError:
        return TypeError("ModelOptimizer only applies updates for uedp.flower.UserEntityDP; wrap it, do not run it")

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        raise self._not_a_round_strategy()

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None,
                                                                                      MetricRecord | None]:
        raise self._not_a_round_strategy()

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return []

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return None

    def summary(self) -> None:
        return None
