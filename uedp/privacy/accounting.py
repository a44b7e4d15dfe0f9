"""Privacy accounting with privacy loss distributions (docs/mechanism.md section 4; docs/proofs.md). Pure
functions over immutable data.

A round's mechanism is a `Mechanism` (rule, z, q_u, q_e, q_s, m_max, k_cap). Per round, the output
distributions of two neighbouring datasets are dominated by a scalar PAIR built from the sensitivities s_u,
s_e, s_s (uedp.privacy.sensitivity; s_u = w_max beta, docs/proofs.md Theorem 1) and the noise std sigma:

  eps_uedp        `Mixture` N(0) vs [0, s_u, s_e, s_u+s_e] w.p. [(1-q_u)(1-q_e), q_u(1-q_e), (1-q_u)q_e, q_u q_e]
                  (Choquette-Choo et al. 2023, Cor. 4.7, as cited by dp-accounting's MixtureGaussianPrivacyLoss)
  eps_user        `Mixture` [0, s_u], [1-q_u, q_u]
  eps_undetected  the max over the two kinds of sentence an undetected entity can sit in of the min over
                  the valid bounds for that kind (docs/proofs.md Theorem 2; `UNDETECTED_BOUNDS`):
                    entity-free sentence:         min(four_point_S, revealed_L, lps)      at p = q_u q_s
                    sentence with detected ones:  min(revealed_L_entity, lps_entity)      at p = q_u q_e
                  `undetected_epsilon` also returns the name of the bound that decided it.
  eps_rdp_bound   RDP of the Poisson-subsampled Gaussian with q = 1-(1-q_u)(1-q_e) and noise multiplier
                  sigma / (s_u+s_e): a coarser bound, always >= eps_uedp (the cross-check).

Pairs (`Pair`): a `Mixture` (N(0) against a mixture of shifted Gaussians, both directions: add and remove
distributions, like `PLDAccountant`'s default ADD_OR_REMOVE_ONE); a `RemoveForm` (a mixture whose REMOVE
distribution bounds both directions: docs/proofs.md Lemma D); a `Labelled` pair (the adversary is told which
part happened: the weighted mixture of the parts' privacy loss distributions, dp-accounting's
`compute_mixture`, Lemma B(iii)). A two-point mixture {0: 1-q, s: q} is the Poisson-subsampled Gaussian with
noise multiplier sigma / s and uses dp-accounting's faster closed form `from_gaussian_mechanism(sigma / s,
sampling_prob=q)`. Each pair's PLD is self-composed over each run of identical rounds, and distinct runs are
composed with each other. beta and w_max cancel (sigma and every sensitivity scale with w_max * beta), so
everything is computed in units of w_max * beta.

Truncation (docs/proofs.md section 4): the bounds hold on the event G that truncation at m_max never acts;
its complement has probability `truncation_delta` (<= sum over rounds of P(Bin(N-2, q_u) >= m_max - 1)),
which every epsilon of a truncating mechanism is charged: the PLD epsilon is computed at delta -
delta_trunc (infinite if that is <= 0). This needs N, the public number of places (`num_users`).
`safe_m_max` is the smallest m_max whose delta_trunc is at most a fraction (1%) of delta.

`Mixture.dp_event()` is the same mechanism as a dp-accounting event (MixtureOfGaussiansDpEvent; the
PoissonSampledDpEvent of the Gaussian for a two-point mixture). dp-accounting's PLDAccountant
(ADD_OR_REMOVE_ONE, the same grid) composing those events gives the same epsilons as `epsilon` for the
mixtures: measured max relative difference 1.1e-11 (tests/test_crosscheck_accountants.py); the labelled
pairs are tested against dp-accounting's PLDs composed branch by branch (tests/test_undetected_accounting.py).
(For a plain Gaussian, q = 1, the accountant composes rounds in closed form and is lower by up to 1.5e-5
relative at 100 rounds; ours stays the conservative one.)

Discretization: the PLD grid (`value_discretization_interval`) is, unless given, 3e-4 times an RDP estimate
of the same epsilon, kept within [1e-7, 1e-2] (within [1e-7, 1] once that estimate exceeds 1000, where
epsilon means no privacy and a fine grid would take minutes), and rounded down to a power of 2 (so that a
growing ledger reuses its per-round PLDs). dp-accounting's pessimistic connect-the-dots estimate stays an
upper bound whatever the grid; its excess is about 1e-4 of epsilon or less up to epsilon 1000 (measured
against finer grids), and about 1% beyond. Per-round PLDs and epsilons are cached.

Delta must lie in (0, 1) and, when the number of users N is known, below 1/N (ConfigError otherwise).
Calibration of z to a target epsilon is in uedp.privacy.calibration.

The API, in dp-accounting's shape (a round is data; epsilon is computed from the rounds, never accumulated).
What an epsilon protects is its ADJACENCY ("uedp", "user", "undetected": `ADJACENCIES`); `records` are
the ledger's RoundRecords or (Mechanism, count) runs (`as_groups`):

  epsilon_of(records, adjacency, *, delta, num_users, value_discretization_interval=None) -> float
  rdp_epsilon_of(records, adjacency="uedp", *, delta, num_users) -> float       the RDP cross-check
  undetected_epsilon(records, *, delta, num_users, ...) -> (epsilon, bound)      eps_undetected and its bound
  pairs_epsilon(pairs, *, delta, value_discretization_interval=None) -> float   any dominating pairs (PLD)
  pairs_rdp_epsilon(pairs, *, delta) -> float                                    the same pairs by RDP
  undetected_bound(candidates, *, delta, value_discretization_interval=None)    the max-over-kinds-of-
                                                                                 sentence, min-over-bounds step
The records functions are the pairs functions applied to the records' pairs with delta - delta_trunc, so
a caller with pairs of its own (the crafted-update audit's broken sensitivities and bounds) runs the very code of the
accountant. `epsilon`, `compose_epsilons`, `epsilons` and `mixture_epsilon` are thin wrappers kept for
their callers. No module outside uedp.privacy uses a name of it with a leading underscore
(tests/test_public_privacy_api.py); `clear_caches` (uedp.privacy.calibration) empties every cache.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import rdp_privacy_accountant
from scipy.stats import binom

from uedp.checks import non_negative_int, positive, positive_int, probability
from uedp.errors import ConfigError
from uedp.privacy.mechanisms import sampling_rates
from uedp.privacy.numeric import NumericPair
from uedp.privacy.sensitivity import RULES, Sensitivities, noise_std, sensitivities

DEFAULT_DELTA = 1e-5
REL_DISCRETIZATION = 3e-4
MIN_DISCRETIZATION = 1e-7
FINE_CAP = 1e-2
NO_PRIVACY = 1000.0  # above this RDP bound, a coarse grid (cost!) is fine: the epsilon means nothing
MAX_DISCRETIZATION = 1.0  # coarser grids overflow in dp-accounting
ADJACENCIES = ("uedp", "user", "undetected")  # what an epsilon protects (module docstring)
SAFE_TRUNCATION_FRACTION = 0.01  # safe_m_max: delta_trunc at most this fraction of delta
RANKING_FACTOR = 32.0  # eps_undetected: its candidate bounds are ranked on a grid this much coarser

# The bounds of eps_undetected (docs/proofs.md Theorem 2): for an undetected entity in an entity-free sentence
# (its extended entity sampled with q_s) and in a sentence that also holds detected entities (q_e).
UNDETECTED_FREE = ("four_point_S", "revealed_L", "lps")
UNDETECTED_WITH_ENTITIES = ("revealed_L_entity", "lps_entity")
UNDETECTED_BOUNDS = (*UNDETECTED_FREE, *UNDETECTED_WITH_ENTITIES)
# An Epsilons field whose key in files (Ledger.epsilons: summary.json, privacy.json) is the older name.
EPSILON_FILE_KEYS = {"undetected_bound": "undetected_rule"}


def check_delta(delta: float, num_users: int | None = None) -> float:
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"delta must lie in (0, 1), got {delta!r}")
    if num_users is not None:
        positive_int("num_users", num_users)
        if delta >= 1.0 / num_users:
            raise ConfigError(f"delta = {delta!r} must be below 1/num_users = 1/{num_users}")
    return delta


def _probability(name: str, q: float) -> float:
    q = float(q)
    probability(name, q)
    return q


# -- pairs of distributions (docs/proofs.md section 3) -------------------------------------------------------
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


@dataclass(frozen=True)
class Mechanism:
    """One round's public mechanism parameters (in units of w_max * beta; beta and w_max cancel).

    `rule` is the accounting rule (uedp.privacy.sensitivity.RULES). Its (q_e, q_s) must be the rule's sampling
    rates (uedp.privacy.mechanisms.sampling_rates): user_dp and noiseless rounds use every sentence (1, 1);
    uedp_naive never uses S (q_s = 0)."""

    rule: str
    z: float
    q_u: float
    q_e: float
    q_s: float
    m_max: int | None
    k_cap: int | None = None
    gamma: float = 0.0  # uedp_split: the entity part's clip, in units of beta (0 for every other rule)

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ConfigError(f"accounting rule must be one of {', '.join(RULES)}, got {self.rule!r}")
        for name in ("q_u", "q_e", "q_s"):
            object.__setattr__(self, name, _probability(name, getattr(self, name)))
        z = float(self.z)
        if self.rule == "noiseless":
            if z != 0.0:
                raise ConfigError(f"noiseless rounds have noise multiplier 0, got z = {self.z!r}")
        else:
            positive("noise multiplier z", self.z)
        object.__setattr__(self, "z", z)
        object.__setattr__(self, "gamma", float(self.gamma))
        rates = sampling_rates(self.rule, q_e=self.q_e, q_s=self.q_s)
        if (self.q_e, self.q_s) != rates:
            raise ConfigError(f"{self.rule} rounds are accounted with (q_e, q_s) = {rates} "
                              f"(uedp.privacy.mechanisms.sampling_rates), got ({self.q_e!r}, {self.q_s!r})")
        for name in ("m_max", "k_cap"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, positive_int(name, v, note="or None"))
        try:
            self.sensitivities  # noqa: B018 - validates the (rule, m_max, k_cap) combination
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    @property
    def sensitivities(self) -> Sensitivities:
        return sensitivities(beta=1.0, w_max=1.0, m_max=self.m_max, k_cap=self.k_cap, rule=self.rule,
                             gamma=self.gamma)

    @property
    def sigma(self) -> float:
        """Noise std in units of w_max * beta."""
        return noise_std(self.rule, self.z, self.sensitivities)

    def mixture(self, adjacency: str) -> Mixture:
        """The pair of adjacency "uedp" or "user"."""
        return adjacency_mixture(adjacency, self.sensitivities, self.sigma, q_u=self.q_u, q_e=self.q_e)

    def undetected(self, bound: str) -> Pair:
        """The pair of one bound of eps_undetected (UNDETECTED_BOUNDS)."""
        return undetected_pair(bound, self.sensitivities, self.sigma, q_u=self.q_u, q_e=self.q_e, q_s=self.q_s)

    def truncation_probability(self, num_users: int) -> float:
        """P(Bin(N-2, q_u) >= m_max - 1): a round's probability of leaving the good event of docs/proofs.md
        section 4 (0 without truncation, or when N <= m_max: truncation cannot act)."""
        return truncation_probability(num_users, self.q_u, self.m_max)


def truncation_probability(num_users: int, q_u: float, m_max: int | None) -> float:
    """P(Bin(N-2, q_u) >= m_max - 1), 0 if m_max is None or N <= m_max (docs/proofs.md section 4)."""
    if m_max is None or num_users <= m_max:
        return 0.0
    return float(binom.sf(m_max - 2, num_users - 2, q_u))


class Round(Protocol):
    """One recorded round, as the accountant reads it: uedp.privacy.ledger.RoundRecord (the ledger imports
    this module, so it is named by what it provides, its mechanism in units of w_max * beta)."""

    @property
    def mechanism(self) -> Mechanism: ...


Groups = Sequence[tuple[Mechanism, int]]
Records = Sequence[Round] | Groups  # the rounds themselves, or (mechanism, count) runs: `as_groups`
PairCounts = Iterable[tuple[Pair, int]]  # (dominating pair, number of rounds), composed in order


def as_groups(records: Records) -> tuple[tuple[Mechanism, int], ...]:
    """The (mechanism, count) runs the accountant composes, in order: what every function of this module
    that takes `records` composes.

    `records` is either the rounds themselves (`Round`s: uedp.privacy.ledger.RoundRecord; consecutive
    records with the same mechanism form one run, exactly as Ledger.groups forms them) or (Mechanism, count)
    runs, kept as given (zero counts dropped), never both in one sequence: whether two adjacent entries are
    one run or two changes the floating-point path (one self-composition or two composed), so the caller
    says which it means. TypeError for an entry that is neither; ConfigError for a count that is not a
    non-negative int."""
    items = tuple(records)
    if items and not any(isinstance(item, tuple) for item in items):
        runs: list[tuple[Mechanism, int]] = []
        for record in items:
            mech = getattr(record, "mechanism", None)
            if not isinstance(mech, Mechanism):
                raise TypeError(f"expected a RoundRecord or a (Mechanism, count) pair, got {record!r}")
            if runs and runs[-1][0] == mech:
                runs[-1] = (mech, runs[-1][1] + 1)
            else:
                runs.append((mech, 1))
        return tuple(runs)
    out = []
    for item in items:
        if not isinstance(item, tuple):
            raise TypeError(f"records mix rounds and (Mechanism, count) runs (pass one or the other), got {item!r}")
        if len(item) != 2:
            raise TypeError(f"expected a RoundRecord or a (Mechanism, count) pair, got {item!r}")
        mech, count = item
        if not isinstance(mech, Mechanism):
            raise TypeError(f"expected a Mechanism, got {type(mech).__name__}")
        non_negative_int("a round count", count)
        if count:
            out.append((mech, count))
    return tuple(out)


def truncation_delta(records: Records, num_users: int | None) -> float:
    """delta_trunc = 1 - prod over rounds of (1 - truncation probability): the probability that truncation
    may act in some round, charged to every epsilon of the run (docs/proofs.md Lemma C, section 4)."""
    groups = as_groups(records)
    if all(m.m_max is None for m, _ in groups):
        return 0.0
    if num_users is None:
        raise ConfigError("the accounting of a cohort truncated at m_max needs the number of places N "
                          "(num_users; `uedp epsilon --num-users`): docs/proofs.md section 4")
    return _delta_over_rounds((m.truncation_probability(num_users), c) for m, c in groups)


def _delta_over_rounds(rounds: Iterable[tuple[float, int]]) -> float:
    """1 - prod (1 - p)^count over (p, count): the probability that some round leaves the good event."""
    log_keep = 0.0
    for p, count in rounds:
        if p >= 1.0:
            return 1.0
        log_keep += count * math.log1p(-p)
    return -math.expm1(log_keep)


def safe_m_max(num_users: int, q_u: float, rounds: int, delta: float,
               fraction: float = SAFE_TRUNCATION_FRACTION) -> int:
    """The smallest m_max (at least 1) whose delta_trunc over `rounds` rounds is <= fraction * delta: what
    `privacy.m_max = 0` (auto) uses. N itself when N places can never exceed it."""
    positive_int("num_users", num_users)
    budget = float(fraction) * float(delta)
    lo, hi = 1, num_users  # delta_trunc(hi) = 0; it decreases with m_max
    while lo < hi:
        mid = (lo + hi) // 2
        if _delta_over_rounds([(truncation_probability(num_users, q_u, mid), rounds)]) <= budget:
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True)
class Epsilons:
    eps_uedp: float
    eps_user: float
    eps_undetected: float
    eps_rdp_bound: float
    delta: float
    rounds: int
    undetected_bound: str = ""  # the bound that decided eps_undetected (UNDETECTED_BOUNDS)
    delta_trunc: float = 0.0  # charged to every epsilon (docs/proofs.md section 4)

    def as_dict(self) -> dict[str, float | int | str]:
        """The fields in order, under their keys in files (EPSILON_FILE_KEYS: undetected_bound as "undetected_rule")."""
        return {EPSILON_FILE_KEYS.get(k, k): v for k, v in asdict(self).items()}


_RDP_LOG = logging.getLogger(__name__)
_RDP_LOCK = threading.RLock()


class _AbslToStdlib:
    """What dp-accounting's RDP module sees as its `absl.logging` while uedp calls it (`_quiet_absl`).

    absl's `log` calls `logging.basicConfig()` whenever the root logger has no handler, whatever the level:
    the first warning would add a stderr handler to the root logger for the rest of the process, and every
    line of a logger that propagates to root (Flower's "flwr" among them) would print twice from then on.
    The RDP module warns when it excludes an order whose series does not converge (expected for our events:
    the bound stays valid as the minimum over the other orders) or meets a negative divergence. Those messages
    go to this module's logger at DEBUG (an error at ERROR); nothing else (the root logger, the "absl"
    logger) is touched."""

    def __init__(self, absl_logging: object) -> None:
        self._absl = absl_logging

    @staticmethod
    def _debug(msg: object, *args: object, **_: object) -> None:
        _RDP_LOG.debug("dp-accounting RDP: " + str(msg), *args)

    @staticmethod
    def error(msg: object, *args: object, **_: object) -> None:
        _RDP_LOG.error("dp-accounting RDP: " + str(msg), *args)

    debug = info = warning = warn = _debug

    def __getattr__(self, name: str) -> object:  # anything else the module might use: absl's own
        return getattr(self._absl, name)


@contextlib.contextmanager
def _quiet_absl() -> Iterator[None]:
    """Run dp-accounting's RDP code with its absl logging routed to `_AbslToStdlib` (one thread at a time:
    the module attribute is swapped and restored under a lock)."""
    with _RDP_LOCK:
        absl_logging = rdp_privacy_accountant.logging
        rdp_privacy_accountant.logging = _AbslToStdlib(absl_logging)
        try:
            yield
        finally:
            rdp_privacy_accountant.logging = absl_logging


@functools.lru_cache(maxsize=256)
def _rdp_vector(pair: Pair) -> tuple[tuple[float, ...], np.ndarray]:
    """(orders, RDP of ONE round of `pair` at each order): dp_accounting's RdpAccountant composed once."""
    accountant = rdp_privacy_accountant.RdpAccountant()
    with _quiet_absl():
        accountant.compose(pair.rdp_event(), 1)
    rdp = np.array(accountant._rdp, dtype=float)  # noqa: SLF001 (the accountant keeps its RDP curve here)
    rdp.flags.writeable = False
    return tuple(accountant._orders), rdp  # noqa: SLF001


