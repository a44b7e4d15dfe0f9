"""Dominating pairs of distributions (docs/proofs.md section 3): what one round of a mechanism looks like to
an adversary telling two neighbouring datasets apart, as scalar distributions in units of w_max * beta.

  Mixture     N(0) against a mixture of shifted Gaussians, both directions (add and remove), like
              dp-accounting's PLDAccountant's default ADD_OR_REMOVE_ONE; `dp_event()` is the same mechanism as
              a dp-accounting event. A two-point mixture {0: 1-q, s: q} is the Poisson-subsampled Gaussian
              with noise multiplier sigma / s and uses dp-accounting's faster closed form.
  RemoveForm  a mixture whose REMOVE distribution bounds both directions (docs/proofs.md Lemma D),
              symmetrized into a dominating pair (`symmetrized`, Lemma E)
  Labelled    the adversary is told which part happened: the weighted mixture of the parts' privacy loss
              distributions (dp-accounting's `compute_mixture`, Lemma B(iii))
  NumericPair two 1-D mixtures integrated numerically (uedp.privacy.numeric)

The pairs of the accounting's adjacencies: `adjacency_mixture` ("uedp": the four-point mixture of a user and
an entity; "user": the two-point one) and `undetected_pair` (one bound of eps_undetected, docs/proofs.md
Theorem 2: `UNDETECTED_FREE` for an entity-free sentence, `UNDETECTED_WITH_ENTITIES` for a sentence with
detected entities). Their epsilons: uedp.privacy.composition; of a mechanism's rounds: uedp.privacy.accounting.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from uedp.privacy.numeric import NumericPair
from uedp.privacy.sensitivity import Sensitivities

# eps_undetected's proved bounds (docs/proofs.md Theorem 2), by the kind of sentence the undetected entity sits in
UNDETECTED_FREE = ("four_point_S", "revealed_L", "lps")
UNDETECTED_WITH_ENTITIES = ("revealed_L_entity", "lps_entity")
UNDETECTED_BOUNDS = (*UNDETECTED_FREE, *UNDETECTED_WITH_ENTITIES)


@dataclass(frozen=True)
class Mixture:
    """A scalar mixture-of-Gaussians mechanism: shift sensitivities[i] with probability probs[i], noise std
    sigma, against N(0, sigma^2) (add and remove directions). Zero-probability components are dropped and
    equal sensitivities merged at construction."""

    sigma: float
    sensitivities: tuple[float, ...]
    probs: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.sensitivities) != len(self.probs) or not self.probs:
            raise ValueError("a mixture needs as many probabilities as sensitivities (at least one)")
        if not math.isclose(sum(self.probs), 1.0, abs_tol=1e-9) or min(self.probs) < 0.0:
            raise ValueError(f"mixture probabilities must be >= 0 and sum to 1, got {self.probs}")
        merged: dict[float, float] = {}
        for s, p in zip(self.sensitivities, self.probs):
            if s < 0.0 or math.isnan(s):
                raise ValueError(f"sensitivities must be >= 0, got {s!r}")
            if p > 0.0:
                merged[float(s)] = merged.get(float(s), 0.0) + float(p)
        object.__setattr__(self, "sensitivities", tuple(sorted(merged)))
        object.__setattr__(self, "probs", tuple(merged[s] for s in sorted(merged)))
        object.__setattr__(self, "sigma", float(self.sigma))

    @property
    def is_null(self) -> bool:
        """The output distribution does not depend on the neighbour (epsilon 0)."""
        return max(self.sensitivities) == 0.0

    @property
    def is_blatant(self) -> bool:
        """No noise, or an unbounded shift with positive probability (epsilon infinite)."""
        return not self.is_null and (self.sigma == 0.0 or math.isinf(max(self.sensitivities)))

    @property
    def max_shift(self) -> float:
        return max(self.sensitivities)

    @property
    def zero_mass(self) -> float:
        """The probability of no shift."""
        return sum(p for s, p in zip(self.sensitivities, self.probs) if s == 0.0)

    def rdp_event(self) -> dp_accounting.DpEvent:
        """A dominating Poisson-subsampled Gaussian: the largest shift, with probability 1 - P(shift 0)."""
        return _subsampled_gaussian_event(self.sigma, self.max_shift, 1.0 - self.zero_mass)

    def dp_event(self) -> dp_accounting.DpEvent:
        """This very mechanism as a dp-accounting event (for dp-accounting's own accountants; `pld` builds
        the same distributions, cached): NoOpDpEvent if null, NonPrivateDpEvent if blatant, a two-point
        mixture {0: 1-q, s: q} as PoissonSampledDpEvent(q, GaussianDpEvent(sigma / s)) (GaussianDpEvent if
        q = 1), as `pld`'s fast path, and otherwise MixtureOfGaussiansDpEvent(sigma, sensitivities, probs)."""
        if self.is_null:
            return dp_accounting.NoOpDpEvent()
        if self.is_blatant:
            return dp_accounting.NonPrivateDpEvent()
        nonzero = [(s, p) for s, p in zip(self.sensitivities, self.probs) if s > 0.0]
        if len(nonzero) == 1:
            ((s, q),) = nonzero
            gaussian = dp_accounting.GaussianDpEvent(self.sigma / s)
            return gaussian if q >= 1.0 else dp_accounting.PoissonSampledDpEvent(q, gaussian)
        return dp_accounting.dp_event.MixtureOfGaussiansDpEvent(self.sigma, list(self.sensitivities), list(self.probs))

    def pld(self, value_discretization_interval: float) -> pld_lib.PrivacyLossDistribution:
        """The add-or-remove PLD. A mixture {0: 1-q, s: q} (or {s: 1}) is the Poisson-subsampled Gaussian
        with noise multiplier sigma / s: dp-accounting's closed form for it is the same distribution and
        ~20x faster to build than the general mixture code (the tests check that both agree)."""
        if self.is_null or self.is_blatant:
            raise ValueError("a null or blatant mixture has no finite PLD")
        nonzero = [(s, p) for s, p in zip(self.sensitivities, self.probs) if s > 0.0]
        if len(nonzero) == 1:
            ((s, q),) = nonzero
            return pld_lib.from_gaussian_mechanism(
                self.sigma / s, sampling_prob=q, value_discretization_interval=value_discretization_interval
            )
        return self.mixture_pld(value_discretization_interval)

    def mixture_pld(self, value_discretization_interval: float) -> pld_lib.PrivacyLossDistribution:
        """The PLD from dp-accounting's general mixture-of-Gaussians code (add and remove)."""
        return pld_lib.from_mixture_gaussian_mechanism(
            self.sigma,
            list(self.sensitivities),
            list(self.probs),
            value_discretization_interval=value_discretization_interval,
        )


