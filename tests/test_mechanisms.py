"""The mechanism spec registry: what the config selects, the one sampling-rate rule, and its readers."""

from __future__ import annotations

import pytest

from uedp.config import PrivacyConfig, RunConfig
from uedp.errors import ConfigError
from uedp.privacy import mechanisms
from uedp.privacy.accounting import Mechanism, mechanism
from uedp.privacy.mechanisms import MechanismSpec, sampling_rates, spec_for
from uedp.protocol import RoundInstructions


@pytest.mark.parametrize("strategy, estimator, name, rule, adjacency", [
    ("uedp", "f_E+", "uedp", "uedp", "uedp"),
    ("uedp", "f_E", "uedp_naive", "uedp_naive", "uedp"),
    ("user_dp", "f_E+", "user_dp", "user_dp", "user"),
    ("user_dp", "f_E", "user_dp", "user_dp", "user"),  # the estimator is a UeDP option only
    ("fedavg", "f_E+", "fedavg", "noiseless", None),
    ("deid", "f_E+", "deid", "noiseless", None),
    ("deid_dp", "f_E+", "deid_dp", "user_dp", "user"),
    ("deid_dp", "f_E", "deid_dp", "user_dp", "user"),
])
def test_the_config_selects_one_spec(strategy, estimator, name, rule, adjacency):
    spec = spec_for(strategy, estimator)
    assert (spec.name, spec.rule, spec.adjacency, spec.private) == (name, rule, adjacency, adjacency is not None)
    assert mechanisms.get(name) is spec


def test_unknown_names_are_refused_everywhere():
    with pytest.raises(ConfigError, match="strategy.name must be one of uedp, uedp_split, user_dp, fedavg, deid"):
        spec_for("dp_sgd", "f_E+")
    with pytest.raises(ConfigError, match="estimator"):
        spec_for("uedp", "f_X")
    with pytest.raises(ConfigError, match="strategy.name"):
        RunConfig.from_nested({"strategy": {"name": "udp"}})
    with pytest.raises(ConfigError, match="unknown mechanism"):
        RoundInstructions(round=1, mechanism="all", q_e=1, q_s=1, k_cap=0, m_max=1, slot=-1, beta=0.0, w_u=1,
                          private=False)


def test_the_sampling_rate_rule_is_shared_by_spec_and_accountant():
    privacy = PrivacyConfig(q_e=0.3, q_s=0.4, k_cap=2, m_max=50)
    expected = {"uedp": (0.3, 0.4), "uedp_naive": (0.3, 0.0), "uedp_split": (0.3, 0.4), "user_dp": (1.0, 1.0),
                "fedavg": (1.0, 1.0),
                "deid": (1.0, 1.0), "deid_dp": (1.0, 1.0), "dp_bart": (1.0, 1.0)}
    for spec in mechanisms.specs():
        rates = spec.rates(privacy)
        assert rates == expected[spec.name] == sampling_rates(spec.rule, q_e=0.3, q_s=0.4)
        z = 0.0 if spec.rule == "noiseless" else 1.0
        # the ledger's mechanism for the spec's round validates, and other rates are refused
        gamma = spec.gamma(privacy) / privacy.beta  # the split's entity clip in units of beta (0 otherwise)
        assert (gamma > 0) == spec.split
        m = Mechanism(rule=spec.rule, z=z, q_u=0.1, q_e=rates[0], q_s=rates[1], m_max=spec.m_max(privacy),
                      k_cap=spec.k_cap(privacy), gamma=gamma)
        assert mechanism(spec.rule, z=z, q_u=0.1, q_e=rates[0] if spec.keyed else None,
                         q_s=rates[1] if spec.keyed else None, m_max=m.m_max, k_cap=m.k_cap, gamma=gamma) == m
        if rates != (0.3, 0.4):
            with pytest.raises(ConfigError, match="sampling_rates"):
                Mechanism(rule=spec.rule, z=z, q_u=0.1, q_e=0.3, q_s=0.4, m_max=m.m_max, k_cap=m.k_cap)


def test_cap_and_truncation_follow_the_spec():
    privacy = PrivacyConfig(k_cap=2, m_max=50)
    assert (spec_for("uedp", "f_E+").k_cap(privacy), spec_for("uedp", "f_E+").m_max(privacy)) == (2, 50)
    assert spec_for("uedp", "f_E+").k_cap(PrivacyConfig(k_cap=0)) is None  # 0 = off
    assert (spec_for("user_dp", "f_E+").k_cap(privacy), spec_for("user_dp", "f_E+").m_max(privacy)) == (None, None)


def test_a_spec_must_be_consistent():
    base = dict(name="x", strategy="x", estimator=None, rule="uedp", adjacency="uedp", keyed=True,
                truncate=True, entity_cap=True)
    MechanismSpec(**base)
    for bad in ({"rule": "dp"}, {"adjacency": "entity"}, {"adjacency": None}, {"keyed": False},
                {"rule": "noiseless"}, {"estimator": "f_X"}):
        with pytest.raises(ValueError):
            MechanismSpec(**{**base, **bad})
    with pytest.raises(ValueError, match="twice"):
        mechanisms.register(MechanismSpec(**{**base, "name": "uedp"}))