@functools.lru_cache(maxsize=256)
def _rdp_epsilon(pairs: tuple[tuple[Pair, int], ...], delta: float) -> float:
    """RDP composes additively: count x (one round's curve), summed over the pairs, is what the accountant
    computes for `compose(event, count)` (up to rounding), without recomputing a round's curve per count."""
    live = [(m, c) for m, c in pairs if not m.is_null]
    if not live:
        return 0.0
    if any(m.is_blatant for m, _ in live):
        return math.inf
    orders, total = None, None
    for m, count in live:
        orders, vec = _rdp_vector(m)
        total = count * vec if total is None else total + count * vec
    with _quiet_absl():
        return float(rdp_privacy_accountant.compute_epsilon(orders, total, delta)[0])


def auto_discretization(hint: float) -> float:
    """The PLD grid for an epsilon whose RDP estimate is `hint` (see the module docstring)."""
    if not math.isfinite(hint):  # the RDP bound overflowed: epsilon is astronomically large anyway
        return 1.0
    cap = FINE_CAP if hint <= NO_PRIVACY else MAX_DISCRETIZATION
    vdi = min(cap, max(MIN_DISCRETIZATION, REL_DISCRETIZATION * hint))
    return 2.0 ** math.floor(math.log2(vdi))  # a power of 2: per-round PLDs are reused as a ledger grows


