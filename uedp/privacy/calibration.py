"""Noise calibration (docs/mechanism.md section 4): the smallest noise multiplier z whose epsilon is at most a target.

One entry point, in the shape of dp-accounting's calibrate_dp_mechanism(make_fresh_accountant,
make_event_from_param, ...): the rounds as a function of z, and the adjacencies the target bounds.

  calibrate(runs_from_z, target_epsilon, adjacencies, *, delta, num_users, tol=1e-3,
            value_discretization_interval=None) -> z*            any runs of rounds (uedp.privacy.accounting)
and its conveniences:
  calibrate_identical(target_epsilon, claims, *, rule, q_u, ..., rounds, holders=None) -> z*
                                                                 T identical rounds, several claims, disk cache
  run_noise_multiplier(spec, privacy, *, rounds, num_users)      a run's z from its settings (the Flower
                                                                 component's `make_private_with_epsilon`)
  calibrate_epsilon_function(eps_of_z, target_epsilon, *, tol)   the search itself, on any decreasing eps(z)
  clear_caches()                                                 every in-memory cache of the accounting

Guarantee of every search, with eps(z) = epsilon_of(runs_from_z(z), adjacency, delta=delta,
num_users=num_users, value_discretization_interval=value_discretization_interval) (the max over the
adjacencies) - the very (fine, by default auto-discretized) values a ledger of these rounds reports - or
eps_of_z itself:

    eps(z*) <= target < eps(z* - tol).

Where the time goes (main job: q_u 0.25, q_e 0.2, m_max 80, k_cap 1, target 8, T = 30..100). A fine
evaluation is one RDP bound (to choose the grid, ~0.1 s), building the per-round PLD at that grid (0.3-0.6 s:
dp-accounting's general mixture code, dominating) and self_compose (~0.01 s). Building costs about 1/vdi, so
a grid 32x coarser is ~10x cheaper; its epsilon is higher by an excess that shrinks like vdi^2 (0.4% at 16x
the fine grid).

The fast search (`calibrate`, per adjacency):
  1. The RDP bound (>= the PLD epsilon) picks a safe start: z = 1, doubled while rdp(z) > 4 * target (so
     no coarse PLD of a huge epsilon is ever built).
  2. Illinois regula falsi in log-log coordinates (bracketing steps of at most a factor 2) on a coarse grid,
     32x the auto grid of an epsilon equal to the target (or 32x the given grid), finds the coarse crossing
     and the curve's log-log slope (~5 coarse evaluations).
  3. The same z on the grid half as coarse extrapolates the fine epsilon (Richardson, excess ~ vdi^2); one
     or two log-log secant steps on that extrapolation give the predicted fine crossing z_g.
  4. On the fine values themselves: c = z_g + tol/2 is accepted when eps(c) <= target < eps(c - tol),
     typically at once (2 fine evaluations, the minimum that proves the guarantee). Otherwise a safeguarded
     search (log-log interpolation, geometric steps, bisection) continues on the fine values until it holds.
  Predictions only choose where to evaluate: the guarantee is always checked on eps itself. The fine values
  go through `epsilon_of`, so its caches are shared with the ledger that follows (eps(z*) is then free).
`calibrate_epsilon_function` has no grid to coarsen: it runs step 2 on eps_of_z itself from z = 1, then
step 4 (one copy of both: the crafted-update audit's broken accountants and the holders' epsilon calibrate
with it). tests/test_privacy_calibration.py checks the fast search against a plain bracketing search (RDP
bracket, then log-log interpolation and bisection on the fine epsilon): they agree to within tol.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uedp.checks import non_negative_int, one_of, positive, positive_int
from uedp.errors import ConfigError
from uedp.files import PRIVATE, atomic_write_json
from uedp.privacy import accounting, composition, pairs
from uedp.privacy.accounting import (
    ADJACENCIES,
    Adjacency,
    Runs,
    _check_runs,
    epsilon_of,
    mechanism,
    safe_m_max,
    truncation_delta,
)
from uedp.privacy.composition import (
    MAX_DISCRETIZATION,
    _check_vdi,
    auto_discretization,
    check_delta,
    pairs_rdp_epsilon,
)
from uedp.privacy.pairs import Pair

COARSE_FACTOR = 32.0  # the coarse grid, relative to the auto grid of the target (or the given grid)
START_FACTOR = 4.0  # the coarse search starts where the RDP bound is at most this times the target
MAX_Z = 2.0**40
INITIAL_SLOPE = -1.5  # d log eps / d log z before any is measured: a Gaussian's epsilon goes like 1/z to 1/z^2


@dataclass(frozen=True)
class _Curve:
    """eps(z) of one adjacency: the epsilon of `runs_from_z(z)`, exactly as a ledger of those rounds
    reports it (`epsilon_of`), on the fine grid `vdi` (None: automatic) or any other."""

    runs_from_z: Callable[[float], Runs]
    adjacency: str
    delta: float
    num_users: int | None  # N, the public number of places (the truncation charge needs it)
    vdi: float | None

    def pairs(self, z: float) -> tuple[tuple[Pair, int], ...]:
        """The pairs whose RDP bound (or, for "undetected", estimate) starts the search."""
        groups = _check_runs(self.runs_from_z(z))
        if self.adjacency == "undetected":
            return tuple((m.undetected("four_point_S"), c) for m, c in groups)
        return tuple((m.mixture(self.adjacency), c) for m, c in groups)

    def eps(self, z: float) -> float:
        """The fine epsilon: exactly what a ledger of these rounds reports."""
        return self.eps_on(z, self.vdi)

    def eps_on(self, z: float, vdi: float | None) -> float:
        return epsilon_of(self.runs_from_z(z), self.adjacency, delta=self.delta, num_users=self.num_users,
                          value_discretization_interval=vdi)

    def rdp(self, z: float) -> float:
        return pairs_rdp_epsilon(self.pairs(z), delta=self.delta)


@dataclass(frozen=True)
class _IdenticalRounds:
    """runs_from_z of `rounds` identical rounds of one mechanism (`calibrate_identical`'s problem)."""

    rule: str  # the accounting rule
    q_u: float
    q_e: float | None
    q_s: float | None
    m_max: int | None
    k_cap: int | None
    gamma: float  # uedp_split: the entity clip in units of beta
    rounds: int

    def __call__(self, z: float) -> list[tuple[accounting.Mechanism, int]]:
        mech = mechanism(self.rule, z=z, q_u=self.q_u, q_e=self.q_e, q_s=self.q_s, m_max=self.m_max,
                         k_cap=self.k_cap, gamma=self.gamma)  # fmt: skip
        return [(mech, self.rounds)]


@dataclass(frozen=True)
class _Problem:
    """The calibration problem of `rounds` identical rounds: the epsilon curve, the target and tol."""

    curve: _Curve
    target: float
    tol: float


def _check_target_and_tol(target_epsilon: float, tol: float) -> tuple[float, float]:
    target = positive("target epsilon", target_epsilon)
    if not float(tol) > 0.0:
        raise ConfigError(f"calibration tolerance must be positive, got {tol!r}")
    return target, float(tol)


def _problem(
    target_epsilon: float, claims: Sequence[Adjacency | str], *, q_u: float, q_e: float | None, q_s: float | None,
    m_max: int | None, k_cap: int | None, rounds: int, delta: float, num_users: int | None, rule: str, tol: float,
    value_discretization_interval: float | None, gamma: float = 0.0,
) -> _Problem:  # fmt: skip
    """The problem of `rounds` identical rounds, every option checked; its curve is of the first claim."""
    target, tol = _check_target_and_tol(target_epsilon, tol)
    positive_int("rounds", rounds)
    for claim in claims:
        one_of("adjacency", claim, ADJACENCIES)
    if rule == "noiseless":
        raise ConfigError("a noiseless mechanism cannot be calibrated")
    delta = check_delta(delta, num_users)
    vdi = _check_vdi(value_discretization_interval)
    runs_from_z = _IdenticalRounds(rule=rule, q_u=q_u, q_e=q_e, q_s=q_s, m_max=m_max, k_cap=k_cap,
                                   gamma=float(gamma), rounds=rounds)  # fmt: skip
    trunc = truncation_delta(runs_from_z(1.0), num_users)
    if trunc >= delta:
        safe = safe_m_max(num_users, q_u, rounds, delta)
        raise ConfigError(
            f"privacy.m_max = {m_max} truncates the cohort too often for any epsilon: over {rounds} rounds of "
            f"N = {num_users} places at q_u = {q_u} the truncation charge is {trunc:.3g} >= delta = {delta:g} "
            f"(docs/proofs.md section 4); use m_max >= {safe} (or privacy.m_max = 'auto': chosen automatically)")
    curve = _Curve(runs_from_z, claims[0], delta, num_users, vdi)
    return _Problem(curve=curve, target=target, tol=tol)


def _search(curve: _Curve, target: float, tol: float) -> float:
    """The fast search of the module docstring on one curve (the guarantee is checked on curve.eps)."""
    groups = _check_runs(curve.runs_from_z(1.0))
    live = [m for m, _ in curve.pairs(1.0) if not m.is_null]  # also validates the mechanism options
    if not live:
        raise ConfigError("epsilon is 0 for every noise multiplier (nothing is ever sampled)")
    if any(m.is_blatant for m in live):
        rules = ", ".join(dict.fromkeys(m.rule for m, _ in groups))
        raise ConfigError(f"epsilon is infinite for every noise multiplier ({rules}, {curve.adjacency} adjacency)")
    z_start = 1.0
    while curve.rdp(z_start) > START_FACTOR * target:  # RDP >= PLD: keep the coarse PLDs small
        z_start *= 2.0
        if z_start > MAX_Z:
            raise ConfigError(f"target epsilon {target} is not reachable")
    base = curve.vdi if curve.vdi is not None else auto_discretization(target)  # ~ the fine grid at the crossing
    coarse = min(MAX_DISCRETIZATION, COARSE_FACTOR * base)
    z_c, e_c, slope = _loglog_root(lambda z: curve.eps_on(z, coarse), target, z_start, tol)
    guess = z_c
    if e_c > 0.0 and base < 0.5 * coarse:
        guess, slope = _extrapolated_root(curve, target, tol, coarse, base, z_c, slope)
    return _finish(curve.eps, target, tol, guess, slope)


def calibrate(
    runs_from_z: Callable[[float], Runs],
    target_epsilon: float,
    adjacencies: str | Sequence[str],
    *,
    delta: float,
    num_users: int | None,
    tol: float = 1e-3,
    value_discretization_interval: float | None = None,
) -> float:
    """The smallest noise multiplier z (to `tol`, absolute) at which the epsilon of `runs_from_z(z)`
    (RoundRuns or (Mechanism, count) runs, any mix of mechanisms) is <= target_epsilon for EVERY
    adjacency in `adjacencies`: dp-accounting's calibrate_dp_mechanism with the rounds as the event.

    Guarantee, with eps(z) = max over `adjacencies` of epsilon_of(runs_from_z(z), adjacency,
    delta=delta, num_users=num_users, value_discretization_interval=value_discretization_interval) - the
    very values a ledger of these rounds reports:  eps(z*) <= target < eps(z* - tol).
    Each adjacency is searched with the fast search of the module docstring (one whose epsilon at the z
    found so far is already <= target is not searched: every epsilon decreases in z up to the grid's
    wobble), then the max is checked at z*; should an earlier adjacency exceed the target there (a grid
    is not exactly monotone), the search continues on the max itself. `runs_from_z` must build rounds
    whose sensitivities and rates do not depend on z (only the noise does). No disk cache (a function has
    no key): `calibrate_identical` caches the identical-rounds case."""
    target, tol = _check_target_and_tol(target_epsilon, tol)
    if not callable(runs_from_z):
        raise TypeError(f"runs_from_z must be a function of z, got {type(runs_from_z).__name__}")
    claims = (adjacencies,) if isinstance(adjacencies, str) else tuple(adjacencies)
    if not claims or any(a not in ADJACENCIES for a in claims):
        raise ConfigError(f"adjacencies must be one or more of {', '.join(ADJACENCIES)}, got {adjacencies!r}")
    delta = check_delta(delta, num_users)
    vdi = _check_vdi(value_discretization_interval)
    trunc = truncation_delta(runs_from_z(1.0), num_users)  # also validates the records before any search
    if trunc >= delta:
        raise ConfigError(f"the truncation charge of these records is {trunc:.3g} >= delta = {delta:g}: no "
                          "epsilon is reachable (docs/proofs.md section 4; raise m_max)")
    curves = [_Curve(runs_from_z, a, delta, num_users, vdi) for a in dict.fromkeys(claims)]
    z: float | None = None
    for curve in curves:
        if z is not None and curve.eps(z) <= target:
            continue
        z = _search(curve, target, tol)
    assert z is not None
    if any(curve.eps(z) > target for curve in curves):  # the fine values are cached: usually no new work
        z = _finish(lambda zz: max(curve.eps(zz) for curve in curves), target, tol, z, INITIAL_SLOPE)
    return z


def calibrate_epsilon_function(
    eps_of_z: Callable[[float], float],
    target_epsilon: float,
    *,
    tol: float = 1e-3,
    guess: float | None = None,
    slope: float | None = None,
) -> float:
    """The smallest z (to `tol`, absolute) with eps_of_z(z) <= target_epsilon, for ANY epsilon function
    of z that decreases (up to a grid's wobble): e.g. a broken accountant's (uedp.audit.mechanism).

    Guarantee:  eps_of_z(z*) <= target < eps_of_z(z* - tol)  (z* > 0; checked on eps_of_z itself).
    The same search as `calibrate` without its PLD-specific steps (coarse grids, RDP start): Illinois
    regula falsi in log-log coordinates from z = 1 (or, with `guess`, straight from that guess and
    `slope`, d log eps / d log z, default INITIAL_SLOPE), then the finish that proves the guarantee.
    Values of eps_of_z are remembered during the call. ConfigError if the target is not reachable below
    MAX_Z."""
    target, tol = _check_target_and_tol(target_epsilon, tol)
    if not callable(eps_of_z):
        raise TypeError(f"eps_of_z must be a function of z, got {type(eps_of_z).__name__}")
    seen: dict[float, float] = {}

    def eps(z: float) -> float:
        if z not in seen:
            seen[z] = float(eps_of_z(z))
        return seen[z]

    if guess is None:
        guess, _, found = _loglog_root(eps, target, 1.0, tol)
        slope = found if slope is None else slope
    elif not (float(guess) > 0.0 and math.isfinite(float(guess))):
        raise ConfigError(f"the guess of z must be positive and finite, got {guess!r}")
    return _finish(eps, target, tol, float(guess), INITIAL_SLOPE if slope is None else float(slope))


def clear_caches() -> None:
    """Empty every in-memory cache (functools) of uedp.privacy.composition, pairs and this module: per-round
    PLDs, RDP curves, epsilons, the code digest. For timings from cold caches (studies/benchmark.py) and
    tests; values do not change (the caches only remember pure functions' results). The calibration disk
    cache (`calibration_cache_dir`) is NOT touched: turn it off with UEDP_CALIBRATION_CACHE=off."""
    for module in (composition, pairs, sys.modules[__name__]):
        for obj in vars(module).values():
            if callable(getattr(obj, "cache_clear", None)) and getattr(obj, "__module__", None) == module.__name__:
                obj.cache_clear()


def calibrate_identical(
    target_epsilon: float,
    claims: Sequence[Adjacency | str],
    *,
    rule: str,
    q_u: float,
    q_e: float | None = None,
    q_s: float | None = None,
    m_max: int | None,
    k_cap: int | None = None,
    rounds: int,
    delta: float,
    num_users: int | None,
    gamma: float = 0.0,
    holders: int | None = None,
    tol: float = 1e-3,
    value_discretization_interval: float | None = None,
) -> float:
    """The smallest z (to `tol`) with which `rounds` identical rounds of one mechanism (`mechanism(rule, z=z,
    ...)`) keep EVERY epsilon in `claims` (e.g. ("uedp", "undetected"), a UeDP run's claim) <= target_epsilon:
    `calibrate` on those rounds, after the options are checked (ConfigError naming the bad one). With
    `holders` = K, also the epsilon for one user and one entity held by K other users
    (uedp.privacy.holders.holders_epsilon, undetected; it is >= eps_user): `calibrate_epsilon_function` on it
    from the claims' z, and the larger z is returned.

    The result is a function of public parameters and of this code only: it is kept in a small disk cache
    (`calibration_cache_dir`, keyed by every argument and a digest of the accounting code) so that runs of
    one setting calibrate once. The guarantee of the search was checked when the entry was written."""
    claims = tuple(claims)
    if not claims:
        raise ConfigError("calibration needs at least one claimed epsilon")
    options = dict(rule=rule, q_u=q_u, q_e=q_e, q_s=q_s, m_max=m_max, k_cap=k_cap, rounds=rounds, delta=delta,
                   num_users=num_users, gamma=float(gamma), tol=tol,
                   value_discretization_interval=value_discretization_interval)
    p = _problem(target_epsilon, claims, **options)
    curve = p.curve

    def claimed() -> float:
        return calibrate(curve.runs_from_z, p.target, claims, delta=curve.delta, num_users=curve.num_users,
                         tol=p.tol, value_discretization_interval=curve.vdi)

    z = _cached(_cache_key(target_epsilon, claims, options), claimed)
    if holders is not None:
        k = non_negative_int("the number of other holders (privacy.target_holders)", holders)
        z = max(z, _cached(_cache_key(target_epsilon, [f"holders={k}"], options),
                           lambda: _calibrate_holders(p, k, start=z)))
    return z


def _calibrate_holders(p: _Problem, holders: int, *, start: float) -> float:
    """The smallest z whose epsilon for one user and one undetected entity held by `holders` other users is <=
    the target, from `start`, a z at which the claims (eps_user or more) hold: the holders' z is at least that."""
    from uedp.privacy.holders import holders_epsilon

    curve = p.curve

    def eps(z: float) -> float:
        return holders_epsilon(curve.runs_from_z(z), holders, delta=curve.delta, num_users=curve.num_users).epsilon

    return calibrate_epsilon_function(eps, p.target, tol=p.tol, guess=start * 2.0)


def _cached(key: str, compute: Callable[[], float]) -> float:
    cached = _cache_read(key)
    if cached is not None:
        return cached
    z = compute()
    _cache_write(key, z)
    return z


def calibration_cache_dir() -> Path | None:
    """$UEDP_CALIBRATION_CACHE, or ~/.cache/uedp/calibration; "" or "off" turns the cache off."""
    value = os.environ.get("UEDP_CALIBRATION_CACHE")
    if value is not None:
        return None if value in ("", "off") else Path(value)
    return Path.home() / ".cache" / "uedp" / "calibration"


@functools.cache
def _code_digest() -> str:
    """The accounting code and dp_accounting's version: a change to either invalidates every entry."""
    from uedp.privacy import holders, mechanisms, numeric, sensitivity

    h = hashlib.sha256(importlib.metadata.version("dp-accounting").encode())
    for module in (accounting, composition, holders, mechanisms, numeric, pairs, sensitivity, sys.modules[__name__]):
        h.update(Path(module.__file__ or "").read_bytes())
    return h.hexdigest()


def _cache_key(target_epsilon: float, claims: Sequence[str], problem: dict[str, Any]) -> str:
    data = {"target": float(target_epsilon), "claims": list(claims), "code": _code_digest(),
            "problem": {k: problem[k] for k in sorted(problem)}}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=repr).encode()).hexdigest()


