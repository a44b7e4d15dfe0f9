"""Calibration of the noise multiplier (docs/mechanism.md section 4, uedp.privacy.calibration): the fast search
returns the z of a plain bracketing search (`reference_z`, here) within tol, and the documented guarantee
eps(z*) <= target < eps(z* - tol) holds on the very epsilon a ledger reports. Timings are for studies/benchmark.py
(--only calibration), never asserted."""

from __future__ import annotations

import math

import pytest

from uedp.errors import ConfigError
from uedp.privacy.accounting import epsilon_of, mechanism
from uedp.privacy.calibration import calibrate_epsilon_function, calibrate_identical
from uedp.privacy.composition import pairs_rdp_epsilon

DELTA = 1e-5
# num_users <= m_max: no place can be truncated, so no truncation charge (docs/proofs.md section 4)
SETTINGS = [  # small and quick: explicit coarse grids for the mixtures, the auto grid for user adjacency
    dict(target=4.0, q_u=0.1, q_e=0.3, q_s=0.1, m_max=20, k_cap=2, rounds=10, value_discretization_interval=0.02,
         num_users=20),
    dict(target=3.0, q_u=0.05, q_e=0.5, m_max=10, rounds=10, value_discretization_interval=0.02, num_users=10),
    dict(target=1.0, q_u=0.05, m_max=None, rounds=40, rule="user_dp", adjacency="user"),
    dict(target=2.0, q_u=0.02, q_e=0.3, m_max=10, rounds=30, adjacency="user", tol=1e-2, num_users=10),
    dict(target=3.0, q_u=0.25, q_e=0.2, q_s=1.0, m_max=40, k_cap=1, rounds=10, adjacency="undetected",
         value_discretization_interval=0.02, num_users=40),
]  # fmt: skip


def fine_epsilon(z: float, setting: dict) -> float:
    """What a ledger of these rounds reports (the auto grid unless the setting gives one)."""
    params = {k: v for k, v in setting.items() if k not in ("target", "tol")}
    rule, adjacency = params.pop("rule", "uedp"), params.pop("adjacency", "uedp")
    rounds, vdi = params.pop("rounds"), params.pop("value_discretization_interval", None)
    num_users = params.pop("num_users", None)
    m = mechanism(rule, z=z, **params)
    return epsilon_of([(m, rounds)], adjacency, delta=DELTA, value_discretization_interval=vdi, num_users=num_users)

def calibrated(target: float, **setting) -> float:
    """calibrate_identical on one claim, the setting's `adjacency` (default uedp), rule default uedp."""
    adjacency = setting.pop("adjacency", "uedp")
    setting.setdefault("rule", "uedp")
    setting.setdefault("num_users", None)
    return calibrate_identical(target, (adjacency,), delta=setting.pop("delta", DELTA), **setting)


def reference_z(target: float, *, q_u: float, q_e: float | None = None, q_s: float | None = None,
                m_max: int | None, k_cap: int | None = None, rounds: int, num_users: int | None = None,
                rule: str = "uedp", adjacency: str = "uedp", tol: float = 1e-3,
                value_discretization_interval: float | None = None) -> float:
    """A plain bracketing search, obviously correct and 3-6x slower than the fast one, with the same guarantee:
    the RDP bound (>= the PLD epsilon) brackets z*, then log-log interpolation with bisection as fallback
    narrows the bracket on the fine epsilon (typically 6-10 PLD evaluations)."""
    if not target > 0.0:
        raise ConfigError("target epsilon must be positive")
    if not tol > 0.0:
        raise ConfigError("calibration tolerance must be positive")

    def mech(z: float):
        return mechanism(rule, z=z, q_u=q_u, q_e=q_e, q_s=q_s, m_max=m_max, k_cap=k_cap)

    def eps(z: float) -> float:
        return epsilon_of([(mech(z), rounds)], adjacency, delta=DELTA, num_users=num_users,
                          value_discretization_interval=value_discretization_interval)

    def rdp(z: float) -> float:
        m = mech(z)
        pair = m.undetected("four_point_S") if adjacency == "undetected" else m.mixture(adjacency)
        return pairs_rdp_epsilon([(pair, rounds)], delta=DELTA)

    probe = eps(1.0)
    if probe == 0.0:
        raise ConfigError("epsilon is 0 for every noise multiplier (nothing is ever sampled)")
    if math.isinf(probe):
        raise ConfigError(f"epsilon is infinite for every noise multiplier ({rule}, {adjacency} adjacency)")
    lo, hi = 0.0, 1.0
    while rdp(hi) > target:  # RDP >= PLD
        lo, hi = hi, 2.0 * hi
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
        if below <= 0.0 or eps(below) > target:
            return hi
        hi, e_hi = below, eps(below)  # eps is not exactly monotone on a grid: keep searching below
        if lo >= hi:
            lo = 0.8 * hi
            e_lo = eps(lo)
            while e_lo <= target:
                hi, e_hi, lo = lo, e_lo, 0.8 * lo
                e_lo = eps(lo)


