"""Deliberately BROKEN parts of the mechanism, for the audit only (never for a real run).

They mimic the two defects of the paper's published code (docs/mechanism.md section 6) so that the audit can show
it detects them. Each is an ordinary component that a run is given in place of the sound one (the server's
`Components`, the client's `ClientRound` and its mod, wired by studies/audit.py); nothing is patched.

(a) too little noise: `ReducedNoise`, a noise source drawing with standard deviation `broken_std(sigma)`
    instead of sigma. The published code uses sigma**2 as the standard deviation; at our scales sigma is
    about 1 or below, where squaring barely changes it (sigma = 0.92 gives 0.85), so we take
    min(sigma**2, sigma / 100): at least 100 times too little noise.
(b) per-step clipping: `clip_each_step`, a client gradient hook that clips each local step's gradient to
    beta over all parameters together, with `UnclippedUpdate`, the client mod's bound (uedp.flower.mod:
    `UeDPMod(bound=UnclippedUpdate())`) returning theta_local - theta_t (times w_u) without clipping it, and
    `unchecked_aggregate`, a server aggregation without the norm re-check (the published code has none;
    ours would re-clip the update to beta and undo the defect).

The controls of the crafted-update audit (uedp.audit.mechanism, docs/audit.md Findings 9-10) are below:
`ScaledNoise` (noise std halved), `understated_sampling` (the accountant told q_u / 2), the sensitivity
rules `sensitivities_entity_k_beta` (s_e = k_cap b) and `sensitivities_without_user_term` (s_u dropped),
and the undetected-entity bounds `undetected_double_count` (the four-point mixture at p = q_u^2 q_s) and
`undetected_four_point_qu_qs` (p = q_u q_s: a bound no lemma covers; audited as a probe).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from uedp.privacy.aggregation import UNBOUNDED_NORM, AggregationStats, aggregate
from uedp.privacy.clipping import Update, scale, update_norm
from uedp.privacy.ledger import RoundRecord
from uedp.privacy.noise import NoiseSource
from uedp.privacy.pairs import Mixture
from uedp.privacy.sensitivity import Sensitivities, sensitivities
from uedp.protocol import RoundInstructions

TOO_LITTLE_NOISE_WARNING = "BROKEN CONTROL: too little noise"
PER_STEP_CLIPPING_WARNING = "BROKEN CONTROL: per-step gradient clipping, no update clip, no server re-check"


def broken_std(sigma: float) -> float:
    """The control's noise standard deviation: min(sigma**2, sigma / 100)."""
    return min(sigma * sigma, sigma / 100.0)


class _WrongStdNoise:
    """NoiseSource drawing from `inner` with the wrong standard deviation `self.used(std)` instead of the std
    it is asked for (which the caller still reports); remembers the stds asked for and drawn."""

    warning: str

    def __init__(self, inner: NoiseSource) -> None:
        self.inner = inner
        self.reproducible = inner.reproducible
        self.mode = getattr(inner, "mode", "unrecorded")
        self.asked: set[float] = set()
        self.drawn: set[float] = set()

    def used(self, std: float) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def normal(self, shape: tuple[int, ...], std: float) -> np.ndarray:
        self.asked.add(float(std))
        used = self.used(float(std))
        self.drawn.add(used)
        return self.inner.normal(shape, used)


class ReducedNoise(_WrongStdNoise):
    """NoiseSource drawing N(0, broken_std(std)^2) from `inner`; remembers the stds asked for and drawn."""

    warning = TOO_LITTLE_NOISE_WARNING

    def used(self, std: float) -> float:
        return broken_std(std)


def unchecked_aggregate(updates: Sequence[Any], *, template: Update, w_max: float, beta: float, sigma: float,
                        denominator: float, noise: NoiseSource) -> tuple[dict[str, Any] | list[Any], AggregationStats]:
    """`aggregate` with the norm re-check off (any norm passes; shape and NaN/Inf checks stay)."""
    return aggregate(updates, template=template, w_max=1.0, beta=UNBOUNDED_NORM, sigma=sigma, denominator=denominator,
                     noise=noise)


def clip_each_step(ins: RoundInstructions, params: Sequence[torch.nn.Parameter]) -> None:
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

    def __call__(self, delta: list[np.ndarray], ins: RoundInstructions) -> list[np.ndarray]:
        out = scale(delta, ins.w_u)
        self.norms.append(update_norm(out))
        return out


