"""One user and an entity held by k other users (uedp.privacy.holders; docs/proofs.md section 11): the
revealed-count bound against dp_accounting computed directly, group privacy against the exact Gaussian,
k = 0 is eps_user, monotone in k, UeDP's detected entity is eps_uedp, and every upper bound stays above the
concrete world's lower bound (uedp.audit.holders)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy.stats import binom, norm

from uedp.audit.holders import holder_world, world_epsilon
from uedp.errors import ConfigError
from uedp.privacy import accounting as acc
from uedp.privacy.holders import (
    MIXED_SPLITS,
    TAIL_FRACTION,
    count_pair,
    group_epsilon,
    holders_epsilon,
    tail_cut,
    user_group_epsilon,
)

DELTA = 1e-5
# sigma several times the shifts: dp-accounting's mixture PLDs (seconds each at larger shifts) stay quick
USER_DP = acc.mechanism("user_dp", z=4.0, q_u=0.2, m_max=None)  # sigma 4 b
UEDP = acc.mechanism("uedp", z=1.5, q_u=0.2, q_e=0.3, q_s=0.5, m_max=60, k_cap=1)  # sigma 4.5 b
ROUNDS, N = 5, 100
VDI = 1e-2  # a coarse PLD grid (still an upper bound): seconds, not minutes


def test_k_zero_is_the_user_epsilon() -> None:
    for mech in (USER_DP, UEDP):
        h = holders_epsilon([(mech, ROUNDS)], 0, delta=DELTA, num_users=N, value_discretization_interval=VDI)
        # the same function call on the same arguments: equal, not close
        assert h.epsilon == acc.epsilon_of([(mech, ROUNDS)], "user", delta=DELTA, num_users=N,
                                           value_discretization_interval=VDI) and h.bound == "user"


@pytest.mark.e2e  # ~9 s: two sets of mixture PLDs
def test_the_revealed_count_is_dp_accountings_pld_built_by_hand() -> None:
    """The bound composed by hand from dp_accounting's own PLD constructors (not the accountant's numerical
    parts): a mixture of Gaussians per label
    j (N(0) against {2j: 1-q, 2j+1: q}), mixed with the Bin(k, q) weights cut at j_max, self-composed over
    the rounds, read at delta minus the tail charge."""
    k, q, sigma = 2, USER_DP.q_u, USER_DP.sigma
    j_max, charge = tail_cut(k, q, ROUNDS, TAIL_FRACTION * DELTA)
    weights = binom.pmf(np.arange(j_max + 1), k, q)
    weights = weights / weights.sum()
    got = holders_epsilon([(USER_DP, ROUNDS)], k, delta=DELTA, num_users=N,
                          value_discretization_interval=VDI).bounds["revealed_count"]
    vdi = VDI
    total, mass = None, 0.0
    for j, w in enumerate(weights):
        if j == 0:
            part = pld_lib.from_gaussian_mechanism(sigma, sampling_prob=q, value_discretization_interval=vdi)
        else:
            part = pld_lib.from_mixture_gaussian_mechanism(sigma, [2.0 * j, 2.0 * j + 1.0], [1 - q, q],
                                                           value_discretization_interval=vdi)
        total = part if total is None else total.compute_mixture(part, mass / (mass + w))
        mass += w
    want = total.self_compose(ROUNDS).get_epsilon_for_delta(DELTA - charge)
    # the accountant builds the parts j >= 1 numerically (uedp.privacy.numeric: 400,001 output points, losses
    # rounded up to the same 1e-2 grid plus a curvature slack), dp-accounting by inverting the loss: two
    # pessimistic discretizations of one pair on one loss grid, measured 0.04% apart; 0.5% allows for the
    # grid's rounding going either way in each of the composed rounds
    assert got == pytest.approx(want, rel=5e-3)


@pytest.mark.e2e  # ~5 s: a fine PLD and a 400,001-point integral
def test_one_round_of_the_count_pair_by_numerical_integration() -> None:
    """The labelled pair's delta(eps) for one round equals the Bin-weighted hockey-stick divergences of its
    parts, integrated numerically (scipy), independently of dp-accounting's PLD code."""
    k, q, sigma, eps = 1, 0.3, 2.0, 0.5
    pair = count_pair(sigma, 1.0, 2.0, q, q, k, k)
    pld = pair.pld(2e-3)  # the PLD the accountant builds for this pair
    y = np.linspace(-20, 28, 400_001)
    p = norm.pdf(y, 0, sigma)
    want_remove = 0.0
    for j, w in enumerate(binom.pmf(np.arange(k + 1), k, q)):
        qd = (1 - q) * norm.pdf(y, 2 * j, sigma) + q * norm.pdf(y, 2 * j + 1, sigma)
        want_remove += w * np.trapezoid(np.maximum(qd - math.exp(eps) * p, 0.0), y)
    got = float(pld.get_delta_for_epsilon(eps))
    # the PLD is discretized at 2e-3 pessimistically (its losses rounded up by < 2e-3, so delta rises by
    # about that relative amount), the trapezoid integral on a 1.2e-4 grid is exact to ~1e-8: got is the max
    # over the two directions, so at least the remove direction, and the remove direction is the larger here
    assert want_remove * (1 - 1e-6) <= got <= want_remove * (1 + 5e-3)