@functools.lru_cache(maxsize=128)
def _pair_pld(pair: Pair, vdi: float) -> pld_lib.PrivacyLossDistribution:
    return pair.pld(vdi)  # PLD objects are immutable (compose returns new ones): safe to share


@functools.lru_cache(maxsize=512)
def _pld_epsilon(pairs: tuple[tuple[Pair, int], ...], delta: float, vdi: float | None) -> float:
    live = [(m, c) for m, c in pairs if not m.is_null]
    if not live:
        return 0.0
    if any(m.is_blatant for m, _ in live):
        return math.inf
    if vdi is None:
        vdi = auto_discretization(_rdp_epsilon(pairs, delta))
    total = None
    for m, count in live:
        pld = _pair_pld(m, vdi)
        pld = pld.self_compose(count) if count > 1 else pld
        total = pld if total is None else total.compose(pld)
    return float(total.get_epsilon_for_delta(delta))


def _check_pairs(pairs: PairCounts) -> tuple[tuple[Pair, int], ...]:
    """(pair, count) entries as a tuple (the caches' key), zero counts dropped."""
    out = []
    for item in pairs:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise TypeError(f"expected a (pair, count) tuple, got {item!r}")
        pair, count = item
        if not isinstance(pair, Mixture | RemoveForm | Labelled | NumericPair):
            raise TypeError(f"expected a Mixture, RemoveForm, Labelled or NumericPair pair, got {type(pair).__name__}")
        non_negative_int("a round count", count)
        if count:
            out.append((pair, count))
    return tuple(out)


