"""Noise calibration (contract 4): the smallest noise multiplier z whose epsilon after T identical rounds is
at most a target.

Guarantee of both searches, with eps(z) = epsilon(adjacency, [(mechanism(method, z=z, ...), rounds)],
delta=delta, value_discretization_interval=value_discretization_interval) - the very (fine, by default
auto-discretized) values a ledger of these rounds reports:

    eps(z*) <= target < eps(z* - tol).

Both return a z* in [z_0, z_0 + tol) where z_0 is the crossing of the fine epsilon curve, so they agree to
within tol (the tests check it).

Where the time goes (main job: q_u 0.25, q_e 0.2, m_max 80, k_cap 1, target 8, T = 30..100). A fine
evaluation is one RDP bound (to choose the grid, ~0.1 s), building the per-round PLD at that grid (0.3-0.6 s:
dp-accounting's general mixture code, dominating) and self_compose (~0.01 s); the old search needs 8-10 of
them at distinct z (nothing to reuse: each z is a new PLD). Building costs about 1/vdi, so a grid 32x coarser
is ~10x cheaper; its epsilon is higher by an excess that shrinks like vdi^2 (0.4% at 16x the fine grid).

`calibrate_noise_multiplier` (fast):
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
  go through `epsilon`, so its caches are shared with the ledger that follows (eps(z*) is then free).

`calibrate_noise_multiplier_reference`: the previous search (RDP bracket, then log-log interpolation and
bisection on the fine epsilon; 8-10 fine evaluations), kept as the obviously correct reference for the
tests and the benchmark (python -m experiments.benchmark --only calibration).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import inspect
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uedp.checks import positive
from uedp.errors import ConfigError
from uedp.files import PRIVATE, atomic_write_json
from uedp.privacy.accounting import (
    DEFAULT_DELTA,
    KINDS,
    MAX_DISCRETIZATION,
    Mechanism,
    Pair,
    _check_vdi,
    _rdp_epsilon,
    auto_discretization,
    check_delta,
    epsilon,
    mechanism,
    safe_m_max,
    truncation_delta,
)

COARSE_FACTOR = 32.0  # the coarse grid, relative to the auto grid of the target (or the given grid)
START_FACTOR = 4.0  # the coarse search starts where the RDP bound is at most this times the target
MAX_Z = 2.0**40


@dataclass(frozen=True)
class _Problem:
    """The calibration problem: the epsilon of `rounds` identical rounds as a function of z."""

    target: float
    method: str
    adjacency: str
    q_u: float
    q_e: float | None
    q_s: float | None
    m_max: int | None
    k_cap: int | None
    gamma: float  # uedp_split: the entity clip in units of beta
    rounds: int
    delta: float
    num_users: int | None  # N, the public number of places (the truncation charge needs it)
    vdi: float | None  # the fine grid (None: auto, as the ledger does)
    tol: float

    def groups(self, z: float) -> list[tuple[Mechanism, int]]:
        mech = mechanism(self.method, z=z, q_u=self.q_u, q_e=self.q_e, q_s=self.q_s, m_max=self.m_max,
                         k_cap=self.k_cap, gamma=self.gamma)  # fmt: skip
        return [(mech, self.rounds)]

    def mixtures(self, z: float) -> tuple[tuple[Pair, int], ...]:
        """The pairs whose RDP bound (or, for "undetected", estimate) starts the search."""
        if self.adjacency == "undetected":
            return tuple((m.undetected("four_point_S"), c) for m, c in self.groups(z))
        return tuple((m.mixture(self.adjacency), c) for m, c in self.groups(z))

    def eps(self, z: float) -> float:
        """The fine epsilon: exactly what a ledger of these rounds reports."""
        return self.eps_on(z, self.vdi)

    def eps_on(self, z: float, vdi: float | None) -> float:
        return epsilon(self.adjacency, self.groups(z), delta=self.delta, num_users=self.num_users,
                       value_discretization_interval=vdi)

    def rdp(self, z: float) -> float:
        return _rdp_epsilon(self.mixtures(z), self.delta)


def _problem(
    target_epsilon: float, *, q_u: float, q_e: float | None, q_s: float | None, m_max: int | None,
    k_cap: int | None, rounds: int, delta: float, num_users: int | None, method: str, adjacency: str,
    tol: float, value_discretization_interval: float | None, gamma: float = 0.0,
) -> _Problem:  # fmt: skip
    target = positive("target epsilon", target_epsilon)
    if not float(tol) > 0.0:
        raise ConfigError(f"calibration tolerance must be positive, got {tol!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ConfigError(f"rounds must be a positive integer, got {rounds!r}")
    if adjacency not in KINDS:
        raise ConfigError(f"adjacency must be one of {', '.join(KINDS)}, got {adjacency!r}")
    if method == "noiseless":
        raise ConfigError("a noiseless mechanism cannot be calibrated")
    delta = check_delta(delta, num_users)
    vdi = _check_vdi(value_discretization_interval)
    problem = _Problem(target=target, method=method, adjacency=adjacency, q_u=q_u, q_e=q_e, q_s=q_s,
                       m_max=m_max, k_cap=k_cap, gamma=float(gamma), rounds=rounds, delta=delta,
                       num_users=num_users, vdi=vdi, tol=float(tol))  # fmt: skip
    trunc = truncation_delta(problem.groups(1.0), num_users)
    if trunc >= delta:
        safe = safe_m_max(num_users, q_u, rounds, delta)
        raise ConfigError(
            f"privacy.m_max = {m_max} truncates the cohort too often for any epsilon: over {rounds} rounds of "
            f"N = {num_users} places at q_u = {q_u} the truncation charge is {trunc:.3g} >= delta = {delta:g} "
            f"(docs/proofs.md section 4); use m_max >= {safe} (or privacy.m_max = 0: chosen automatically)")
    return problem


def calibrate_noise_multiplier(
    target_epsilon: float,
    *,
    q_u: float,
    q_e: float | None = None,
    q_s: float | None = None,
    m_max: int | None,
    k_cap: int | None = None,
    rounds: int,
    delta: float = DEFAULT_DELTA,
    num_users: int | None = None,
    method: str = "uedp",
    adjacency: str = "uedp",
    tol: float = 1e-3,
    value_discretization_interval: float | None = None,
    gamma: float = 0.0,
) -> float:
    """The smallest noise multiplier z, up to `tol` (absolute), whose epsilon after `rounds` identical
    rounds is <= target_epsilon, for `adjacency` "uedp" (eps_uedp, default), "user" (eps_user) or
    "undetected" (eps_undetected); `calibrate_claims` for several at once.

    Guarantee, with eps(z) = epsilon(adjacency, [(mechanism(method, z=z, ...), rounds)], delta=delta,
    value_discretization_interval=value_discretization_interval) - the very values a ledger of these
    rounds reports:  eps(z*) <= target < eps(z* - tol).
    Search (module docstring): RDP bracket, coarse-grid secant, extrapolation to the fine grid, then
    typically 2 fine evaluations that prove the guarantee."""
    p = _problem(target_epsilon, q_u=q_u, q_e=q_e, q_s=q_s, m_max=m_max, k_cap=k_cap, rounds=rounds,
                 delta=delta, num_users=num_users, method=method, adjacency=adjacency, tol=tol,
                 value_discretization_interval=value_discretization_interval, gamma=gamma)  # fmt: skip
    live = [m for m, _ in p.mixtures(1.0) if not m.is_null]  # also validates the mechanism options
    if not live:
        raise ConfigError("epsilon is 0 for every noise multiplier (nothing is ever sampled)")
    if any(m.is_blatant for m in live):
        raise ConfigError(f"epsilon is infinite for every noise multiplier ({method}, {adjacency} adjacency)")
    z_start = 1.0
    while p.rdp(z_start) > START_FACTOR * p.target:  # RDP >= PLD: keep the coarse PLDs small
        z_start *= 2.0
        if z_start > MAX_Z:
            raise ConfigError(f"target epsilon {p.target} is not reachable")
    base = p.vdi if p.vdi is not None else auto_discretization(p.target)  # ~ the fine grid at the crossing
    coarse = min(MAX_DISCRETIZATION, COARSE_FACTOR * base)
    z_c, e_c, slope = _loglog_root(lambda z: p.eps_on(z, coarse), p.target, z_start, p.tol)
    guess = z_c
    if e_c > 0.0 and base < 0.5 * coarse:
        guess, slope = _extrapolated_root(p, coarse, base, z_c, slope)
    return _finish(p.eps, p.target, p.tol, guess, slope)


def calibrate_claims(target_epsilon: float, claims: Sequence[str], **problem: Any) -> float:
    """The smallest z (to tol) whose epsilons of EVERY adjacency in `claims` (e.g. ("uedp", "undetected"),
    a UeDP run's claim) are <= target_epsilon (options: those of `calibrate_noise_multiplier` but
    `adjacency`). Every epsilon decreases in z, so this is the largest of the per-claim calibrations; a
    claim whose epsilon at the z found so far is already <= target cannot raise it and is not calibrated.

    The result is a function of public parameters and of this code only: it is kept in a small disk cache
    (`calibration_cache_dir`, keyed by every argument and a digest of the accounting code) so that runs of
    one setting calibrate once. The guarantee of the search (eps(z*) <= target for every claim) was checked
    when the entry was written."""
    if not claims:
        raise ConfigError("calibration needs at least one claimed epsilon")
    key = _cache_key(target_epsilon, claims, problem)
    cached = _cache_read(key)
    if cached is not None:
        return cached
    z: float | None = None
    for claim in claims:
        if z is not None:
            p = _problem(target_epsilon, **_with_defaults(problem), adjacency=claim)
            if p.eps(z) <= p.target:
                continue
        z = calibrate_noise_multiplier(target_epsilon, adjacency=claim, **problem)
    assert z is not None
    _cache_write(key, z)
    return z


_DEFAULTS = {k: v.default for k, v in inspect.signature(calibrate_noise_multiplier).parameters.items()
             if v.kind is inspect.Parameter.KEYWORD_ONLY and v.default is not inspect.Parameter.empty
             and k != "adjacency"}


def _with_defaults(problem: dict[str, Any]) -> dict[str, Any]:
    """`problem` (calibrate_noise_multiplier's options but adjacency) with that function's defaults."""
    return {**_DEFAULTS, **problem}


def calibration_cache_dir() -> Path | None:
    """$UEDP_CALIBRATION_CACHE, or ~/.cache/uedp/calibration; "" or "off" turns the cache off."""
    value = os.environ.get("UEDP_CALIBRATION_CACHE")
    if value is not None:
        return None if value in ("", "off") else Path(value)
    return Path.home() / ".cache" / "uedp" / "calibration"


@functools.cache
def _code_digest() -> str:
    """The accounting code and dp_accounting's version: a change to either invalidates every entry."""
    from uedp.privacy import accounting, sensitivity

    h = hashlib.sha256(importlib.metadata.version("dp-accounting").encode())
    for module in (accounting, sensitivity, sys.modules[__name__]):
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


def _extrapolated_root(p: _Problem, coarse: float, fine: float, z: float, slope: float) -> tuple[float, float]:
    """Where the fine epsilon, extrapolated from grids `coarse` and `coarse`/2 (Richardson: the excess of
    the pessimistic estimate goes like vdi^2), crosses the target: secant steps in log-log coordinates
    from the coarse crossing z (the first one with the coarse slope). Returns (z, slope)."""

    def predicted(zz: float) -> float:
        e_1, e_2 = p.eps_on(zz, coarse), p.eps_on(zz, 0.5 * coarse)
        return e_2 - (e_1 - e_2) * (0.25 * coarse**2 - fine**2) / (0.75 * coarse**2)

    log_target = math.log(p.target)
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
        if abs(math.log(r) - log_target) / abs(slope) * math.exp(u) < p.tol / 8:
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
    slope = -1.5  # a Gaussian's epsilon goes like 1/z to 1/z^2
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


def calibrate_noise_multiplier_reference(
    target_epsilon: float,
    *,
    q_u: float,
    q_e: float | None = None,
    q_s: float | None = None,
    m_max: int | None,
    k_cap: int | None = None,
    rounds: int,
    delta: float = DEFAULT_DELTA,
    num_users: int | None = None,
    method: str = "uedp",
    adjacency: str = "uedp",
    tol: float = 1e-3,
    value_discretization_interval: float | None = None,
    gamma: float = 0.0,
) -> float:
    """The previous search, kept as the reference (same signature and guarantee, 3-6x slower).
    Search: the cheap RDP bound (>= the PLD epsilon) brackets z*; then log-log interpolation with bisection
    as fallback narrows the bracket on the PLD epsilon (typically 6-10 PLD evaluations)."""
    p = _problem(target_epsilon, q_u=q_u, q_e=q_e, q_s=q_s, m_max=m_max, k_cap=k_cap, rounds=rounds,
                 delta=delta, num_users=num_users, method=method, adjacency=adjacency, tol=tol,
                 value_discretization_interval=value_discretization_interval, gamma=gamma)  # fmt: skip
    target, eps, rdp = p.target, p.eps, p.rdp
    probe = eps(1.0)
    if probe == 0.0:
        raise ConfigError("epsilon is 0 for every noise multiplier (nothing is ever sampled)")
    if math.isinf(probe):
        raise ConfigError(f"epsilon is infinite for every noise multiplier ({method}, {adjacency} adjacency)")
    lo, hi = 0.0, 1.0
    while rdp(hi) > target:  # RDP >= PLD
        lo, hi = hi, 2.0 * hi
        if hi > MAX_Z:
            raise ConfigError(f"target epsilon {target} is not reachable")
    while hi - lo > max(tol, 1e-2 * hi):  # coarse bracket on the RDP bound (cheap)
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if rdp(mid) <= target else (mid, hi)
    e_hi = eps(hi)
    while e_hi > target:  # the PLD value can sit a hair above a tight RDP bound
        hi *= 1.01
        e_hi = eps(hi)
    lo = 0.8 * hi
    e_lo = eps(lo)
    while e_lo <= target:
        hi, e_hi, lo = lo, e_lo, 0.8 * lo
        e_lo = eps(lo)
    while True:
        while hi - lo > tol:  # invariant: eps(lo) > target >= eps(hi)
            width = hi - lo
            t = math.log(e_lo / target) / math.log(e_lo / e_hi) if e_hi > 0.0 else 0.5
            guess = math.exp(math.log(lo) + t * (math.log(hi) - math.log(lo)))
            for z in (guess - tol / 3, guess + tol / 3, 0.5 * (lo + hi)):
                if not lo < z < hi:
                    continue
                e = eps(z)
                if e <= target:
                    hi, e_hi = z, e
                else:
                    lo, e_lo = z, e
                if hi - lo <= 0.5 * width:
                    break
        below = hi - tol
        if below <= 0.0:
            return hi
        e_below = eps(below)
        if e_below > target:
            return hi
        hi, e_hi = below, e_below  # eps is not exactly monotone on a grid: keep searching below
        if lo >= hi:
            lo = 0.8 * hi
            e_lo = eps(lo)
            while e_lo <= target:
                hi, e_hi, lo = lo, e_lo, 0.8 * lo
                e_lo = eps(lo)