def test_monotone_in_k_and_above_the_concrete_world() -> None:
    prev = 0.0
    for k in (0, 1, 3):
        h = holders_epsilon([(USER_DP, ROUNDS)], k, delta=DELTA, num_users=N, value_discretization_interval=VDI)
        lower = world_epsilon(k, q_u=USER_DP.q_u, q_sel=1.0, sigma=USER_DP.sigma, rounds=ROUNDS, delta=DELTA)
        assert lower <= h.epsilon and h.epsilon >= prev, (k, lower, h)
        prev = h.epsilon
    # the lower bound is not vacuous: at k = 0 it is the user pair's epsilon to the grid's rounding
    base = acc.epsilon_of([(USER_DP, ROUNDS)], "user", delta=DELTA, num_users=N, value_discretization_interval=1e-4)
    assert world_epsilon(0, q_u=USER_DP.q_u, q_sel=1.0, sigma=USER_DP.sigma, rounds=ROUNDS, delta=DELTA) == \
        pytest.approx(base, abs=ROUNDS * 2e-3 + 1e-3)  # optimistic loss grid 2e-3 per round, plus the PLD grid


def test_uedp_detected_is_eps_uedp_and_undetected_stays_above_its_world() -> None:
    for k in (2,):
        det = holders_epsilon([(UEDP, ROUNDS)], k, delta=DELTA, num_users=N, detected=True,
                              value_discretization_interval=VDI)
        und = holders_epsilon([(UEDP, ROUNDS)], k, delta=DELTA, num_users=N, value_discretization_interval=VDI)
        assert det.bounds["detected"] == acc.epsilon_of([(UEDP, ROUNDS)], "uedp", delta=DELTA, num_users=N,
                                                        value_discretization_interval=VDI)
        assert det.epsilon == min(det.bounds.values()) <= und.epsilon
        assert det.undetected() == und  # the CLI computes once (detected) and derives the undetected result
        lower = world_epsilon(k, q_u=UEDP.q_u, q_sel=UEDP.q_s, sigma=UEDP.sigma, rounds=ROUNDS, delta=DELTA)
        assert lower <= und.epsilon


def test_group_privacy_is_above_the_exact_gaussian_group() -> None:
    """m steps of a sensitivity-1 Gaussian are exactly a sensitivity-m Gaussian: linear group privacy is an
    upper bound of it, and not a loose one for small m."""
    sigma, m = 4.0, 3
    one = pld_lib.from_gaussian_mechanism(sigma, value_discretization_interval=1e-4)
    exact = pld_lib.from_gaussian_mechanism(sigma / m, value_discretization_interval=1e-4).get_epsilon_for_delta(DELTA)
    got = group_epsilon(lambda e: np.asarray(one.get_delta_for_epsilon(e)), m, delta=DELTA)
    assert exact <= got <= 2.0 * exact
    single = group_epsilon(lambda e: np.asarray(one.get_delta_for_epsilon(e)), 1, delta=DELTA)
    # the smallest point of a geometric grid (ratio (2e6)^(1/4000) = 1.0036) at or above the epsilon
    assert one.get_epsilon_for_delta(DELTA) <= single <= one.get_epsilon_for_delta(DELTA) * 1.004