def _check_adjacency(adjacency: str, allowed: tuple[str, ...]) -> str:
    if adjacency not in allowed:
        raise ValueError(f"adjacency must be one of {', '.join(allowed)}, got {adjacency!r}")
    return adjacency


def _check_vdi(vdi: float | None) -> float | None:
    if vdi is not None and not (float(vdi) > 0.0 and math.isfinite(float(vdi))):
        raise ConfigError(f"value_discretization_interval must be positive, got {vdi!r}")
    return None if vdi is None else float(vdi)


def _pld_delta(groups: tuple[tuple[Mechanism, int], ...], delta: float, num_users: int | None) -> float:
    """The delta left for the PLD once delta_trunc is charged (<= 0: the epsilon is infinite)."""
    return delta - truncation_delta(groups, num_users)


# -- the public API: epsilons of pairs, of records; the undetected step ----------------------------------------
def pairs_epsilon(
    pairs: PairCounts, *, delta: float, value_discretization_interval: float | None = None
) -> float:
    """Epsilon at `delta` of the composition, in order, of arbitrary dominating pairs, each self-composed
    over its count (PLD, add and remove; dp-accounting's PLDAccountant composing the pairs' events).

    The grid is `value_discretization_interval`, or else the automatic one of the module docstring (from
    `pairs_rdp_epsilon` of the same pairs at the same delta): the very grid `epsilon_of` uses, so that the
    pairs of a ledger give the ledger's values bit for bit. No truncation charge: a caller whose bound holds
    on a good event only passes delta - delta_trunc (as `epsilon_of` does). Null pairs add nothing (0 if
    all are null); a blatant one makes epsilon infinite. Results are cached (`clear_caches` in
    uedp.privacy.calibration). What `epsilon_of` computes once it has the pairs; the crafted-update audit
    gives it the pairs of a broken sensitivity function (uedp.audit.mechanism)."""
    return _pld_epsilon(_check_pairs(pairs), check_delta(delta), _check_vdi(value_discretization_interval))


