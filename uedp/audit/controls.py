"""Deliberately BROKEN parts of the mechanism, for the audit only (never for a real run).

They mimic the two defects of the paper's published code (contract section 6) so that the audit can show
it detects them. Each is an ordinary component that a run is given in place of the sound one (the server's
`Components` and the client's `ClientRound`, wired by experiments/audit.py); nothing is patched.

(a) too little noise: `ReducedNoise`, a noise source drawing with standard deviation `broken_std(sigma)`
    instead of sigma. The published code uses sigma**2 as the standard deviation; at our scales sigma is
    about 1 or below, where squaring barely changes it (sigma = 0.92 gives 0.85), so we take
    min(sigma**2, sigma / 100): at least 100 times too little noise.
(b) per-step clipping: `clip_each_step`, a client gradient hook that clips each local step's gradient to
    beta over all parameters together, with `UnclippedUpdate`, which returns theta_local - theta_t
    (times w_u) without clipping it, and `unchecked_aggregate`, a server aggregation without the norm
    re-check (the published code has none; ours would re-clip the update to beta and undo the defect).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from uedp.privacy.aggregation import UNBOUNDED_NORM, AggregationStats, aggregate
from uedp.privacy.clipping import Update, scale, update_norm
from uedp.privacy.noise import NoiseSource
from uedp.protocol import TrainInstructions

TOO_LITTLE_NOISE_WARNING = "BROKEN CONTROL: too little noise"
PER_STEP_CLIPPING_WARNING = "BROKEN CONTROL: per-step gradient clipping, no update clip, no server re-check"


def broken_std(sigma: float) -> float:
    """The control's noise standard deviation: min(sigma**2, sigma / 100)."""
    return min(sigma * sigma, sigma / 100.0)


class ReducedNoise:
    """NoiseSource drawing N(0, broken_std(std)^2) from `inner`; remembers the stds asked for and drawn."""

    def __init__(self, inner: NoiseSource) -> None:
        self.inner = inner
        self.reproducible = inner.reproducible
        self.warning = TOO_LITTLE_NOISE_WARNING
        self.asked: set[float] = set()
        self.drawn: set[float] = set()

    def normal(self, shape: tuple[int, ...], std: float) -> np.ndarray:
        self.asked.add(float(std))
        used = broken_std(float(std))
        self.drawn.add(used)
        return self.inner.normal(shape, used)


def unchecked_aggregate(updates: Sequence[Any], *, template: Update, w_max: float, beta: float, sigma: float,
                        Z: float, noise: NoiseSource) -> tuple[dict[str, Any] | list[Any], AggregationStats]:
    """`aggregate` with the norm re-check off (any norm passes; shape and NaN/Inf checks stay)."""
    return aggregate(updates, template=template, w_max=1.0, beta=UNBOUNDED_NORM, sigma=sigma, Z=Z, noise=noise)


def clip_each_step(ins: TrainInstructions, params: Sequence[torch.nn.Parameter]) -> None:
    """The per-STEP gradient clip of the published code: the step's gradient, over all parameters
    together, scaled to norm <= beta (by hand, with torch ops)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    norm = torch.sqrt(sum((g.detach() ** 2).sum() for g in grads))
    factor = torch.clamp(ins.beta / (norm + 1e-12), max=1.0)
    for g in grads:
        g.mul_(factor)


@dataclass
class UnclippedUpdate:
    """Client update bound of control (b): w_u * (theta_local - theta_t), NOT clipped. Records each
    update's norm (kept here, in the audit's process: never sent anywhere)."""

    norms: list[float] = field(default_factory=list)

    def __call__(self, delta: list[np.ndarray], ins: TrainInstructions) -> list[np.ndarray]:
        out = scale(delta, ins.w_u)
        self.norms.append(update_norm(out))
        return out
