"""Privacy accounting with privacy loss distributions (contract 4). Pure functions over immutable data.

A round's mechanism is a `Mechanism` (method, z, q_u, q_e, q_s, m_max, k_cap). Per round, the difference
between adjacent datasets is a Gaussian mean shift whose size depends on what was sampled, i.e. a scalar
mixture of Gaussians (`Mixture`), which dominates the vector case (Choquette-Choo et al. 2023, Cor. 4.7, as
cited by dp-accounting's MixtureGaussianPrivacyLoss). With sensitivities s_u, s_e, s_s (uedp.privacy.
sensitivity) and sigma the noise std:

  eps_uedp        mixture [0, s_u, s_e, s_u+s_e], [(1-q_u)(1-q_e), q_u(1-q_e), (1-q_u)q_e, q_u q_e]
  eps_undetected  the same with (s_s, q_s) in place of (s_e, q_e)
  eps_user        [0, s_u], [1-q_u, q_u]
  eps_rdp_bound   RDP of the Poisson-subsampled Gaussian with q = 1-(1-q_u)(1-q_e) and noise multiplier
                  sigma / (s_u+s_e): a coarser bound, always >= eps_uedp (the cross-check).

For user_dp rounds no entity is sampled (q_e = q_s = 1). Each mixture's PLD is built with dp-accounting
(`from_mixture_gaussian_mechanism`, add-or-remove adjacency: both the ADD and REMOVE loss distributions,
like `PLDAccountant`'s default ADD_OR_REMOVE_ONE; a two-point mixture {0: 1-q, s: q}, e.g. eps_user, is
the Poisson-subsampled Gaussian with noise multiplier sigma / s and uses dp-accounting's faster closed form
`from_gaussian_mechanism(sigma / s, sampling_prob=q)`), self-composed over each run of identical rounds,
and distinct runs are composed with each other. beta and w_max cancel (sigma and every sensitivity scale with
w_max * beta), so everything is computed in units of w_max * beta.

`Mixture.dp_event()` is the same mechanism as a dp-accounting event (MixtureOfGaussiansDpEvent; the
PoissonSampledDpEvent of the Gaussian for a two-point mixture). dp-accounting's PLDAccountant
(ADD_OR_REMOVE_ONE, the same grid) composing those events gives the same epsilons as `epsilon` (eps_uedp
with and without the entity cap, eps_user, eps_undetected; 1 to 100 rounds): measured max relative
difference 1.1e-11 (tests/test_crosscheck_accountants.py). The cached path here is kept: per-round PLDs are
reused by growing ledgers and by calibration. (For a plain Gaussian, q = 1, the accountant composes rounds
in closed form and is lower by up to 1.5e-5 relative at 100 rounds; ours stays the conservative one.)

Discretization: the PLD grid (`value_discretization_interval`) is, unless given, 3e-4 times an RDP upper
bound of the same epsilon, kept within [1e-7, 1e-2] (within [1e-7, 1] once that bound exceeds 1000, where
epsilon means no privacy and a fine grid would take minutes), and rounded down to a power of 2 (so that a
growing ledger reuses its per-round PLDs). dp-accounting's pessimistic connect-the-dots estimate stays an
upper bound whatever the grid; its excess is about 1e-4 of epsilon or less up to epsilon 1000 (measured
against finer grids), and about 1% beyond. One call for 500 identical rounds takes 0.1-1 s (a few seconds
for epsilons in the hundreds). Per-round PLDs and epsilons are cached.

Delta must lie in (0, 1) and, when the number of users N is known, below 1/N (ConfigError otherwise).
Calibration of z to a target epsilon is in uedp.privacy.calibration.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import dp_accounting
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import rdp_privacy_accountant

from uedp.errors import ConfigError
from uedp.privacy.mechanisms import sampling_rates
from uedp.privacy.sensitivity import METHODS, Sensitivities, noise_std, sensitivities

DEFAULT_DELTA = 1e-5
REL_DISCRETIZATION = 3e-4
MIN_DISCRETIZATION = 1e-7
FINE_CAP = 1e-2
NO_PRIVACY = 1000.0  # above this RDP bound, a coarse grid (cost!) is fine: the epsilon means nothing
MAX_DISCRETIZATION = 1.0  # coarser grids overflow in dp-accounting
KINDS = ("uedp", "user", "undetected")


def check_delta(delta: float, num_users: int | None = None) -> float:
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"delta must lie in (0, 1), got {delta!r}")
    if num_users is not None:
        if isinstance(num_users, bool) or not isinstance(num_users, int) or num_users < 1:
            raise ConfigError(f"num_users must be a positive integer, got {num_users!r}")
        if delta >= 1.0 / num_users:
            raise ConfigError(f"delta = {delta!r} must be below 1/num_users = 1/{num_users}")
    return delta


def _probability(name: str, q: float) -> float:
    q = float(q)
    if not 0.0 <= q <= 1.0:
        raise ConfigError(f"{name} must lie in [0, 1], got {q!r}")
    return q


@dataclass(frozen=True)
class Mixture:
    """A scalar mixture-of-Gaussians mechanism: shift sensitivities[i] with probability probs[i], noise std
    sigma. Zero-probability components are dropped and equal sensitivities merged at construction."""

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

    def rdp_event(self) -> dp_accounting.DpEvent:
        """A dominating Poisson-subsampled Gaussian: the largest shift, with probability 1 - P(shift 0)."""
        q = 1.0 - sum(p for s, p in zip(self.sensitivities, self.probs) if s == 0.0)
        gaussian = dp_accounting.GaussianDpEvent(self.sigma / max(self.sensitivities))
        return gaussian if q >= 1.0 else dp_accounting.PoissonSampledDpEvent(q, gaussian)

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


def _two_way(sigma: float, s_u: float, s_x: float, q_u: float, q_x: float) -> Mixture:
    return Mixture(
        sigma=sigma,
        sensitivities=(0.0, s_u, s_x, s_u + s_x),
        probs=((1 - q_u) * (1 - q_x), q_u * (1 - q_x), (1 - q_u) * q_x, q_u * q_x),
    )


def adjacency_mixture(kind: str, sens: Sensitivities, sigma: float, *, q_u: float, q_e: float, q_s: float) -> Mixture:
    """The per-round mixture of adjacency `kind` (contract 4) for these sensitivities and noise std, in the
    units they are given in: what `Mechanism.mixture` accounts, and what the audit gives a broken
    sensitivity rule (uedp.audit.mechanism)."""
    if kind == "uedp":
        return _two_way(sigma, sens.s_u, sens.s_e, q_u, q_e)
    if kind == "undetected":
        return _two_way(sigma, sens.s_u, sens.s_s, q_u, q_s)
    if kind == "user":
        return Mixture(sigma=sigma, sensitivities=(0.0, sens.s_u), probs=(1 - q_u, q_u))
    raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")


@dataclass(frozen=True)
class Mechanism:
    """One round's public mechanism parameters (in units of w_max * beta; beta and w_max cancel).

    Its (q_e, q_s) must be the method's sampling rates (uedp.privacy.mechanisms.sampling_rates): user_dp
    and noiseless rounds use every sentence (1, 1); uedp_naive never uses S (q_s = 0)."""

    method: str
    z: float
    q_u: float
    q_e: float
    q_s: float
    m_max: int | None
    k_cap: int | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        for name in ("q_u", "q_e", "q_s"):
            object.__setattr__(self, name, _probability(name, getattr(self, name)))
        z = float(self.z)
        if self.method == "noiseless":
            if z != 0.0:
                raise ConfigError(f"noiseless rounds have noise multiplier 0, got z = {self.z!r}")
        elif not (z > 0.0 and math.isfinite(z)):
            raise ConfigError(f"noise multiplier z must be a positive finite number, got {self.z!r}")
        object.__setattr__(self, "z", z)
        rates = sampling_rates(self.method, q_e=self.q_e, q_s=self.q_s)
        if (self.q_e, self.q_s) != rates:
            raise ConfigError(f"{self.method} rounds are accounted with (q_e, q_s) = {rates} "
                              f"(uedp.privacy.mechanisms.sampling_rates), got ({self.q_e!r}, {self.q_s!r})")
        for name in ("m_max", "k_cap"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(f"{name} must be a positive integer or None, got {v!r}")
        try:
            self.sensitivities  # noqa: B018 - validates the (method, m_max, k_cap) combination
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    @property
    def sensitivities(self) -> Sensitivities:
        return sensitivities(beta=1.0, w_max=1.0, m_max=self.m_max, k_cap=self.k_cap, method=self.method)

    @property
    def sigma(self) -> float:
        """Noise std in units of w_max * beta."""
        return noise_std(self.method, self.z, self.sensitivities)

    def mixture(self, kind: str) -> Mixture:
        return adjacency_mixture(kind, self.sensitivities, self.sigma, q_u=self.q_u, q_e=self.q_e, q_s=self.q_s)


Groups = Sequence[tuple[Mechanism, int]]


@dataclass(frozen=True)
class Epsilons:
    eps_uedp: float
    eps_user: float
    eps_undetected: float
    eps_rdp_bound: float
    delta: float
    rounds: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


@contextlib.contextmanager
def _quiet_absl() -> Iterator[None]:
    """dp-accounting's RDP code logs a WARNING for every fractional order it skips; keep them out."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _check_groups(groups: Groups) -> tuple[tuple[Mechanism, int], ...]:
    out = []
    for mech, count in groups:
        if not isinstance(mech, Mechanism):
            raise TypeError(f"expected a Mechanism, got {type(mech).__name__}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigError(f"a round count must be a non-negative integer, got {count!r}")
        if count:
            out.append((mech, count))
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _rdp_epsilon(mixtures: tuple[tuple[Mixture, int], ...], delta: float) -> float:
    live = [(m, c) for m, c in mixtures if not m.is_null]
    if not live:
        return 0.0
    if any(m.is_blatant for m, _ in live):
        return math.inf
    accountant = rdp_privacy_accountant.RdpAccountant()
    with _quiet_absl():
        for m, count in live:
            accountant.compose(m.rdp_event(), count)
        return float(accountant.get_epsilon(delta))


def auto_discretization(hint: float) -> float:
    """The PLD grid for an epsilon whose RDP upper bound is `hint` (see the module docstring)."""
    if not math.isfinite(hint):  # the RDP bound overflowed: epsilon is astronomically large anyway
        return 1.0
    cap = FINE_CAP if hint <= NO_PRIVACY else MAX_DISCRETIZATION
    vdi = min(cap, max(MIN_DISCRETIZATION, REL_DISCRETIZATION * hint))
    return 2.0 ** math.floor(math.log2(vdi))  # a power of 2: per-round PLDs are reused as a ledger grows


@functools.lru_cache(maxsize=64)
def _mixture_pld(mixture: Mixture, vdi: float) -> pld_lib.PrivacyLossDistribution:
    return mixture.pld(vdi)  # PLD objects are immutable (compose returns new ones): safe to share


@functools.lru_cache(maxsize=256)
def _pld_epsilon(mixtures: tuple[tuple[Mixture, int], ...], delta: float, vdi: float | None) -> float:
    live = [(m, c) for m, c in mixtures if not m.is_null]
    if not live:
        return 0.0
    if any(m.is_blatant for m, _ in live):
        return math.inf
    if vdi is None:
        vdi = auto_discretization(_rdp_epsilon(mixtures, delta))
    total = None
    for m, count in live:
        pld = _mixture_pld(m, vdi)
        pld = pld.self_compose(count) if count > 1 else pld
        total = pld if total is None else total.compose(pld)
    return float(total.get_epsilon_for_delta(delta))


def mixture_epsilon(mixture: Mixture, rounds: int, delta: float) -> float:
    """Epsilon at `delta` of `mixture` self-composed over `rounds` rounds (PLD, the automatic grid): the
    accountant's computation for a mixture that is not a ledger's, e.g. the audit's realizable worst case."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    return _pld_epsilon(((mixture, rounds),), check_delta(delta), None)


def _check_vdi(vdi: float | None) -> float | None:
    if vdi is not None and not (float(vdi) > 0.0 and math.isfinite(float(vdi))):
        raise ConfigError(f"value_discretization_interval must be positive, got {vdi!r}")
    return None if vdi is None else float(vdi)


def epsilon(
    kind: str,
    groups: Groups,
    *,
    delta: float = DEFAULT_DELTA,
    num_users: int | None = None,
    value_discretization_interval: float | None = None,
) -> float:
    """Epsilon at `delta` of the composition of `groups` ((mechanism, rounds) pairs, in order), for
    kind "uedp", "user" or "undetected" (PLD), or "rdp_bound" (RDP of the dominating subsampled Gaussian
    of the uedp mixture)."""
    delta = check_delta(delta, num_users)
    groups = _check_groups(groups)
    vdi = _check_vdi(value_discretization_interval)
    if kind == "rdp_bound":
        return _rdp_epsilon(tuple((m.mixture("uedp"), c) for m, c in groups), delta)
    if kind not in KINDS:
        raise ValueError(f"kind must be rdp_bound or one of {', '.join(KINDS)}, got {kind!r}")
    return _pld_epsilon(tuple((m.mixture(kind), c) for m, c in groups), delta, vdi)


def compose_epsilons(
    groups: Groups, *, delta: float = DEFAULT_DELTA, num_users: int | None = None
) -> Epsilons:
    """All four epsilons of a sequence of (mechanism, rounds) groups."""
    values = {f"eps_{k}": epsilon(k, groups, delta=delta, num_users=num_users) for k in (*KINDS, "rdp_bound")}
    return Epsilons(**values, delta=float(delta), rounds=sum(c for _, c in _check_groups(groups)))


def epsilons(
    mechanism: Mechanism, *, rounds: int, delta: float = DEFAULT_DELTA, num_users: int | None = None
) -> Epsilons:
    """All four epsilons of `rounds` identical rounds of `mechanism`."""
    return compose_epsilons([(mechanism, rounds)], delta=delta, num_users=num_users)


def mechanism(
    method: str = "uedp",
    *,
    z: float,
    q_u: float,
    q_e: float | None = None,
    q_s: float | None = None,
    m_max: int | None,
    k_cap: int | None = None,
) -> Mechanism:
    """A `Mechanism` whose q_e and q_s, where not given, are the method's sampling rates
    (uedp.privacy.mechanisms.sampling_rates: user_dp and noiseless -> 1, 1; uedp_naive -> q_s = 0).
    uedp and uedp_naive need q_e; uedp's q_s is 0 when not given (it only matters for eps_undetected)."""
    if q_e is None and method in ("uedp", "uedp_naive"):
        raise ConfigError(f"method {method!r} needs q_e")
    rates = sampling_rates(method, q_e=1.0 if q_e is None else q_e, q_s=0.0 if q_s is None else q_s)
    q_e, q_s = (rates[0] if q_e is None else q_e), (rates[1] if q_s is None else q_s)
    return Mechanism(method=method, z=z, q_u=q_u, q_e=q_e, q_s=q_s, m_max=m_max, k_cap=k_cap)