def pairs_rdp_epsilon(pairs: PairCounts, *, delta: float) -> float:
    """Epsilon at `delta` from RDP of the pairs' events (`rdp_event`: the Poisson-subsampled Gaussian of
    the largest shift with the probability of any shift), composed in order (dp-accounting's RdpAccountant).
    An upper bound of `pairs_epsilon` for `Mixture` pairs (the cross-check eps_rdp_bound); for a `Labelled`
    pair it is only the scale of the epsilon (the label is revealed), which is how the automatic PLD grid
    and calibration's starting point use it."""
    return _rdp_epsilon(_check_pairs(pairs), check_delta(delta))


def undetected_bound(
    candidates: Sequence[Mapping[str, PairCounts]], *, delta: float, value_discretization_interval: float | None = None
) -> tuple[float, str]:
    """The eps_undetected step (docs/proofs.md Theorem 2) for any candidate bounds: `candidates` has one
    mapping per kind of sentence an undetected entity can sit in, from each valid bound's name to its
    composed pairs. Returns (the max over the kinds of sentence of the min over that kind's bounds, the
    name of the bound that decided it).

    Any one valid bound per kind of sentence is valid, so the smallest is taken: the bounds are ranked on
    a grid RANKING_FACTOR times coarser than the fine one (cheap; the first in mapping order wins a tie) and
    only the winner is computed on the fine grid (`value_discretization_interval`, or the automatic grid of
    the smallest RDP estimate among the kind's bounds). The max over kinds compares (epsilon, name).
    `undetected_epsilon` is this step with the accountant's bounds (UNDETECTED_FREE,
    UNDETECTED_WITH_ENTITIES); the crafted-update audit gives it broken ones. No truncation charge: pass
    delta - delta_trunc."""
    d = check_delta(delta)
    vdi = _check_vdi(value_discretization_interval)
    if not candidates:
        raise ValueError("undetected_bound needs at least one kind of sentence")
    kinds = []
    for bounds in candidates:
        if not bounds:
            raise ValueError("every kind of sentence needs at least one candidate bound")
        kinds.append({str(name): _check_pairs(pairs) for name, pairs in bounds.items()})
    best = []
    for bounds in kinds:
        fine = vdi if vdi is not None else auto_discretization(min(_rdp_epsilon(x, d) for x in bounds.values()))
        coarse = min(MAX_DISCRETIZATION, RANKING_FACTOR * fine)
        bound = min(bounds, key=lambda b: _pld_epsilon(bounds[b], d, coarse))
        best.append((_pld_epsilon(bounds[bound], d, fine), bound))
    return max(best)