def test_bad_k_and_a_noiseless_run() -> None:
    with pytest.raises(ConfigError, match="non-negative integer"):
        holders_epsilon([(USER_DP, ROUNDS)], -1, delta=DELTA)
    fedavg = acc.mechanism("noiseless", z=0.0, q_u=0.1, m_max=None)
    assert holders_epsilon([(fedavg, ROUNDS)], 2, delta=DELTA).epsilon == math.inf


def test_the_world_is_a_pair_of_distributions() -> None:
    pm, pw, qm, qw = holder_world(2, 0.5, 0.5)
    assert pw.sum() == pytest.approx(1.0, abs=1e-12) and qw.sum() == pytest.approx(1.0, abs=1e-12)  # sums of pmfs
    # D: 0, 1 or 2 drawn holders at -1 each
    assert list(pm) == [-2.0, -1.0, 0.0] and list(pw) == pytest.approx([0.25, 0.5, 0.25], abs=1e-12)
    # D' mean: holders +1 w.p. q_u q_sel, -1 w.p. q_u (1 - q_sel): mean 0 each; u' +1 w.p. 0.5
    assert float(np.dot(qm, qw)) == pytest.approx(0.5, abs=1e-12)


@pytest.mark.e2e  # ~15 s: Theorem 2's bounds at the main job's settings, twice
def test_a_holder_with_many_sentences_breaks_the_per_sentence_bound_and_not_the_shipped_one() -> None:
    """The adversarial read's counterexample (docs/proofs.md section 8): at the main job's settings a holder
    with the entity in 20 entity-free sentences (used with probability 1 - 0.8^20) leaks more than Theorem 2 at
    the run's q_s (eps_undetected, a per-sentence statement: the broken variant) claims, and less than the
    shipped bounds: `one_holder` (Theorem 2 at q_e = q_s = 1) and the smaller `group` over 3 user steps
    (Theorem 6)."""
    mech = acc.mechanism("uedp", z=0.8925, q_u=0.25, q_e=0.2, q_s=0.2, m_max=89, k_cap=1)
    runs, n = [(mech, 30)], 200
    per_sentence = acc.epsilon_and_bound(runs, "undetected", delta=DELTA, num_users=n)[0]
    shipped = holders_epsilon(runs, 1, delta=DELTA, num_users=n)
    # the world ignores truncation: it lower-bounds the epsilon at delta + delta_trunc
    world = world_epsilon(1, q_u=0.25, q_sel=1 - 0.8**20, sigma=mech.sigma, rounds=30,
                          delta=DELTA + acc.truncation_delta(runs, n))
    assert per_sentence + 0.5 < world < shipped.epsilon, (per_sentence, world, shipped)  # 6.56 < 7.40 < 9.66
    assert shipped.bound == "group" and shipped.epsilon < shipped.bounds["one_holder"]  # 9.66 < 11.7


def test_every_holder_drawn_each_round() -> None:
    """q_u = 1 (a full cohort, BBC News's UeDP setting): no tail to cut, the bound is finite."""
    assert tail_cut(3, 1.0, 30, 1e-7) == (3, 0.0)
    assert tail_cut(3, 0.0, 30, 1e-7) == (0, 0.0)
    full = acc.mechanism("user_dp", z=4.0, q_u=1.0, m_max=None)
    assert math.isfinite(holders_epsilon([(full, ROUNDS)], 2, delta=DELTA, num_users=N,
                                         value_discretization_interval=VDI).epsilon)