def _subsampled_gaussian_event(sigma: float, shift: float, q: float) -> dp_accounting.DpEvent:
    gaussian = dp_accounting.GaussianDpEvent(sigma / shift)
    return gaussian if q >= 1.0 else dp_accounting.PoissonSampledDpEvent(q, gaussian)


def symmetrized(pmf: pld_lib.pld_pmf.PLDPmf) -> pld_lib.PrivacyLossDistribution:
    """The symmetric pair whose privacy profile delta(eps), eps >= 0, is that of `pmf`: its masses at
    losses l > 0 kept, mirrored at -l with weight e^-l, the rest at 0 (docs/proofs.md Lemma E). A bound of
    both directions of a pair by one profile for g >= 1 makes this pair a dominating pair in the sense the
    composition theorem needs (it also covers the divergences at g < 1); the remove PMF alone does not.
    The mass left at 0 is >= 0 for every PS_r(s) remove PMF (and mixtures of them), checked here."""
    dense = pmf.to_dense_pmf()
    disc, lower, probs = dense._discretization, dense._lower_loss, dense._probs  # noqa: SLF001 - no accessors
    infinity = dense._infinity_mass  # noqa: SLF001
    losses = np.arange(lower, lower + len(probs))
    pos = losses > 0
    top = int(losses[pos].max()) if pos.any() else 0
    out = np.zeros(2 * top + 1)
    out[top + losses[pos]] = probs[pos]
    out[top - losses[pos]] += probs[pos] * np.exp(-losses[pos] * disc)
    zero = 1.0 - float(out.sum()) - float(infinity)
    if zero < -1e-9:
        raise ValueError(f"no symmetric pair has this profile (mass at loss 0 would be {zero:.3g})")
    out[top] += max(zero, 0.0)
    return pld_lib.PrivacyLossDistribution(pld_lib.pld_pmf.DensePLDPmf(disc, -top, out, float(infinity), True))


