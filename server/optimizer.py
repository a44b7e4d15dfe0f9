"""The server optimizer: applies the released (noisy, averaged) update as a pseudo-gradient.

theta <- theta - lr * g with g = -update (SGD, optional momentum; or Adam). This is post-processing of the
released update and costs no privacy (contract step 9).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from uedp.errors import ConfigError
from uedp.models.base import trainable_parameters


class ServerOptimizer:
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
