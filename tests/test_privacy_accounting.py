"""PLD accounting of UeDP (docs/mechanism.md section 4): the reference comparison, orderings, composition (calibration:
tests/test_privacy_calibration.py)."""

from __future__ import annotations

import math

import dp_accounting
import pytest

from tests.helpers import eps_rdp_bound, eps_uedp, eps_undetected, eps_user
from uedp.errors import ConfigError
from uedp.privacy.accounting import Mechanism, epsilon_and_bound, epsilon_of, epsilons_of, mechanism
from uedp.privacy.composition import pairs_epsilon
from uedp.privacy.pairs import Mixture

DELTA = 1e-5
SETTINGS = [  # (z, q_u, q_e, q_s, m_max, k_cap, rounds)
    (2.0, 0.05, 0.5, 0.1, 100, None, 200),
    (1.0, 0.05, 0.1, 0.1, 100, 5, 100),
    (0.8, 0.3, 0.05, 0.5, 20, 2, 50),
    (5.0, 0.01, 0.05, 0.01, 50, None, 100),
    (3.0, 0.1, 0.9, 0.9, 10, 1, 30),
]
USER_SETTINGS = [  # eps_user in a meaningful range (0.1 to 20): noise multiplier sigma / s_u of 0.7 to 3
    (0.6, 0.05, 0.5, 0.1, 10, 1, 300),  # sigma / s_u = 0.6 * 5 / 3 = 1
    (1.0, 0.02, 0.3, 0.1, 2, None, 200),  # 1.0 * 6 / 2 = 3
    (0.3, 0.1, 0.5, 0.1, 10, 2, 50),  # 0.3 * 7 / 3 = 0.7
]


def mech(z, q_u, q_e, q_s, m_max, k_cap) -> Mechanism:
    return Mechanism(rule="uedp", z=z, q_u=q_u, q_e=q_e, q_s=q_s, m_max=m_max, k_cap=k_cap)


def reference_user_epsilon(q_u: float, noise_multiplier: float, rounds: int) -> float:
    """dp-accounting's own Poisson-subsampled Gaussian (PLDAccountant, ADD_OR_REMOVE_ONE, the same relation
    as the mixture PLD's ADD and REMOVE pair) on a fine grid (1e-4; ours is 3e-4 * epsilon)."""
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    event = dp_accounting.PoissonSampledDpEvent(q_u, dp_accounting.GaussianDpEvent(noise_multiplier))
    accountant.compose(event, rounds)
    return accountant.get_epsilon(DELTA)


@pytest.mark.parametrize("setting", USER_SETTINGS)
def test_eps_user_matches_dp_accounting(setting) -> None:
    """eps_user = mixture [0, s_u] w.p. [1-q_u, q_u] with noise std sigma = z (s_u + s_e), i.e. the
    Poisson-subsampled Gaussian with sampling rate q_u and noise multiplier sigma / s_u."""
    *params, rounds = setting
    m = mech(*params)
    ours = eps_user(m, rounds=rounds, delta=DELTA)
    ref = reference_user_epsilon(m.q_u, m.sigma / m.sensitivities.s_u, rounds)
    assert 0.1 < ref < 20.0
    # two pessimistic PLD grids (ours <= 3e-4 epsilon, the reference 1e-4): each ~1e-4 of epsilon over, rel 1e-3
    assert ours == pytest.approx(ref, rel=1e-3)


@pytest.mark.parametrize("sigma,s,q,rounds", [(8.4, 3.0, 0.1, 4), (2.0, 1.0, 0.05, 100), (1.0, 1.0, 1.0, 10)])
def test_two_point_mixture_fast_path_is_the_mixture(sigma, s, q, rounds) -> None:
    """{0: 1-q, s: q} is built with dp-accounting's subsampled-Gaussian closed form; it must equal the
    general mixture-of-Gaussians PLD on the same grid."""
    mixture = Mixture(sigma=sigma, sensitivities=(0.0, s), probs=(1 - q, q))
    fast = mixture.pld(1e-2).self_compose(rounds).get_epsilon_for_delta(DELTA)
    general = mixture.mixture_pld(1e-2).self_compose(rounds).get_epsilon_for_delta(DELTA)
    # the same losses on the same grid by two constructions (closed form, general mixture): only float64
    # rounding and the FFT compositions differ, measured 1.3e-11, so rel 1e-8
    assert fast == pytest.approx(general, rel=1e-8)


@pytest.mark.parametrize("setting", SETTINGS)
def test_orderings(setting) -> None:
    *params, rounds = setting
    m = mech(*params)
    e = epsilons_of([(m, rounds)], delta=DELTA, num_users=m.m_max)
    assert 0.0 < e.eps_user <= e.eps_uedp <= e.eps_rdp_bound
    assert e.eps_user <= e.eps_undetected * (1 + 1e-3)  # two PLDs on the auto grid (~1e-4 epsilon each)
    # below: the same functions on the same inputs: bit-identical
    assert e.eps_uedp == eps_uedp(m, rounds=rounds, delta=DELTA)
    assert e.eps_undetected == eps_undetected(m, rounds=rounds, delta=DELTA)
    assert e.eps_rdp_bound == eps_rdp_bound(m, rounds=rounds, delta=DELTA)


