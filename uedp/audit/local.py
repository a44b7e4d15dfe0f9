"""Crafted-document audit of the local mechanisms (DP-BART-CLV and the ADePT mechanism on our model; docs/proofs.md
section 10, docs/audit.md, "The crafted-document audit of the local mechanisms").

The auditor picks the two documents: it crafts their encoder outputs z0, z1 itself (a local mechanism must hold
for ANY two documents, so any pair of outputs the encoder could produce is fair game), runs the mechanism's real
`privatize` on each, many times, with noise from a seeded generator (an audit: reproducible), and turns the
Neyman-Pearson test of the two output laws into an epsilon lower bound (uedp.audit.bounds.epsilon_lower_bound:
threshold on half of the trials, Clopper-Pearson bound on the other half).

The pairs try to REALIZE the loose case of each sensitivity, i.e. the largest movement of the clipped output:
  - norm clip (ADePT): z1 = -z0 with ||z0|| >= C, so the clipped outputs are 2C apart in L2; for Laplace, z0 with
    all n coordinates equal, so they are also 2C sqrt(n) apart in L1 (Cauchy-Schwarz is tight there);
  - value clip (CLV): z0 = C * (1, ..., 1) and z1 = -z0, the opposite corners of the box: 2C sqrt(n) in L2 and
    2C n in L1.
Scores: the log-likelihood ratio of the two worlds' output laws at the release y (for Gaussian noise a linear
statistic, (y . (c1 - c0)); for Laplace sum_i (|y_i - c0_i| - |y_i - c1_i|) / b), with c0, c1 the clipped outputs.

Variants (`LOCAL_VARIANTS`): the sound mechanisms, and "adept-published": the norm clip with sigma calibrated to
ADePT's published sensitivity C (Krishna et al. 2021) instead of 2C: a broken variant the audit must certify ABOVE
its claim. The "true" epsilon of each pair is that of the mechanism's noise on the realized gap, computed
independently (dp_accounting's Gaussian PLD; the Laplace ratio gap / b), so the table shows claim, truth and bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from uedp.audit.bounds import LowerBound, epsilon_lower_bound
from uedp.rewriting.mechanism import ClvMechanism, NormClipMechanism, norm_sensitivities


class PublishedAdeptMechanism(NormClipMechanism):
    """BROKEN on purpose (audit only): the norm clip with ADePT's published sensitivity C (L1 C sqrt(n)), half the
    true one, so its noise is about half of what its claim needs."""

    def _sensitivities(self) -> tuple[float, float]:
        l2, l1 = norm_sensitivities(self.length, self.dim, self.clip)
        return l2 / 2.0, l1 / 2.0


@dataclass(frozen=True)
class LocalVariant:
    name: str
    clipping: str  # "norm" | "value"
    sound: bool
    noise: str = "gaussian"

    def mechanism(self, epsilon: float, delta: float, *, length: int, dim: int, clip: float):
        cls = ClvMechanism if self.clipping == "value" else NormClipMechanism if self.sound else \
            PublishedAdeptMechanism
        return cls(epsilon=epsilon, delta=delta if self.noise == "gaussian" else 0.0, dim=dim, length=length,
                   clip=clip, noise=self.noise)


LOCAL_VARIANTS = {v.name: v for v in (
    LocalVariant("adept", "norm", True),
    LocalVariant("adept-laplace", "norm", True, "laplace"),
    LocalVariant("clv", "value", True),
    LocalVariant("clv-laplace", "value", True, "laplace"),
    LocalVariant("adept-published", "norm", False),
    LocalVariant("adept-published-laplace", "norm", False, "laplace"),
)}


def crafted_pair(variant: LocalVariant, *, length: int, dim: int, clip: float) -> tuple[np.ndarray, np.ndarray]:
    """The auditor's two encoder outputs (length, dim) realizing the variant's loose case (module docstring)."""
    if variant.clipping == "value":
        z0 = np.full((length, dim), clip)
    elif variant.noise == "laplace":
        z0 = np.full((length, dim), 3.0 * clip)  # all coordinates equal, norm 3C sqrt(n) >= C: clipped onto the sphere
    else:
        z0 = np.random.default_rng(12345).standard_normal((length, dim))
        z0 *= 3.0 * clip / np.linalg.norm(z0)
    return z0, -z0


def true_epsilon(mech, c0: np.ndarray, c1: np.ndarray, delta: float) -> float:
    """The epsilon of the mechanism's noise on the realized pair (c0, c1 the clipped outputs), independently of the
    mechanism's own calibration: Gaussian, dp_accounting's PLD with noise multiplier sigma / ||c1 - c0||_2 read at
    delta; Laplace, ||c1 - c0||_1 / b (exact)."""
    if mech.noise == "laplace":
        return float(np.abs(c1 - c0).sum() / mech.sigma)
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    gap = float(np.linalg.norm(c1 - c0))
    pld = pld_lib.from_gaussian_mechanism(mech.sigma / gap, value_discretization_interval=1e-3)
    return float(pld.get_epsilon_for_delta(delta))


def scores(mech, c0: np.ndarray, c1: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The log-likelihood ratio log p1(y) / p0(y) of each release y (trials, length, dim)."""
    if mech.noise == "laplace":
        return (np.abs(y - c0).sum(axis=(1, 2)) - np.abs(y - c1).sum(axis=(1, 2))) / mech.sigma
    d = (c1 - c0).ravel()
    flat = y.reshape(len(y), -1)
    return (flat @ d - 0.5 * (c1.ravel() @ c1.ravel() - c0.ravel() @ c0.ravel())) / mech.sigma ** 2