# -- Controls of the crafted-update audit of the mechanism (uedp/audit/mechanism.py) ------------------
# Each is ONE wrong component handed to the real aggregation path or to the accountant; the rest is real.
HALVED_NOISE_WARNING = "BROKEN CONTROL: noise standard deviation halved"
ENTITY_TERM_WARNING = "BROKEN CONTROL: s_e computed as k_cap * w_max * beta (not 2 k_cap w_max beta)"
NO_USER_TERM_WARNING = "BROKEN CONTROL: the s_u term dropped from sigma and from the accountant"
HALVED_RATE_WARNING = "BROKEN CONTROL: the accountant is told q_u / 2"
DOUBLE_COUNT_WARNING = ("BROKEN CONTROL: eps_undetected claimed as the four-point mixture [0, s_u, s_s, s_u+s_s] "
                        "at p = q_u^2 q_s (the holder's cohort coin counted twice)")
UNPROVED_BOUND_WARNING = ("UNPROVED RULE: eps_undetected claimed as the four-point mixture [0, s_u, s_s, s_u+s_s] "
                          "at p = q_u q_s (no lemma covers it)")


class ScaledNoise(_WrongStdNoise):
    """NoiseSource drawing N(0, (factor * std)^2) from `inner` (factor 0.5: the noise std halved). The caller
    still asks for, and reports, the sound std; remembers the stds asked for and drawn."""

    def __init__(self, inner: NoiseSource, factor: float) -> None:
        if not float(factor) > 0.0:
            raise ValueError(f"factor must be positive, got {factor!r}")
        super().__init__(inner)
        self.factor = float(factor)
        self.warning = HALVED_NOISE_WARNING if self.factor == 0.5 else f"BROKEN CONTROL: noise std x {factor}"

    def used(self, std: float) -> float:
        return self.factor * std


def sensitivities_entity_k_beta(*, beta: float, w_max: float, m_max: int | None, k_cap: int | None,
                                rule: str = "uedp") -> Sensitivities:
    """`uedp.privacy.sensitivity.sensitivities` with the entity term wrong: s_e = k_cap * w_max * beta (a
    holder's change taken as beta, as the paper's Lemma 1 does, instead of 2 beta)."""
    sound = sensitivities(beta=beta, w_max=w_max, m_max=m_max, k_cap=k_cap, rule=rule)
    if k_cap is None:
        return dataclasses.replace(sound, s_e=0.5 * sound.s_e)
    return dataclasses.replace(sound, s_e=k_cap * sound.unit)


def sensitivities_without_user_term(*, beta: float, w_max: float, m_max: int | None, k_cap: int | None,
                                    rule: str = "uedp") -> Sensitivities:
    """`uedp.privacy.sensitivity.sensitivities` with the user term forgotten: s_u = 0."""
    sound = sensitivities(beta=beta, w_max=w_max, m_max=m_max, k_cap=k_cap, rule=rule)
    return dataclasses.replace(sound, s_u=0.0)


def understated_sampling(record: RoundRecord, factor: float = 0.5) -> RoundRecord:
    """The round as a broken accountant is told it: users sampled with q_u * factor (they really are
    sampled with record.q_u)."""
    return dataclasses.replace(record, q_u=record.q_u * float(factor))


def undetected_four_point(sens: Sensitivities, sigma: float, *, q_u: float, p: float) -> Mixture:
    """N(0) against the four-point mixture [0, s_u, s_s, s_u + s_s] with probabilities [(1-q_u)(1-p),
    q_u(1-p), (1-q_u)p, q_u p]: the first (unproved) bound for eps_undetected with the S-coin's rate replaced by p
    (in the units of `sens`)."""
    s_u, s_s = sens.s_u, sens.s_s
    return Mixture(sigma=sigma, sensitivities=(0.0, s_u, s_s, s_u + s_s),
                   probs=((1 - q_u) * (1 - p), q_u * (1 - p), (1 - q_u) * p, q_u * p))


def undetected_double_count(sens: Sensitivities, sigma: float, *, q_u: float, q_e: float, q_s: float) -> Mixture:
    """The BROKEN undetected accountant: the four-point mixture at p = q_u^2 q_s. The holder's sentence is
    used with probability q_u q_s (its cohort coin and its S-coin), and the mixture multiplies by q_u once
    more for u''s coin, so the holder's coin is counted twice."""
    return undetected_four_point(sens, sigma, q_u=q_u, p=q_u * q_u * q_s)


def undetected_four_point_qu_qs(sens: Sensitivities, sigma: float, *, q_u: float, q_e: float,
                                q_s: float) -> Mixture:
    """A bound no lemma covers (a 1-D counterexample exceeds it in one direction at one round): the
    four-point mixture at p = q_u q_s. Not a deliberately broken component: the audit tries to certify a
    violation of it (docs/audit.md, "The crafted-update audit of the mechanism")."""
    return undetected_four_point(sens, sigma, q_u=q_u, p=q_u * q_s)