@pytest.mark.parametrize("setting", SETTINGS)
def test_fast_calibration_matches_the_reference_and_the_guarantee_holds(setting) -> None:
    kw = dict(setting)
    target, tol = kw.pop("target"), kw.get("tol", 1e-3)
    z_fast = calibrated(target, **kw)
    z_ref = reference_z(target, **kw)
    assert abs(z_fast - z_ref) < tol
    for z in (z_fast, z_ref):
        assert fine_epsilon(z, setting) <= target < fine_epsilon(z - tol, setting)


def test_calibration_hits_target() -> None:
    """eps(z*) <= target < eps(z* - tol). The guarantee holds on any grid; a coarse one keeps this fast."""
    tol, rounds, target, vdi = 1e-3, 40, 3.0, 1e-2
    z = calibrated(target, q_u=0.05, q_e=0.5, m_max=50, k_cap=3, rounds=rounds, tol=tol,
                   value_discretization_interval=vdi, num_users=50)

    def eps_at(zz: float) -> float:
        m = mechanism("uedp", z=zz, q_u=0.05, q_e=0.5, m_max=50, k_cap=3)
        return epsilon_of([(m, rounds)], "uedp", value_discretization_interval=vdi, num_users=50, delta=1e-5)

    assert eps_at(z) <= target < eps_at(z - tol)
    z_user = calibrated(1.0, adjacency="user", q_u=0.05, m_max=50, rounds=rounds, rule="user_dp",
                        value_discretization_interval=vdi, num_users=50)

    def user_at(zz: float) -> float:
        m = mechanism("user_dp", z=zz, q_u=0.05, m_max=50)
        return epsilon_of([(m, rounds)], "user", value_discretization_interval=vdi, num_users=50, delta=1e-5)

    assert user_at(z_user) <= 1.0 < user_at(z_user - tol)


def test_calibration_with_the_default_grid_passes_the_ledger_budget() -> None:
    """On the default (auto, fine) grid: the guarantee holds on the ledger's values, and the calibrated z,
    recorded for every round, passes the ledger's budget check up to the last round."""
    from uedp.privacy.ledger import Ledger, RoundRecord

    rounds, target, tol = 20, 4.0, 1e-3
    params = dict(q_u=0.1, q_e=0.3, q_s=0.1, m_max=20, k_cap=2)
    z = calibrated(target, rounds=rounds, tol=tol, num_users=20, **params)
    setting = dict(params, rounds=rounds, num_users=20)
    assert fine_epsilon(z, setting) <= target < fine_epsilon(z - tol, setting)
    ledger = Ledger(delta=DELTA, num_users=20)
    for t in range(1, rounds + 1):
        record = RoundRecord(round=t, rule="uedp", **params, beta=1.0, w_max=1.0, z=z, denominator=2.0)
        if t == rounds:
            assert ledger.check_budget(record, target_epsilon=target).allowed
        ledger.append(record)
    assert ledger.epsilons()["eps_uedp"] <= target


def test_calibration_validation() -> None:
    for calibrate in (calibrated, reference_z):
        with pytest.raises(ConfigError, match="target"):
            calibrate(0.0, q_u=0.05, q_e=0.5, m_max=10, rounds=10, num_users=10)
        with pytest.raises(ConfigError, match="0 for every"):
            calibrate(1.0, q_u=0.0, q_e=0.0, m_max=10, rounds=10, num_users=10)
        with pytest.raises(ConfigError, match="infinite for every"):
            calibrate(1.0, q_u=0.05, m_max=None, rounds=10, rule="user_dp")  # uedp adjacency: s_e = inf
        with pytest.raises(ConfigError, match="tolerance"):
            calibrate(1.0, q_u=0.05, q_e=0.5, m_max=10, rounds=10, tol=0.0, num_users=10)
        with pytest.raises(ConfigError, match="q_e"):
            calibrate(1.0, q_u=0.05, m_max=10, rounds=10, num_users=10)
    # the run's calibration checks every option before any search
    with pytest.raises(ConfigError, match="rounds"):
        calibrated(1.0, q_u=0.05, q_e=0.5, m_max=10, rounds=0, num_users=10)
    with pytest.raises(ConfigError, match="number of places"):  # truncation needs N
        calibrated(1.0, q_u=0.05, q_e=0.5, m_max=10, rounds=10)
    with pytest.raises(ConfigError, match="use m_max >= 89"):  # truncation charge >= delta: refused
        calibrated(8.0, q_u=0.25, q_e=0.2, m_max=80, k_cap=1, rounds=30, num_users=200)
    with pytest.raises(ConfigError, match="adjacency"):
        calibrated(1.0, adjacency="kind", q_u=0.05, q_e=0.5, m_max=10, rounds=10, num_users=10)