def test_degenerate_cases() -> None:
    m = mech(2.0, 0.05, 0.0, 0.0, 100, None)  # no entity ever sampled: the UeDP mixture is the user one
    # the same distribution through two mixtures, each on its own auto grid (~1e-4 of epsilon): rel 1e-3
    assert eps_uedp(m, rounds=100) == pytest.approx(eps_user(m, rounds=100), rel=1e-3)
    assert eps_uedp(mech(2.0, 0.0, 0.0, 0.0, 100, None), rounds=100) == 0.0
    noiseless = mechanism("noiseless", z=0.0, q_u=0.05, m_max=100)
    assert (noiseless.q_e, noiseless.q_s) == (1.0, 1.0)  # every sentence: the rates of uedp.privacy.mechanisms
    with pytest.raises(ConfigError, match="sampling_rates"):
        Mechanism(rule="noiseless", z=0.0, q_u=0.05, q_e=0.5, q_s=0.1, m_max=100)
    assert math.isinf(eps_uedp(noiseless, rounds=1)) and math.isinf(eps_user(noiseless, rounds=1))
    unbounded = mechanism("user_dp", z=1.0, q_u=0.05, m_max=None)  # no truncation: s_e is infinite
    assert math.isinf(eps_uedp(unbounded, rounds=10))
    assert 0.0 < eps_user(unbounded, rounds=10) < math.inf
    assert Mixture(sigma=1.0, sensitivities=(0.0, 1.0, 1.0), probs=(0.5, 0.25, 0.25)).probs == (0.5, 0.5)
    # user_dp under UeDP adjacency: every entity is used by up to m_max users, no privacy - and the
    # accountant says so on a coarse grid (beyond epsilon 1000) instead of taking minutes.
    assert eps_uedp(mechanism("user_dp", z=1.0, q_u=0.05, m_max=100), rounds=100) > 1e5


def test_user_dp_user_epsilon_is_dp_fedavg() -> None:
    """user_dp without truncation: sigma = z w_max beta, s_u = w_max beta: DP-FedAvg's epsilon."""
    m = mechanism("user_dp", z=1.1, q_u=0.02, m_max=None)
    ours = eps_user(m, rounds=300)
    # pessimistic grids 3e-4 epsilon (ours) and 1e-4 (the reference): rel 1e-3
    assert ours == pytest.approx(reference_user_epsilon(0.02, 1.1, 300), rel=1e-3)


def test_paper_setting_eps_about_40() -> None:
    """docs/mechanism.md section 6: q_e = 0.5, no cap, z = 2, q_u = 0.05, 500 rounds gives epsilon about 40.
    The value grows with m_max towards a limit (s_e dominates sigma): 38.2 at m_max=10, 40.5 at 100, 40.8 at 1000
    (with s_u = w_max beta, docs/proofs.md Theorem 1; 35.9, 40.3 and 40.8 with the first rule's 2 w_max beta)."""
    values = {
        m_max: eps_uedp(mech(2.0, 0.05, 0.5, 0.0, m_max, None), rounds=500) for m_max in (10, 100, 1000)
    }
    assert 35.0 < values[10] < values[100] < values[1000] < 42.0
    assert values[100] == pytest.approx(40.53, abs=0.005)  # quoted to 2 decimals: half a unit in the last place


def test_composition_of_distinct_rounds() -> None:
    a, b = mech(2.0, 0.05, 0.5, 0.1, 100, None), mech(3.0, 0.1, 0.2, 0.1, 100, 4)
    vdi = 2e-3

    def eps(groups) -> float:
        return epsilon_of(groups, "uedp", value_discretization_interval=vdi, num_users=100, delta=1e-5)

    grouped = eps([(a, 30), (b, 20)])
    # The same per-round PLDs on the same grid, composed in another grouping or order (and by hand below): only
    # the FFT convolutions' rounding differs (~1e-14 on delta each; measured 2e-11 in epsilon), so rel 1e-9.
    assert grouped == pytest.approx(eps([(a, 10), (a, 20), (b, 5), (b, 15)]), rel=1e-9)
    assert eps([(a, 30)]) < grouped < eps([(a, 30), (b, 40)])
    assert eps([(a, 30), (b, 0)]) == eps([(a, 30)])  # a group of 0 rounds is dropped: the same computation
    assert eps([(b, 20), (a, 30)]) == pytest.approx(grouped, rel=1e-9)  # order-free
    # Equals composing the per-round PLDs by hand.
    pld = a.mixture("uedp").pld(vdi).self_compose(30).compose(b.mixture("uedp").pld(vdi).self_compose(20))
    assert grouped == pytest.approx(pld.get_epsilon_for_delta(DELTA), rel=1e-9)
    # The default grid agrees with this one: both pessimistic, 2e-3 (~3e-4 epsilon) and the auto grid: rel 1e-3
    assert epsilon_of([(a, 30), (b, 20)], "uedp", num_users=100, delta=1e-5) == pytest.approx(grouped, rel=1e-3)