def _truncating(k: int) -> tuple[acc.Mechanism, int]:
    """UEDP's rates with the smallest m_max whose delta_trunc stays below DELTA / 2 (N = 400): then (2k + 1)
    delta_trunc > DELTA, so a bound charging delta_trunc at every step is infinite."""
    n = 400
    for m_max in range(60, 200):
        mech = acc.mechanism("uedp", z=1.5, q_u=0.2, q_e=0.3, q_s=0.5, m_max=m_max, k_cap=1)
        if acc.truncation_delta([(mech, ROUNDS)], n) < DELTA / 2:
            assert (2 * k + 1) * acc.truncation_delta([(mech, ROUNDS)], n) > DELTA
            return mech, n
    raise AssertionError("no m_max found")


def _user_profile_direct(mech: acc.Mechanism, vdi: float):
    """The composed user pair PS_{q_u}(s_u = 1) at the mechanism's sigma, from dp_accounting's constructor."""
    one = pld_lib.from_gaussian_mechanism(mech.sigma, sensitivity=1.0, sampling_prob=mech.q_u,
                                          value_discretization_interval=vdi)
    return one.self_compose(ROUNDS)


def test_user_steps_group_is_dp_accountings_with_truncation_charged_once() -> None:
    """Theorem 6: UeDP's undetected per-holder bound by group privacy over 2k + 1 user steps equals the
    linear group bound of dp_accounting's own PLD of the Poisson-subsampled Gaussian, read at delta -
    delta_trunc (charged ONCE: at every step it would exceed delta here)."""
    k = 2
    mech, n = _truncating(k)
    trunc = acc.truncation_delta([(mech, ROUNDS)], n)
    pld = _user_profile_direct(mech, VDI)
    grid = np.geomspace(1e-4, 200.0 / (2 * k + 1), 4001)
    ok = np.asarray(pld.get_delta_for_epsilon(grid)) * np.expm1((2 * k + 1) * grid) / np.expm1(grid) <= DELTA - trunc
    want = float((2 * k + 1) * grid[ok].min())
    got = holders_epsilon([(mech, ROUNDS)], k, delta=DELTA, num_users=n, value_discretization_interval=VDI)
    assert got.bounds["group"] == pytest.approx(want, rel=1e-9)
    assert got.bounds["group"] == user_group_epsilon([(mech, ROUNDS)], 2 * k + 1, delta=DELTA, num_users=n,
                                                     value_discretization_interval=VDI)
    assert got.bounds["undetected_group"] == math.inf  # Theorem 2's steps, delta_trunc at each: infinite
    assert got.epsilon <= got.bounds["group"] < math.inf
    with pytest.raises(ConfigError, match="user steps"):
        user_group_epsilon([(mech, ROUNDS)], 0, delta=DELTA, num_users=n)
    with pytest.raises(ConfigError, match="1/num_users"):
        user_group_epsilon([(mech, ROUNDS)], 3, delta=0.5, num_users=n)
    lower = world_epsilon(k, q_u=mech.q_u, q_sel=1.0, sigma=mech.sigma, rounds=ROUNDS, delta=DELTA + trunc)
    assert lower <= got.epsilon, (lower, got)


def test_the_world_certifies_one_step_per_holder_broken() -> None:
    """The crafted world of docs/proofs.md section 11 against Theorem 6 and a broken variant: changing a holder
    is TWO user steps (empty its place, refill it); counting it as one (k + 1 steps) claims less than the world
    provably leaks, at every k tested, while the sound 2k + 1 stays above it."""
    for k in (1, 2, 4):
        world = world_epsilon(k, q_u=UEDP.q_u, q_sel=1.0, sigma=UEDP.sigma, rounds=ROUNDS, delta=DELTA)
        sound = user_group_epsilon([(UEDP, ROUNDS)], 2 * k + 1, delta=DELTA, num_users=N,
                                   value_discretization_interval=VDI)
        broken = user_group_epsilon([(UEDP, ROUNDS)], k + 1, delta=DELTA, num_users=N,
                                    value_discretization_interval=VDI)
        assert broken < world <= sound, (k, broken, world, sound)