def _power_law(z: float) -> float:
    return 8.0 * z**-1.5


@pytest.mark.parametrize("guess", [1e-3, 0.2, 1.0, 1.0001, 1.5, 30.0])
@pytest.mark.parametrize("slope", [-1.5, -0.2, -10.0, float("nan"), 1.0])
def test_the_fine_finish_recovers_from_any_guess_and_slope(guess, slope) -> None:
    """The last step proves the guarantee on the fine values whatever the prediction was."""
    target, tol = 2.0, 1e-3
    crossing = (8.0 / target) ** (1 / 1.5)
    z = calibrate_epsilon_function(_power_law, target, tol=tol, guess=guess * crossing, slope=slope)
    assert _power_law(z) <= target < _power_law(z - tol)
    assert crossing <= z < crossing + tol


def test_the_fine_finish_on_a_curve_that_is_not_monotone() -> None:
    """A grid can make eps jump up a little as z grows: the result still satisfies the guarantee."""
    target, tol = 2.0, 1e-3

    def bumpy(z: float) -> float:
        return _power_law(z) * (1.0 + 0.01 * math.sin(2000.0 * z))

    for guess in (1.0, 2.52, 2.6, 4.0):
        z = calibrate_epsilon_function(bumpy, target, tol=tol, guess=guess, slope=-1.5)
        assert bumpy(z) <= target < bumpy(z - tol)


def test_calibrating_several_claims_meets_every_one() -> None:
    """A UeDP run's claim is eps_uedp AND eps_undetected: the calibrated z brings both to the target, and
    the one that binds is exactly at it (its own calibration)."""
    params = dict(q_u=0.25, q_e=0.2, q_s=1.0, m_max=40, k_cap=1, rounds=10, value_discretization_interval=0.02,
                  num_users=40, rule="uedp", delta=DELTA)
    z = calibrate_identical(3.0, ("uedp", "undetected"), **params)
    per_claim = {c: calibrate_identical(3.0, (c,), **params) for c in ("uedp", "undetected")}
    assert z == max(per_claim.values()) and per_claim["undetected"] > per_claim["uedp"]  # q_s = 1 binds
    for claim in ("uedp", "undetected"):
        setting = {k: v for k, v in params.items() if k != "delta"}
        assert fine_epsilon(z, dict(setting, target=3.0, adjacency=claim)) <= 3.0
    with pytest.raises(ConfigError, match="at least one"):
        calibrate_identical(3.0, (), **params)


def test_calibrated_claims_are_cached_on_disk_by_every_argument(tmp_path, monkeypatch) -> None:
    """A second run of one setting reads its z from the cache (calibration is a function of public
    parameters and the code); any other argument, or the cache turned off, calibrates afresh. A claim that
    does not bind (eps_user at the eps_uedp z) leaves the z as it is."""
    import uedp.privacy.calibration as cal

    monkeypatch.setenv("UEDP_CALIBRATION_CACHE", str(tmp_path))
    params = dict(q_u=0.25, q_e=0.2, q_s=0.2, m_max=40, k_cap=1, rounds=10, value_discretization_interval=0.02,
                  num_users=40, rule="uedp", delta=DELTA)
    z = calibrate_identical(3.0, ("uedp", "user"), **params)
    assert len(list(tmp_path.glob("*.json"))) == 1
    assert z == calibrate_identical(3.0, ("uedp",), **params)  # eps_user <= eps_uedp: no raise
    assert len(list(tmp_path.glob("*.json"))) == 2  # another claim: another entry
    calls = []
    real = cal.calibrate  # the search calibrate_identical runs on a cache miss
    monkeypatch.setattr(cal, "calibrate", lambda *a, **k: calls.append(k) or real(*a, **k))
    assert calibrate_identical(3.0, ("uedp", "user"), **params) == z and not calls  # from the cache
    other = calibrate_identical(3.0, ("uedp", "user"), **dict(params, rounds=11))
    assert calls and other > z and len(list(tmp_path.glob("*.json"))) == 3
    monkeypatch.setenv("UEDP_CALIBRATION_CACHE", "off")
    calls.clear()
    assert calibrate_identical(3.0, ("uedp", "user"), **params) == z and calls  # recomputed, same value