def test_beta_and_w_max_cancel() -> None:
    """sigma and every sensitivity scale with w_max * beta, so the mixture's epsilon does not change; the
    mechanism (what the accountant sees) does not even hold them."""
    from uedp.privacy.ledger import RoundRecord

    mixture = mech(1.5, 0.1, 0.3, 0.1, 20, None).mixture("uedp")
    values = []
    for c in (1.0, 0.003, 20.0):
        scaled = Mixture(sigma=mixture.sigma * c, sensitivities=tuple(s * c for s in mixture.sensitivities),
                         probs=mixture.probs)  # fmt: skip
        values.append(scaled.pld(1e-2).self_compose(5).get_epsilon_for_delta(DELTA))
    # scaled by c, the privacy losses move by a few ulps only (the same grid points): measured 2e-12, so rel 1e-9
    assert values[1] == pytest.approx(values[0], rel=1e-9) and values[2] == pytest.approx(values[0], rel=1e-9)
    records = [
        RoundRecord(round=1, rule="uedp", q_u=0.1, q_e=0.3, q_s=0.1, m_max=20, k_cap=None, beta=beta,
                    w_max=w_max, z=1.5, denominator=2.0)
        for beta, w_max in ((1.0, 1.0), (0.01, 0.3))
    ]  # fmt: skip
    assert records[0].mechanism == records[1].mechanism
    assert records[1].sigma == pytest.approx(1.5 * (1 + 40) * 0.01 * 0.3)  # a product: a few ulps, default rel


def test_validation() -> None:
    m = mech(2.0, 0.05, 0.5, 0.1, 100, None)
    with pytest.raises(ConfigError, match="delta"):
        epsilon_of([(m, 10)], "uedp", delta=1e-2, num_users=100)
    for bad in (0.0, 1.0, -1e-5, float("nan")):
        with pytest.raises(ConfigError, match="delta"):
            epsilon_of([(m, 10)], "uedp", delta=bad, num_users=None)
    with pytest.raises(ConfigError, match="q_e"):
        mech(2.0, 0.05, 1.5, 0.1, 100, None)
    with pytest.raises(ConfigError, match="noise multiplier"):
        mech(0.0, 0.05, 0.5, 0.1, 100, None)
    with pytest.raises(ConfigError, match=r"user_dp rounds are accounted with \(q_e, q_s\) = \(1.0, 1.0\)"):
        Mechanism(rule="user_dp", z=1.0, q_u=0.05, q_e=0.5, q_s=1.0, m_max=100)
    with pytest.raises(ConfigError, match=r"uedp_naive rounds are accounted with \(q_e, q_s\) = \(0.5, 0.0\)"):
        Mechanism(rule="uedp_naive", z=1.0, q_u=0.05, q_e=0.5, q_s=0.1, m_max=100)
    with pytest.raises(ConfigError, match="m_max"):
        mech(2.0, 0.05, 0.5, 0.1, None, None)


def test_one_accountant_call_at_500_rounds() -> None:
    """A long run in one call (its timing is measured by studies/benchmark.py, not asserted here)."""
    m = mech(1.7, 0.05, 0.3, 0.1, 200, None)
    assert 0.0 < eps_user(m, rounds=500) <= eps_uedp(m, rounds=500) < math.inf


def test_pairs_epsilon_is_the_ledgers_epsilon_for_a_ledgers_mixture():
    """pairs_epsilon of a mechanism's mixture (the audit's accountant for mixtures that are not a ledger's) is
    the same computation as epsilon_of on the mechanism whose mixture it is."""

    m = mechanism("uedp", z=1.0, q_u=0.25, q_e=0.2, q_s=0.2, m_max=80, k_cap=1)
    # the same computation (the same PLD code, pairs and grid; FFT compositions at most regrouped): rel 1e-9
    for adjacency in ("uedp", "user"):
        assert pairs_epsilon([(m.mixture(adjacency), 30)], delta=1e-5) == pytest.approx(
            epsilon_of([(m, 30)], adjacency, delta=1e-5, num_users=80), rel=1e-9)
    value, bound = epsilon_and_bound([(m, 30)], "undetected", delta=1e-5, num_users=80)
    assert pairs_epsilon([(m.undetected(bound), 30)], delta=1e-5) == pytest.approx(value, rel=1e-9)
    assert pairs_epsilon([(m.mixture("uedp"), 0)], delta=1e-5) == 0.0  # no round: nothing composed
    with pytest.raises(ConfigError, match="delta"):
        pairs_epsilon([(m.mixture("uedp"), 3)], delta=1.5)