def epsilon_of(
    records: Records,
    adjacency: str,
    *,
    delta: float,
    num_users: int | None,
    value_discretization_interval: float | None = None,
) -> float:
    """Epsilon at `delta` of `records` (RoundRecords, or (Mechanism, count) runs: `as_groups`) for
    `adjacency` "uedp", "user" or "undetected" (ADJACENCIES): the PLD epsilon of the adjacency's pairs
    (`Mechanism.mixture`; for "undetected" `undetected_epsilon`), charged delta_trunc when the cohort is
    truncated (which needs N, the public number of places, `num_users`; None only where nothing
    truncates). The grid is the automatic one unless given (module docstring). Every epsilon the project
    reports of its rounds (ledger, budget stop, calibration, `uedp epsilon`, the audit's sound claims) is
    computed here, directly or through the wrappers below."""
    if adjacency == "undetected":
        return undetected_epsilon(records, delta=delta, num_users=num_users,
                                  value_discretization_interval=value_discretization_interval)[0]
    delta = check_delta(delta, num_users)
    groups = as_groups(records)
    vdi = _check_vdi(value_discretization_interval)
    _check_adjacency(adjacency, ADJACENCIES)
    d = _pld_delta(groups, delta, num_users)
    if d <= 0.0:
        return math.inf
    return _pld_epsilon(tuple((m.mixture(adjacency), c) for m, c in groups), d, vdi)


