"""Privacy accounting with privacy loss distributions (docs/mechanism.md section 4; docs/proofs.md): the
epsilons of a run's rounds. Pure functions over immutable data, in dp-accounting's shape: a round is data
(a `Mechanism`), the rounds are RUNS, (mechanism, count) pairs composed in order like
`accountant.compose(event, count)`, and an epsilon is computed from the runs, never accumulated.

  epsilon_of(runs, adjacency, *, delta, num_users, value_discretization_interval=None) -> float
  rdp_epsilon_of(runs, adjacency, *, delta, num_users) -> float        the RDP cross-check ("uedp", "user")
  epsilon_and_bound(runs, adjacency, *, delta, num_users, ...) -> (epsilon, the bound that decided it)
  epsilons_of(runs, *, delta, num_users) -> Epsilons                    every epsilon a ledger reports
  truncation_delta(runs, num_users) -> float                            delta_trunc, charged to each of them

A ledger's runs are `Ledger.runs()` (consecutive identical rounds form one run). What an epsilon protects is
its `Adjacency` (a StrEnum: "uedp", "user", "undetected"). Per round, the output distributions of two
neighbouring datasets are dominated by a scalar pair (uedp.privacy.pairs) built from the sensitivities s_u,
s_e, s_s (uedp.privacy.sensitivity; s_u = w_max beta, docs/proofs.md Theorem 1) and the noise std sigma:

  eps_uedp        `Mixture` N(0) vs [0, s_u, s_e, s_u+s_e] w.p. [(1-q_u)(1-q_e), q_u(1-q_e), (1-q_u)q_e, q_u q_e]
                  (Choquette-Choo et al. 2023, Cor. 4.7, as cited by dp-accounting's MixtureGaussianPrivacyLoss)
  eps_user        `Mixture` [0, s_u], [1-q_u, q_u]
  eps_undetected  the max over the two kinds of sentence an undetected entity can sit in of the min over
                  the valid bounds for that kind (docs/proofs.md Theorem 2; uedp.privacy.pairs.UNDETECTED_BOUNDS):
                    entity-free sentence:         min(four_point_S, revealed_L, lps)      at p = q_u q_s
                    sentence with detected ones:  min(revealed_L_entity, lps_entity)      at p = q_u q_e
                  `epsilon_and_bound` also returns the name of the bound that decided it.
  eps_rdp_bound   RDP of the Poisson-subsampled Gaussian with q = 1-(1-q_u)(1-q_e) and noise multiplier
                  sigma / (s_u+s_e): a coarser bound, always >= eps_uedp (the cross-check).

The pairs' epsilons are uedp.privacy.composition's (`pairs_epsilon`, `pairs_rdp_epsilon`, `undetected_bound`),
with its automatic PLD grid: the functions here are those applied to the runs' pairs at delta - delta_trunc,
so a caller with pairs of its own (the crafted-update audit's broken sensitivities and bounds) runs the very
code of the accountant. beta and w_max cancel (sigma and every sensitivity scale with w_max * beta), so
everything is computed in units of w_max * beta.

Truncation (docs/proofs.md section 4): the bounds hold on the event G that truncation at m_max never acts;
its complement has probability `truncation_delta` (<= sum over rounds of P(Bin(N-2, q_u) >= m_max - 1)),
which every epsilon of a truncating mechanism is charged: the PLD epsilon is computed at delta -
delta_trunc (infinite if that is <= 0). This needs N, the public number of places (`num_users`).
`safe_m_max` is the smallest m_max whose delta_trunc is at most a fraction (1%) of delta.

`Mixture.dp_event()` is the same mechanism as a dp-accounting event; dp-accounting's PLDAccountant
(ADD_OR_REMOVE_ONE, the same grid) composing those events gives the same epsilons as `epsilon_of` for the
mixtures: measured max relative difference 1.1e-11 (tests/test_crosscheck_accountants.py); the labelled
pairs are tested against dp-accounting's PLDs composed branch by branch (tests/test_undetected_accounting.py).
(For a plain Gaussian, q = 1, the accountant composes rounds in closed form and is lower by up to 1.5e-5
relative at 100 rounds; ours stays the conservative one.)

Delta must lie in (0, 1) and, when the number of users N is known, below 1/N (ConfigError otherwise).
Calibration of z to a target epsilon: uedp.privacy.calibration. No module outside uedp.privacy uses a name
of it with a leading underscore (tests/test_public_privacy_api.py); `clear_caches` (uedp.privacy.calibration)
empties every cache.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from scipy.stats import binom

from uedp.checks import non_negative_int, positive, positive_int, probability
from uedp.errors import ConfigError
from uedp.privacy.composition import (
    _check_vdi,
    _rdp_epsilon,
    check_delta,
    composed_kinds,
    undetected_bound,
)
from uedp.privacy.mechanisms import sampling_rates
from uedp.privacy.pairs import Mixture, Pair, adjacency_mixture, candidate_pairs, undetected_pair
from uedp.privacy.sensitivity import RULES, Sensitivities, noise_std, sensitivities

DEFAULT_DELTA = 1e-5
SAFE_TRUNCATION_FRACTION = 0.01  # safe_m_max: delta_trunc at most this fraction of delta


class Adjacency(enum.StrEnum):
    """What an epsilon protects (docs/mechanism.md section 4): one user and one detected entity ("uedp"), one
    user ("user"), one user and one entity the detector missed ("undetected"). A str: f-strings, JSON and
    MetricRecord keys see "uedp"."""

    UEDP = "uedp"
    USER = "user"
    UNDETECTED = "undetected"


ADJACENCIES = tuple(Adjacency)
EPSILON_FILE_KEYS = {"undetected_bound": "undetected_rule"}


def _probability(name: str, q: float) -> float:
    q = float(q)
    probability(name, q)
    return q


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

    def mixture(self, adjacency: Adjacency | str) -> Mixture:
        """The pair of adjacency uedp or user."""
        return adjacency_mixture(adjacency, self.sensitivities, self.sigma, q_u=self.q_u, q_e=self.q_e)

    def candidates(self, adjacency: Adjacency | str) -> tuple[dict[str, Pair], ...]:
        """The pairs of `adjacency` as candidate bounds per kind of sentence (uedp.privacy.pairs.candidate_pairs)."""
        return candidate_pairs(adjacency, self.sensitivities, self.sigma, q_u=self.q_u, q_e=self.q_e, q_s=self.q_s)

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


Runs = Sequence[tuple[Mechanism, int]]  # (mechanism, number of rounds) runs, composed in order


def _check_runs(runs: Runs) -> tuple[tuple[Mechanism, int], ...]:
    """The runs as a tuple (the caches' key), zero counts dropped. Two adjacent runs of one mechanism stay two
    runs: whether they are one or two changes the floating-point path (one self-composition or two composed),
    so the caller says which it means (`Ledger.runs()` joins consecutive identical rounds). TypeError for an
    entry that is not a (Mechanism, count) pair (a RoundRecord: pass `Ledger.runs()`); ConfigError for a
    count that is not a non-negative int."""
    out = []
    for item in runs:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], Mechanism)):
            raise TypeError(f"expected (Mechanism, count) runs (a ledger's are Ledger.runs()), got {item!r}")
        mech, count = item
        non_negative_int("a round count", count)
        if count:
            out.append((mech, count))
    return tuple(out)


def truncation_delta(runs: Runs, num_users: int | None) -> float:
    """delta_trunc = 1 - prod over rounds of (1 - truncation probability): the probability that truncation
    may act in some round, charged to every epsilon of the run (docs/proofs.md Lemma C, section 4)."""
    groups = _check_runs(runs)
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
    `privacy.m_max = "auto"` uses. N itself when N places can never exceed it."""
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


def _adjacency(adjacency: str, allowed: Sequence[Adjacency] = ADJACENCIES) -> Adjacency:
    if adjacency not in allowed:
        raise ValueError(f"adjacency must be one of {', '.join(allowed)}, got {adjacency!r}")
    return Adjacency(adjacency)


def _charged(runs: Runs, delta: float, num_users: int | None) -> tuple[tuple[tuple[Mechanism, int], ...], float]:
    """(the checked runs, the delta left for the PLD once delta_trunc is charged: <= 0 means infinite epsilon)."""
    delta = check_delta(delta, num_users)
    checked = _check_runs(runs)
    return checked, delta - truncation_delta(checked, num_users)


def epsilon_of(
    runs: Runs,
    adjacency: Adjacency | str,
    *,
    delta: float,
    num_users: int | None,
    value_discretization_interval: float | None = None,
) -> float:
    """Epsilon at `delta` of `runs` for `adjacency` (uedp, user or undetected): `epsilon_and_bound`'s epsilon.
    Every epsilon the project reports of its rounds (ledger, budget stop, calibration, `uedp epsilon`, the
    audit's sound claims) is computed here."""
    return epsilon_and_bound(runs, adjacency, delta=delta, num_users=num_users,
                             value_discretization_interval=value_discretization_interval)[0]


def epsilon_and_bound(
    runs: Runs,
    adjacency: Adjacency | str,
    *,
    delta: float,
    num_users: int | None,
    value_discretization_interval: float | None = None,
) -> tuple[float, str]:
    """(epsilon at `delta` of `runs` for `adjacency`, the bound that decided it): the PLD epsilon of the
    adjacency's candidate pairs (`Mechanism.candidates`: for uedp and user the mixture, named by the
    adjacency; for undetected the max over the two kinds of sentence of the min over their proved bounds,
    docs/proofs.md Theorem 2), composed over the runs by uedp.privacy.composition.undetected_bound, charged
    delta_trunc when the cohort is truncated (which needs N, the public number of places, `num_users`; None
    only where nothing truncates; "truncation" names the bound when delta_trunc >= delta). The grid is
    uedp.privacy.composition's automatic one unless given."""
    adjacency = _adjacency(adjacency)
    vdi = _check_vdi(value_discretization_interval)
    checked, d = _charged(runs, delta, num_users)
    if d <= 0.0:
        return math.inf, "truncation"
    if not checked:
        return 0.0, str(adjacency)
    kinds = composed_kinds([(m.candidates(adjacency), c) for m, c in checked])
    return undetected_bound(kinds, delta=d, value_discretization_interval=vdi)


def rdp_epsilon_of(runs: Runs, adjacency: Adjacency | str, *, delta: float, num_users: int | None) -> float:
    """Epsilon at `delta` (delta_trunc charged) from RDP of the dominating Poisson-subsampled Gaussian of
    each round's mixture of `adjacency` uedp (eps_rdp_bound, the coarser cross-check: >= the PLD value) or
    user. Not for undetected: its revealed-label bounds have no RDP bound here."""
    _adjacency(adjacency, (Adjacency.UEDP, Adjacency.USER))
    checked, d = _charged(runs, delta, num_users)
    if d <= 0.0:
        return math.inf
    return _rdp_epsilon(tuple((m.mixture(adjacency), c) for m, c in checked), d)


def epsilons_of(runs: Runs, *, delta: float, num_users: int | None) -> Epsilons:
    """Every epsilon of `runs` (eps_uedp, eps_user, eps_undetected and the bound that decided it,
    eps_rdp_bound) and delta_trunc: what the ledger reports."""
    checked = _check_runs(runs)
    values = {f"eps_{a}": epsilon_of(checked, a, delta=delta, num_users=num_users)
              for a in (Adjacency.UEDP, Adjacency.USER)}
    values["eps_rdp_bound"] = rdp_epsilon_of(checked, Adjacency.UEDP, delta=delta, num_users=num_users)
    values["eps_undetected"], bound = epsilon_and_bound(checked, Adjacency.UNDETECTED, delta=delta, num_users=num_users)
    return Epsilons(**values, delta=float(delta), rounds=sum(c for _, c in checked),
                    undetected_bound=bound, delta_trunc=truncation_delta(checked, num_users))


def mechanism(rule: str = "uedp", *, z: float, q_u: float, q_e: float | None = None, q_s: float | None = None,
              m_max: int | None, k_cap: int | None = None, gamma: float = 0.0) -> Mechanism:
    """A `Mechanism` of accounting rule `rule` whose q_e and q_s, where not given, are the rule's sampling
    rates (uedp.privacy.mechanisms.sampling_rates: user_dp and noiseless -> 1, 1; uedp_naive -> q_s = 0).
    uedp and uedp_naive need q_e; uedp's q_s is 0 when not given (it only matters for eps_undetected)."""
    if q_e is None and rule in ("uedp", "uedp_naive", "uedp_split"):
        raise ConfigError(f"accounting rule {rule!r} needs q_e")
    rates = sampling_rates(rule, q_e=1.0 if q_e is None else q_e, q_s=0.0 if q_s is None else q_s)
    q_e, q_s = (rates[0] if q_e is None else q_e), (rates[1] if q_s is None else q_s)
    return Mechanism(rule=rule, z=z, q_u=q_u, q_e=q_e, q_s=q_s, m_max=m_max, k_cap=k_cap, gamma=gamma)