@dataclass(frozen=True)
class LocalAuditRow:
    variant: str
    sound: bool
    noise: str
    claim: float
    true_eps: float
    gap_l2: float
    gap_l1: float
    bound: LowerBound

    @property
    def verdict(self) -> str:
        if self.bound.eps_lb > self.claim:
            return "VIOLATION certified (lower bound above the claim)"
        return "consistent (lower bound at or below the claim)"


def audit_variant(name: str, *, epsilon: float, delta: float = 1e-5, trials: int = 200_000, length: int = 3,
                  dim: int = 8, clip: float = 1.0, seed: int = 0, chunk: int = 50_000) -> LocalAuditRow:
    """`trials` releases of each crafted document through the real `privatize` (seeded: an audit), and the bound."""
    variant = LOCAL_VARIANTS[name]
    mech = variant.mechanism(epsilon, delta, length=length, dim=dim, clip=clip)
    z0, z1 = crafted_pair(variant, length=length, dim=dim, clip=clip)
    c0, c1 = mech.clamp(z0), mech.clamp(z1)
    rng = np.random.default_rng(seed)
    per_world = []
    for z in (z0, z1):
        out = []
        for start in range(0, trials, chunk):
            batch = np.broadcast_to(z, (min(chunk, trials - start), length, dim))
            out.append(scores(mech, c0, c1, mech.privatize(batch, rng)))
        per_world.append(np.concatenate(out))
    bound = epsilon_lower_bound(per_world[0], per_world[1], delta=mech.delta)
    return LocalAuditRow(variant=name, sound=variant.sound, noise=variant.noise, claim=epsilon,
                         true_eps=true_epsilon(mech, c0, c1, max(mech.delta, 1e-300)) if variant.noise == "gaussian"
                         else true_epsilon(mech, c0, c1, 0.0),
                         gap_l2=float(np.linalg.norm(c1 - c0)), gap_l1=float(np.abs(c1 - c0).sum()), bound=bound)


def is_consistent(row: LocalAuditRow) -> bool:
    """A sound variant's bound must stay at or below its claim (up to nothing: the bound is a 95% lower bound)."""
    return row.bound.eps_lb <= row.claim and (not math.isfinite(row.true_eps) or row.bound.eps_lb <= row.true_eps)
