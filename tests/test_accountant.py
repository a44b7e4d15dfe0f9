"""UeDP's accountant (uedp.privacy.accountant): its ledger is its state, its epsilons are the ledger's, one per
claim, under Flower's method names; `uedp epsilon` charges its rounds to it; a user-level round's epsilon is
dp-accounting's, computed directly."""

from __future__ import annotations

import dataclasses
import math

import dp_accounting
import pytest
from flwr.supercore.privacy_accounting import PrivacySpent

from uedp import cli
from uedp.config import PrivacyConfig
from uedp.errors import ConfigError
from uedp.privacy.accountant import ClaimedPrivacySpent, UeDPAccountant
from uedp.privacy.accounting import epsilons_of, mechanism
from uedp.privacy.ledger import RoundRecord

PRIVACY = PrivacyConfig(q_u=0.25, q_e=0.2, q_s=0.2, m_max=0, k_cap=1, beta=0.5, target_epsilon=3.0, delta=1e-4)


def _record(acc: UeDPAccountant, rnd: int) -> RoundRecord:
    p = acc.privacy
    q_e, q_s = acc.spec.rates(p)
    return RoundRecord(round=rnd, rule=acc.spec.rule, q_u=p.q_u, q_e=q_e, q_s=q_s, m_max=acc.spec.m_max(p),
                       k_cap=acc.spec.k_cap(p), beta=p.beta, w_max=p.w_max, z=acc.noise_multiplier,
                       denominator=p.q_u * acc.num_users, gamma=acc.spec.gamma(p))


def test_the_accountants_epsilons_are_its_ledgers_one_per_claim():
    acc = UeDPAccountant("uedp", PRIVACY, num_users=40, rounds=5, noise_multiplier=1.2)
    assert acc.claims == ("uedp", "undetected") and acc.max_epsilon == 3.0 and acc.num_releases == 0
    assert acc.get_epsilon() == 0.0 and acc.epsilons() == {}
    for rnd in (1, 2, 3):
        acc.compose(_record(acc, rnd))
    direct = epsilons_of([(_record(acc, 1).mechanism, 3)], delta=1e-4, num_users=40)
    everything = acc.epsilons()
    assert everything["eps_uedp"] == direct.eps_uedp and everything["eps_undetected"] == direct.eps_undetected
    spent = acc.get_privacy_spent()
    assert isinstance(spent, PrivacySpent) and isinstance(spent, ClaimedPrivacySpent)
    assert spent.claims == {"eps_uedp": direct.eps_uedp, "eps_undetected": direct.eps_undetected}
    assert spent.epsilon == max(spent.claims.values()) == acc.get_epsilon() and spent.num_releases == 3
    with pytest.raises(ConfigError, match="cannot follow round 3"):  # a round is never charged twice
        acc.compose(_record(acc, 3))
    with pytest.raises(ConfigError, match="z = 2.0"):
        acc.compose(dataclasses.replace(_record(acc, 4), z=2.0))


def test_would_exceed_is_the_budget_check_of_the_next_round():
    acc = UeDPAccountant("uedp", PRIVACY, num_users=40, rounds=50, noise_multiplier=2.0)
    rnd = 1
    while not acc.would_exceed(_record(acc, rnd)):
        acc.compose(_record(acc, rnd))
        rnd += 1
    assert rnd > 1 and acc.get_epsilon() <= 3.0
    check = acc.check(_record(acc, rnd))
    assert check is not None and not check.allowed and max(check.epsilons_after.values()) > 3.0
    assert not acc.would_exceed(_record(acc, rnd), max_epsilon=1e6)


def test_its_state_is_the_ledger_and_a_foreign_ledger_is_refused():
    acc = UeDPAccountant("user_dp", PRIVACY, num_users=40, rounds=5, noise_multiplier=1.0)
    for rnd in (1, 2):
        acc.compose(_record(acc, rnd))
    state = acc.state_dict()
    assert state["format"] == "uedp-ledger" and [r["round"] for r in state["rounds"]] == [1, 2]
    again = UeDPAccountant("user_dp", PRIVACY, num_users=40, rounds=5, noise_multiplier=1.0)
    again.load_state_dict(state)
    assert again.epsilons() == acc.epsilons() and again.head == acc.head
    with pytest.raises(ConfigError, match="num_users=40"):
        UeDPAccountant("user_dp", PRIVACY, num_users=41, rounds=5, noise_multiplier=1.0).load_state_dict(state)
    with pytest.raises(ConfigError, match="records 'user_dp' rounds"):
        UeDPAccountant("uedp", PRIVACY, num_users=40, rounds=5, noise_multiplier=1.0).load_state_dict(state)
    copy = acc.ledger  # a copy: charging it does not charge the accountant
    copy.append(dataclasses.replace(copy.records[-1], round=3))
    assert acc.num_releases == 2


def test_a_user_level_round_is_dp_accountings_poisson_gaussian():
    """user_dp: T rounds of the Poisson-subsampled Gaussian (noise multiplier z, rate q_u), composed by
    dp-accounting's own PLD accountant, and the accountant's eps_user: the same number (its grid is finer)."""
    z, q, rounds, delta = 1.1, 0.25, 20, 1e-5
    acc = UeDPAccountant("user_dp", dataclasses.replace(PRIVACY, q_u=q, delta=delta), num_users=40, rounds=rounds,
                         noise_multiplier=z)
    for rnd in range(1, rounds + 1):
        acc.compose(_record(acc, rnd))
    theirs = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    theirs.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), rounds)
    assert acc.get_epsilon() == pytest.approx(theirs.get_epsilon(delta), rel=2e-3)


def test_noiseless_and_local_mechanisms():
    acc = UeDPAccountant("fedavg", PRIVACY, num_users=4, rounds=2, noise_multiplier=0.0)
    assert acc.claims == () and acc.max_epsilon is None and math.isinf(acc.get_epsilon())
    with pytest.raises(ConfigError, match="no rounds"):
        UeDPAccountant("dp_bart", PRIVACY, num_users=4, rounds=2, noise_multiplier=1.0)
    with pytest.raises(ConfigError, match="noise_multiplier must be > 0"):
        UeDPAccountant("uedp", PRIVACY, num_users=4, rounds=2, noise_multiplier=0.0)


def test_uedp_epsilon_charges_its_rounds_to_the_accountant(monkeypatch, capsys):
    composed = []
    real = UeDPAccountant.compose
    monkeypatch.setattr(UeDPAccountant, "compose", lambda self, r: composed.append(r.round) or real(self, r))
    assert cli.main(["epsilon", "--q-u", "0.25", "--q-e", "0.2", "--q-s", "0.2", "--noise-multiplier", "1.0",
                     "--k-cap", "1", "--rounds", "7", "--num-users", "200", "--json"]) == 0
    assert composed == list(range(1, 8))
    import json

    out = json.loads(capsys.readouterr().out)
    mech = mechanism("uedp", z=1.0, q_u=0.25, q_e=0.2, q_s=0.2, m_max=out["m_max"], k_cap=1)
    direct = epsilons_of([(mech, 7)], num_users=200, delta=1e-5)
    assert out["eps_uedp"] == direct.eps_uedp and out["eps_undetected"] == direct.eps_undetected