def rdp_epsilon_of(records: Records, adjacency: str = "uedp", *, delta: float, num_users: int | None) -> float:
    """Epsilon at `delta` (delta_trunc charged) from RDP of the dominating Poisson-subsampled Gaussian of
    each round's mixture of `adjacency` "uedp" (eps_rdp_bound, the coarser cross-check: >= the PLD value)
    or "user". Not for "undetected": its revealed-label bounds have no RDP bound here."""
    delta = check_delta(delta, num_users)
    groups = as_groups(records)
    _check_adjacency(adjacency, ("uedp", "user"))
    d = _pld_delta(groups, delta, num_users)
    if d <= 0.0:
        return math.inf
    return _rdp_epsilon(tuple((m.mixture(adjacency), c) for m, c in groups), d)


def undetected_epsilon(
    records: Records,
    *,
    delta: float = DEFAULT_DELTA,
    num_users: int | None = None,
    value_discretization_interval: float | None = None,
) -> tuple[float, str]:
    """(eps_undetected, the name of the bound that decided it, "truncation" if delta_trunc >= delta): the max
    over the two kinds of sentence of the min over their bounds (docs/proofs.md Theorem 2), each composed over
    all of `records` (`undetected_bound` with the accountant's UNDETECTED_FREE, UNDETECTED_WITH_ENTITIES)."""
    delta = check_delta(delta, num_users)
    groups = as_groups(records)
    vdi = _check_vdi(value_discretization_interval)
    d = _pld_delta(groups, delta, num_users)
    if d <= 0.0:
        return math.inf, "truncation"
    candidates = [{b: tuple((m.undetected(b), c) for m, c in groups) for b in bounds}
                  for bounds in (UNDETECTED_FREE, UNDETECTED_WITH_ENTITIES)]
    return undetected_bound(candidates, delta=d, value_discretization_interval=vdi)