def test_the_mixed_case_by_hand_from_dp_accounting() -> None:
    """Theorem 7: the mixed bound is at most the weak-triangle chain built by hand from dp_accounting's own
    PLDs (eps_uedp's four-point mixture, and the missed holders' 2 k' user steps), at every split and order
    the code tries; at least eps_uedp; between the detected (k' = 0) and the undetected (k' = k) result; above
    the world of its k' missed holders."""
    k, missed = 3, 1
    runs = [(UEDP, ROUNDS)]
    left = DELTA - acc.truncation_delta(runs, N)
    sens = UEDP.sensitivities
    four = pld_lib.from_mixture_gaussian_mechanism(
        UEDP.sigma, [0.0, sens.s_u, sens.s_e, sens.s_u + sens.s_e],
        [(1 - UEDP.q_u) * (1 - UEDP.q_e), UEDP.q_u * (1 - UEDP.q_e), (1 - UEDP.q_u) * UEDP.q_e, UEDP.q_u * UEDP.q_e],
        value_discretization_interval=VDI).self_compose(ROUNDS)
    user = _user_profile_direct(UEDP, VDI)

    def detected_at(d: float) -> float:
        return float(four.get_epsilon_for_delta(d))

    def missed_at(d: float) -> float:  # the smaller of 2 k' user steps and the revealed count (by hand above)
        group = group_epsilon(lambda e: np.asarray(user.get_delta_for_epsilon(e)), 2 * missed, delta=d)
        j_max, charge = tail_cut(missed, UEDP.q_u, ROUNDS, TAIL_FRACTION * d)
        weights = binom.pmf(np.arange(j_max + 1), missed, UEDP.q_u)
        weights = weights / weights.sum()
        total, mass = None, 0.0
        for j, w in enumerate(weights):
            part = (pld_lib.from_gaussian_mechanism(UEDP.sigma, sampling_prob=UEDP.q_u,
                                                    value_discretization_interval=VDI)
                    if j == 0 else pld_lib.from_mixture_gaussian_mechanism(
                        UEDP.sigma, [2.0 * j, 2.0 * j + 1.0], [1 - UEDP.q_u, UEDP.q_u],
                        value_discretization_interval=VDI))
            total = part if total is None else total.compute_mixture(part, mass / (mass + w))
            mass += w
        return min(group, float(total.self_compose(ROUNDS).get_epsilon_for_delta(d - charge)))

    chains = []
    for first, second in ((detected_at, missed_at), (missed_at, detected_at)):
        for share in MIXED_SPLITS:
            e1 = first(share * left)
            chains.append(e1 + second((1 - share) * left * math.exp(-e1)))
    got = holders_epsilon(runs, k, delta=DELTA, num_users=N, missed=missed, value_discretization_interval=VDI)
    detected = holders_epsilon(runs, k, delta=DELTA, num_users=N, detected=True, value_discretization_interval=VDI)
    undetected = holders_epsilon(runs, k, delta=DELTA, num_users=N, value_discretization_interval=VDI)
    # dp_accounting's mixture PLDs and the accountant's closed forms and numerical parts discretize the same
    # pairs two ways: 1% either side (an undercharging chain would fall below)
    assert min(chains) * 0.99 <= got.bounds["mixed"] <= min(chains) * 1.01
    with pytest.raises(ValueError, match="mixed"):
        got.undetected()
    assert detected.epsilon <= got.epsilon <= undetected.epsilon
    assert holders_epsilon(runs, k, delta=DELTA, num_users=N, missed=0, value_discretization_interval=VDI) == detected
    assert holders_epsilon(runs, k, delta=DELTA, num_users=N, missed=k, value_discretization_interval=VDI) == undetected
    world = world_epsilon(missed, q_u=UEDP.q_u, q_sel=1.0, sigma=UEDP.sigma, rounds=ROUNDS, delta=DELTA)
    assert world <= got.epsilon
    with pytest.raises(ConfigError, match="missed mention"):
        holders_epsilon(runs, k, delta=DELTA, num_users=N, missed=k + 1)
    with pytest.raises(ConfigError, match="detected=True"):
        holders_epsilon(runs, k, delta=DELTA, num_users=N, missed=1, detected=True)