@dataclass(frozen=True)
class RemoveForm:
    """A mixture whose REMOVE distribution (the privacy loss of the shifted mixture against N(0)) bounds
    both directions of the true pair for g >= 1 (docs/proofs.md Lemma D): the symmetrized pair of that
    profile (`symmetrized`, Lemma E), a dominating pair for composition."""

    mixture: Mixture

    @property
    def sigma(self) -> float:
        return self.mixture.sigma

    is_null = property(lambda self: self.mixture.is_null)
    is_blatant = property(lambda self: self.mixture.is_blatant)
    max_shift = property(lambda self: self.mixture.max_shift)
    zero_mass = property(lambda self: self.mixture.zero_mass)

    def rdp_event(self) -> dp_accounting.DpEvent:
        return self.mixture.rdp_event()

    def pld(self, value_discretization_interval: float) -> pld_lib.PrivacyLossDistribution:
        full = _pair_pld(self.mixture, value_discretization_interval)
        return symmetrized(full._pmf_remove)  # noqa: SLF001 - dp-accounting has no accessor


@dataclass(frozen=True)
class Labelled:
    """Part i happens with probability weights[i] and the adversary is told which (docs/proofs.md Lemma
    B(iii)): the PLD is the weights-mixture of the parts' PLDs, in each direction. Zero-weight parts are
    dropped. All parts have the same noise std."""

    weights: tuple[float, ...]
    parts: tuple[Pair, ...]

    def __post_init__(self) -> None:
        if len(self.weights) != len(self.parts) or not self.parts:
            raise ValueError("a labelled pair needs as many weights as parts (at least one)")
        if not math.isclose(sum(self.weights), 1.0, abs_tol=1e-9) or min(self.weights) < 0.0:
            raise ValueError(f"labelled pair weights must be >= 0 and sum to 1, got {self.weights}")
        kept = [(float(w), part) for w, part in zip(self.weights, self.parts) if w > 0.0]
        if len({part.sigma for _, part in kept}) != 1:
            raise ValueError("the parts of a labelled pair must have the same noise std")
        object.__setattr__(self, "weights", tuple(w for w, _ in kept))
        object.__setattr__(self, "parts", tuple(part for _, part in kept))

    @property
    def sigma(self) -> float:
        return self.parts[0].sigma

    @property
    def is_null(self) -> bool:
        return all(part.is_null for part in self.parts)

    @property
    def is_blatant(self) -> bool:
        return any(part.is_blatant for part in self.parts)

    @property
    def max_shift(self) -> float:
        return max(part.max_shift for part in self.parts)

    @property
    def zero_mass(self) -> float:
        return sum(w * part.zero_mass for w, part in zip(self.weights, self.parts))

    def rdp_event(self) -> dp_accounting.DpEvent:
        """A Poisson-subsampled Gaussian of the largest shift with the probability of any shift: the SCALE
        of the epsilon, used to choose the PLD grid and calibration's start (not a bound: the label is
        revealed)."""
        return _subsampled_gaussian_event(self.sigma, self.max_shift, 1.0 - self.zero_mass)

    def pld(self, value_discretization_interval: float) -> pld_lib.PrivacyLossDistribution:
        if self.is_null or self.is_blatant:
            raise ValueError("a null or blatant pair has no finite PLD")
        total, mass = None, 0.0
        for w, part in zip(self.weights, self.parts):
            this = (pld_lib.identity(value_discretization_interval) if part.is_null
                    else _pair_pld(part, value_discretization_interval))
            total = this if total is None else total.compute_mixture(this, mass / (mass + w))
            mass += w
        return total


Pair = Mixture | RemoveForm | Labelled | NumericPair  # NumericPair: uedp.privacy.numeric (two 1-D mixtures)


def _two_way(sigma: float, s_u: float, s_x: float, q_u: float, q_x: float) -> Mixture:
    return Mixture(
        sigma=sigma,
        sensitivities=(0.0, s_u, s_x, s_u + s_x),
        probs=((1 - q_u) * (1 - q_x), q_u * (1 - q_x), (1 - q_u) * q_x, q_u * q_x),
    )


def user_pair(sigma: float, s_u: float, q_u: float) -> Mixture:
    return Mixture(sigma=sigma, sensitivities=(0.0, s_u), probs=(1 - q_u, q_u))


def revealed_pair(sigma: float, s_u: float, s_s: float, q_u: float, p: float) -> Labelled:
    """docs/proofs.md Theorem 2 (B): the event L (probability p) revealed; given not-L the user pair, given L
    N(0) against {s_s: 1-q_u, s_s+s_u: q_u}."""
    inside = Mixture(sigma=sigma, sensitivities=(s_s, s_s + s_u), probs=(1 - q_u, q_u))
    return Labelled(weights=(1 - p, p), parts=(user_pair(sigma, s_u, q_u), inside))