# -- the earlier names, kept for their many callers: thin wrappers of the API above --------------------------
def mixture_epsilon(mixture: Pair, rounds: int, delta: float) -> float:
    """Epsilon at `delta` of `mixture` self-composed over `rounds` rounds: `pairs_epsilon([(mixture,
    rounds)], delta=delta)` (the automatic grid, no truncation charge)."""
    positive_int("rounds", rounds)
    return pairs_epsilon(((mixture, rounds),), delta=delta)


def epsilon(
    adjacency: str,
    groups: Records,
    *,
    delta: float = DEFAULT_DELTA,
    num_users: int | None = None,
    value_discretization_interval: float | None = None,
) -> float:
    """`epsilon_of(groups, adjacency, ...)` for adjacency "uedp", "user" or "undetected", and for
    "rdp_bound" `rdp_epsilon_of(groups, "uedp", ...)` (the RDP cross-check, which ignores the grid)."""
    if adjacency == "rdp_bound":
        _check_vdi(value_discretization_interval)
        return rdp_epsilon_of(groups, "uedp", delta=delta, num_users=num_users)
    if adjacency not in ADJACENCIES:
        raise ValueError(f"adjacency must be rdp_bound or one of {', '.join(ADJACENCIES)}, got {adjacency!r}")
    return epsilon_of(groups, adjacency, delta=delta, num_users=num_users,
                      value_discretization_interval=value_discretization_interval)


def compose_epsilons(
    groups: Records, *, delta: float = DEFAULT_DELTA, num_users: int | None = None
) -> Epsilons:
    """All four epsilons of `groups` (records or runs: `as_groups`), the undetected bound's name and
    delta_trunc: what the ledger reports."""
    groups = as_groups(groups)
    values = {f"eps_{a}": epsilon_of(groups, a, delta=delta, num_users=num_users) for a in ("uedp", "user")}
    values["eps_rdp_bound"] = rdp_epsilon_of(groups, "uedp", delta=delta, num_users=num_users)
    values["eps_undetected"], bound = undetected_epsilon(groups, delta=delta, num_users=num_users)
    return Epsilons(**values, delta=float(delta), rounds=sum(c for _, c in groups),
                    undetected_bound=bound, delta_trunc=truncation_delta(groups, num_users))


def epsilons(
    mechanism: Mechanism, *, rounds: int, delta: float = DEFAULT_DELTA, num_users: int | None = None
) -> Epsilons:
    """All four epsilons of `rounds` identical rounds of `mechanism`."""
    return compose_epsilons([(mechanism, rounds)], delta=delta, num_users=num_users)


def mechanism(
    rule: str = "uedp",
    *,
    z: float,
    q_u: float,
    q_e: float | None = None,
    q_s: float | None = None,
    m_max: int | None,
    k_cap: int | None = None,
    gamma: float = 0.0,
) -> Mechanism:
    """A `Mechanism` of accounting rule `rule` whose q_e and q_s, where not given, are the rule's sampling
    rates (uedp.privacy.mechanisms.sampling_rates: user_dp and noiseless -> 1, 1; uedp_naive -> q_s = 0).
    uedp and uedp_naive need q_e; uedp's q_s is 0 when not given (it only matters for eps_undetected)."""
    if q_e is None and rule in ("uedp", "uedp_naive", "uedp_split"):
        raise ConfigError(f"accounting rule {rule!r} needs q_e")
    rates = sampling_rates(rule, q_e=1.0 if q_e is None else q_e, q_s=0.0 if q_s is None else q_s)
    q_e, q_s = (rates[0] if q_e is None else q_e), (rates[1] if q_s is None else q_s)
    return Mechanism(rule=rule, z=z, q_u=q_u, q_e=q_e, q_s=q_s, m_max=m_max, k_cap=k_cap, gamma=gamma)