def _cache_read(key: str) -> float | None:
    folder = calibration_cache_dir()
    if folder is None:
        return None
    try:
        z = float(json.loads((folder / f"{key}.json").read_text())["z"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return z if z > 0.0 and math.isfinite(z) else None


def _cache_write(key: str, z: float) -> None:
    folder = calibration_cache_dir()
    if folder is None:
        return
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs time
        atomic_write_json(folder / f"{key}.json", {"z": z}, mode=PRIVATE)  # parallel runs may write it too


def _extrapolated_root(curve: _Curve, target: float, tol: float, coarse: float, fine: float, z: float,
                       slope: float) -> tuple[float, float]:
    """Where the fine epsilon, extrapolated from grids `coarse` and `coarse`/2 (Richardson: the excess of
    the pessimistic estimate goes like vdi^2), crosses the target: secant steps in log-log coordinates
    from the coarse crossing z (the first one with the coarse slope). Returns (z, slope)."""

    def predicted(zz: float) -> float:
        e_1, e_2 = curve.eps_on(zz, coarse), curve.eps_on(zz, 0.5 * coarse)
        return e_2 - (e_1 - e_2) * (0.25 * coarse**2 - fine**2) / (0.75 * coarse**2)

    log_target = math.log(target)
    u, r = math.log(z), predicted(z)
    if not r > 0.0:
        return z, slope
    for _ in range(4):
        u_next = u + (log_target - math.log(r)) / slope
        r_next = predicted(math.exp(u_next))
        if not r_next > 0.0:
            break
        if u_next != u and r_next != r:
            s = (math.log(r_next) - math.log(r)) / (u_next - u)
            slope = s if s < 0.0 else slope
        u, r = u_next, r_next
        if abs(math.log(r) - log_target) / abs(slope) * math.exp(u) < tol / 8:
            break
    return math.exp(u), slope


def _loglog_root(f: Callable[[float], float], target: float, z0: float, tol: float) -> tuple[float, float, float]:
    """(z, f(z), d log f / d log z) at an evaluated z near the crossing f(z) = target of a decreasing
    positive f: Illinois regula falsi in log-log coordinates, at most a factor 2 per bracketing step.
    Stops when the residual implies a z error below tol/8 or the bracket is narrower than tol/4."""
    log_target = math.log(target)

    def g(u: float) -> float:
        e = f(math.exp(u))
        return (math.log(e) if e > 0.0 else -math.inf) - log_target

    u0 = math.log(z0)
    g0 = g(u0)
    slope = INITIAL_SLOPE
    pts = [(u0, g0)]
    # Bracket: step towards the crossing, clamped to a factor 2.
    u, gu = u0, g0
    for _ in range(100):
        if not math.isfinite(gu) or abs(gu / slope) * math.exp(u) < tol / 8:  # close enough already
            break
        step = max(-math.log(2.0), min(math.log(2.0), -1.05 * gu / slope))  # overshoot a little: a bracket
        u_new = u + step
        if math.exp(u_new) > MAX_Z:
            raise ConfigError(f"target epsilon {target} is not reachable")
        g_new = g(u_new)
        if math.isfinite(g_new) and math.isfinite(gu) and g_new != gu:
            s = (g_new - gu) / (u_new - u)
            if s < 0.0:
                slope = s
        u, gu = u_new, g_new
        pts.append((u, gu))
        if (gu > 0.0) != (g0 > 0.0) or not math.isfinite(gu):
            break
    above = [(uu, gg) for uu, gg in pts if gg > 0.0]  # eps > target: z too small
    below = [(uu, gg) for uu, gg in pts if gg <= 0.0]
    ua, ga = max(above, default=(math.inf, math.inf))
    ub, gb = min(below, default=(-math.inf, -math.inf))
    if not ua < ub:  # no bracket (close enough, or a noisy curve): hand over the best point
        u_best = min(pts, key=lambda t: abs(t[1]))[0]
        return math.exp(u_best), f(math.exp(u_best)), slope
    wa, wb = ga, gb  # the values regula falsi interpolates (Illinois halves a stale end's)
    side = 0
    for _ in range(60):
        z_err = min(abs(ga), abs(gb)) / abs(slope) * math.exp(ua if abs(ga) < abs(gb) else ub)
        if z_err < tol / 8 or math.exp(ub) - math.exp(ua) < tol / 4 or not (math.isfinite(ga) and math.isfinite(gb)):
            break
        um = ub - wb * (ub - ua) / (wb - wa)
        if not ua < um < ub:
            um = 0.5 * (ua + ub)
        gm = g(um)
        if gm > 0.0:
            ua, ga, wa = um, gm, gm
            if side == -1:
                wb *= 0.5  # Illinois: the bracket keeps shrinking from both ends
            side = -1
        else:
            ub, gb, wb = um, gm, gm
            if side == 1:
                wa *= 0.5
            side = 1
        if math.isfinite(ga) and math.isfinite(gb):
            s = (gb - ga) / (ub - ua)
            if s < 0.0:
                slope = s
    u_best = ua if abs(ga) < abs(gb) else ub
    return math.exp(u_best), f(math.exp(u_best)), slope  # f is cached: no new evaluation


def _finish(eps: Callable[[float], float], target: float, tol: float, guess: float, slope: float) -> float:
    """The smallest z (to tol) with eps(z) <= target < eps(z - tol), on eps itself, starting from a guess of
    the crossing: candidate c = guess + tol/2, accepted when eps(c) <= target < eps(c - tol). Otherwise
    the next guess interpolates (log-log) between the tightest known points on either side, or extrapolates
    with `slope` from one side, with steps growing geometrically and bisection as the safeguard."""
    slope = slope if slope < 0.0 and math.isfinite(slope) else -1.0
    lo = e_lo = hi = e_hi = None  # largest z seen with eps > target; smallest with eps <= target
    c = max(guess, 0.5 * tol) + 0.5 * tol
    step = tol
    width = math.inf
    for _ in range(200):
        e = eps(c)
        if e > target:
            lo, e_lo = c, e
        else:
            below = c - tol
            if below <= 0.0:
                return c
            e_below = eps(below)
            if e_below > target:
                return c
            hi, e_hi = below, e_below  # the crossing is further down
            if lo is not None and lo >= hi:  # eps is not exactly monotone on a grid: forget the stale point
                lo = e_lo = None
        if lo is not None and hi is not None:
            if hi - lo <= tol:
                c = hi  # eps(hi) is cached; the next step checks hi - tol
                continue
            x = _interpolate(lo, e_lo, hi, e_hi, target)
            if hi - lo > 0.5 * width:  # poor progress: bisect
                x = 0.5 * (lo + hi)
            width = hi - lo
            c = min(hi, max(lo + tol, x + 0.5 * tol))
        elif lo is not None:  # all above target: go up
            x = min(4.0 * lo, lo * math.exp((math.log(target) - math.log(e_lo)) / slope))  # at most x4
            c = max(x + 0.5 * tol, lo + step)
            step *= 2.0
            if c > MAX_Z:
                raise ConfigError(f"target epsilon {target} is not reachable")
        else:  # all at or below target: go down
            x = hi * math.exp((math.log(target) - math.log(e_hi)) / slope) if e_hi > 0.0 else 0.5 * hi
            c = min(x + 0.5 * tol, hi - step)
            step *= 2.0
            c = max(c, 0.5 * hi)  # at most halve, so z stays positive
    raise RuntimeError("calibration did not converge")  # pragma: no cover - the steps above always progress


def _interpolate(lo: float, e_lo: float, hi: float, e_hi: float, target: float) -> float:
    """The z where the log-log line through (lo, e_lo) and (hi, e_hi) crosses target."""
    if e_hi <= 0.0 or e_lo <= e_hi:
        return 0.5 * (lo + hi)
    t = math.log(e_lo / target) / math.log(e_lo / e_hi)
    return math.exp(math.log(lo) + t * (math.log(hi) - math.log(lo)))


def run_noise_multiplier(spec: Any, privacy: Any, *, rounds: int, num_users: int) -> float:
    """A run's noise multiplier from its mechanism spec (uedp.privacy.mechanisms.MechanismSpec) and privacy
    settings (uedp.config.PrivacyConfig): privacy.noise_multiplier when privacy.target_epsilon is None (or 0, its
    run-config spelling), else the smallest z with which every claimed epsilon (privacy.target_on; UeDP: eps_uedp
    and eps_undetected) reaches the target over `rounds` rounds of N = `num_users` places, and with
    privacy.target_holders = K >= 0 also the epsilon for an entity held by K other users (`calibrate_identical`);
    0 for a noiseless one."""
    p = privacy
    if not spec.private:
        return 0.0
    if p.target_epsilon is None or p.target_epsilon == 0:
        if p.noise_multiplier <= 0:
            raise ConfigError("privacy.noise_multiplier must be > 0 when privacy.target_epsilon is None")
        return float(p.noise_multiplier)
    q_e, q_s = spec.rates(p)
    holders = getattr(p, "target_holders", None)
    return calibrate_identical(p.target_epsilon, spec.claims_for(p), rule=spec.rule, q_u=p.q_u, q_e=q_e, q_s=q_s,
                               m_max=spec.m_max(p), k_cap=spec.k_cap(p), rounds=rounds, delta=p.delta,
                               num_users=num_users, gamma=spec.gamma(p) / p.beta,
                               holders=holders)