def lps_pair(sigma: float, s_u: float, s_s: float, q_u: float, eta: float) -> Pair:
    """docs/proofs.md Theorem 2 (C): label A (holder's sentence only, s_s), B (u' only, s_u) or D (both,
    s_u+s_s) with probabilities lambda_k, then the remove form of PS_r(s_k), r = 1-(1-q_u)(1-eta)."""
    r = 1.0 - (1.0 - q_u) * (1.0 - eta)
    if r <= 0.0:
        return user_pair(sigma, s_u, 0.0)  # nothing ever happens: a null pair
    labels = (((1 - q_u) * eta / r, s_s), (q_u * (1 - eta) / r, s_u), (q_u * eta / r, s_u + s_s))
    weights = tuple(w for w, _ in labels)
    parts = tuple(RemoveForm(user_pair(sigma, s, r)) for _, s in labels)
    return Labelled(weights=tuple(w / sum(weights) for w in weights), parts=parts)


def undetected_pair(bound: str, sens: Sensitivities, sigma: float, *, q_u: float, q_e: float, q_s: float) -> Pair:
    """The per-round pair of one bound of eps_undetected (docs/proofs.md Theorem 2; UNDETECTED_BOUNDS), in the
    units given."""
    s_u, s_s = sens.s_u, sens.s_s
    if bound == "four_point_S":
        return _two_way(sigma, s_u, s_s, q_u, q_s)
    if bound == "revealed_L":
        return revealed_pair(sigma, s_u, s_s, q_u, q_u * q_s)
    if bound == "lps":
        return lps_pair(sigma, s_u, s_s, q_u, q_u * q_s)
    if bound == "revealed_L_entity":
        return revealed_pair(sigma, s_u, s_s, q_u, q_u * q_e)
    if bound == "lps_entity":
        return Labelled(weights=(1 - q_e, q_e), parts=(user_pair(sigma, s_u, q_u), lps_pair(sigma, s_u, s_s, q_u, q_u)))
    raise ValueError(f"undetected bound must be one of {', '.join(UNDETECTED_BOUNDS)}, got {bound!r}")


def adjacency_mixture(adjacency: str, sens: Sensitivities, sigma: float, *, q_u: float, q_e: float) -> Mixture:
    """The per-round mixture of adjacency "uedp" or "user" (docs/mechanism.md section 4) for these sensitivities and
    noise std, in the units they are given in: what `Mechanism.mixture` accounts, and what the audit gives a
    broken sensitivity function (uedp.audit.mechanism)."""
    if adjacency == "uedp":
        return _two_way(sigma, sens.s_u, sens.s_e, q_u, q_e)
    if adjacency == "user":
        return user_pair(sigma, sens.s_u, q_u)
    raise ValueError(f"adjacency must be uedp or user (undetected: undetected_pair), got {adjacency!r}")


@functools.lru_cache(maxsize=128)
def _pair_pld(pair: Pair, vdi: float) -> pld_lib.PrivacyLossDistribution:
    return pair.pld(vdi)  # PLD objects are immutable (compose returns new ones): safe to share


def candidate_pairs(
    adjacency: str, sens: Sensitivities, sigma: float, *, q_u: float, q_e: float, q_s: float,
    kinds: tuple[tuple[str, ...], ...] = (UNDETECTED_FREE, UNDETECTED_WITH_ENTITIES),
) -> tuple[dict[str, Pair], ...]:
    """The one dispatch on adjacency: the per-round pairs whose epsilon an adjacency is, as candidate bounds
    per kind of sentence (what uedp.privacy.composition.undetected_bound takes, one round each): for
    "uedp" and "user" one kind with one bound, the adjacency's mixture (`adjacency_mixture`); for
    "undetected" one mapping per kind of sentence (`kinds`, each a tuple of bound names), from each valid
    bound to its pair (`undetected_pair`). In the units the sensitivities and sigma are given in."""
    if adjacency == "undetected":
        return tuple({b: undetected_pair(b, sens, sigma, q_u=q_u, q_e=q_e, q_s=q_s) for b in kind} for kind in kinds)
    return ({str(adjacency): adjacency_mixture(adjacency, sens, sigma, q_u=q_u, q_e=q_e)},)
