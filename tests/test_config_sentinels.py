"""Sentinel options: None where an option is not set, "auto" where the run chooses, in RunConfig and Hydra;
their numbers (TOML has no null) in a Flower run config, which every reader accepts with the same meaning."""

from __future__ import annotations

import dataclasses

import pytest
from flwr.serverapp.strategy import FedAvg

from uedp.config import AUTO, PrivacyConfig, RunConfig
from uedp.config_values import SENTINELS, to_wire
from uedp.errors import ConfigError
from uedp.flower import RunStore, UserEntityDP
from uedp.privacy import UeDPAccountant, run_noise_multiplier
from uedp.privacy.mechanisms import get

# flat key: (the Python spelling, the run config's number for it)
SPELLINGS = {"privacy.m_max": (AUTO, 0), "privacy.gamma": (AUTO, 0.0), "privacy.k_cap": (None, 0),
             "privacy.target_holders": (None, -1), "privacy.seed": (None, -1), "privacy.target_epsilon": (None, 0.0),
             "federation.client_gpus": (AUTO, 0.0), "federation.num_nodes": (None, 0),
             "federation.eval_sentences": (None, 0), "federation.poll_interval": (None, 0.0),
             "train.local_steps": (None, 0), "federation.round_period": (None, 0.0),
             "rewrite.label_epsilon": (None, 0.0), "rewrite.max_documents": (None, 0)}


def test_the_sentinels_are_the_documented_ones():
    assert {k: (s.value, s.wire) for k, s in SENTINELS.items()} == SPELLINGS


def test_defaults_use_none_and_auto():
    p = PrivacyConfig()
    assert (p.m_max, p.gamma, p.target_holders, p.seed) == (AUTO, AUTO, None, None)
    fed = RunConfig().federation
    assert (fed.client_gpus, fed.num_nodes, fed.eval_sentences, fed.round_period) == (AUTO, None, None, None)
    assert (fed.poll_interval, RunConfig().train.local_steps) == (0.1, None)


@pytest.mark.parametrize("key", sorted(SPELLINGS))
def test_the_old_number_is_read_as_the_new_spelling(key):
    new, old = SPELLINGS[key]
    assert RunConfig.from_flat({key: old}).to_flat()[key] == new
    assert RunConfig.from_flat({key: new}).to_flat()[key] == new
    group, name = key.split(".")
    assert getattr(getattr(RunConfig.from_nested({group: {name: old}}), group), name) == new
    built = RunConfig(**{group: dataclasses.replace(getattr(RunConfig(), group), **{name: old})})
    built.validate()  # a RunConfig built in Python with the old number
    assert getattr(getattr(built, group), name) == new
    assert RunConfig.from_run_config({f"uedp.{key}": old}).to_flat()[key] == new
    wire = RunConfig.from_flat({key: new}).to_run_config()[f"uedp.{key}"]
    assert wire == old and type(wire) is type(old)  # TOML has no null: the run config keeps the number
    assert to_wire(key, new) == old


def test_set_values_pass_unchanged():
    cfg = RunConfig.from_flat({"privacy.m_max": 40, "privacy.gamma": 0.05, "privacy.k_cap": 2,
                               "privacy.target_holders": 0, "privacy.seed": 0, "privacy.target_epsilon": 4})
    p = cfg.privacy
    assert (p.m_max, p.gamma, p.k_cap, p.target_holders, p.seed, p.target_epsilon) == (40, 0.05, 2, 0, 0, 4.0)
    assert RunConfig.from_run_config(cfg.to_run_config()) == cfg
    assert RunConfig.from_flat(cfg.to_flat()) == cfg


@pytest.mark.parametrize("flat, message", [
    ({"privacy.m_max": -1}, r'privacy.m_max must be >= 1, or "auto"'),
    ({"privacy.m_max": None}, r"privacy.m_max must be of type int or 'auto'"),
    ({"privacy.m_max": "big"}, r"privacy.m_max must be of type int or 'auto'"),
    ({"privacy.seed": "auto"}, r"privacy.seed must be of type int or None"),
    ({"privacy.seed": -2}, r"privacy.seed must be >= 0, or None"),
    ({"privacy.k_cap": -1}, r"privacy.k_cap must be >= 1, or None"),
    ({"privacy.target_holders": -3}, r"privacy.target_holders must be >= 0, or None"),
    ({"privacy.gamma": -0.1}, r'privacy.gamma must be > 0, or "auto"'),
    ({"privacy.gamma": None}, r"privacy.gamma must be of type float or 'auto'"),
    ({"privacy.target_epsilon": -1.0}, r"privacy.target_epsilon must be > 0, or None"),
    ({"privacy.target_epsilon": "auto"}, r"privacy.target_epsilon must be of type float or None"),
    ({"federation.client_gpus": -0.5}, r'federation.client_gpus must be "auto" \(sized by'),
    ({"federation.client_gpus": None}, r"federation.client_gpus must be of type float or 'auto'"),
    ({"federation.num_nodes": -1}, r"federation.num_nodes must be >= 1, or None"),
    ({"federation.num_nodes": "auto"}, r"federation.num_nodes must be of type int or None"),
    ({"federation.data": "owners", "federation.num_nodes": 0}, r"owners needs federation.num_nodes = N"),
    ({"federation.eval_sentences": -1}, r"federation.eval_sentences must be >= 1, or None \(the whole test split\)"),
    ({"federation.eval_sentences": "auto"}, r"federation.eval_sentences must be of type int or None"),
    ({"federation.poll_interval": -0.5}, r"federation.poll_interval must be > 0, or None \(Flower's 3 s\)"),
    ({"train.local_steps": -1}, r"train.local_steps must be >= 1, or None \(use train.local_epochs\)"),
    ({"train.local_steps": "auto"}, r"train.local_steps must be of type int or None"),
    ({"federation.round_period": 5.0}, r"federation.round_period must be None \(no schedule\) or above"),
    ({"federation.round_period": "auto"}, r"federation.round_period must be of type float or None"),
    ({"strategy.name": "dp_bart", "rewrite.label_epsilon": -1.0}, r"label_epsilon must be a finite number > 0, or"),
    ({"rewrite.label_epsilon": "auto"}, r"rewrite.label_epsilon must be of type float or None"),
    ({"strategy.name": "dp_bart", "rewrite.max_documents": -1}, r"max_documents must be an integer >= 1 \(or"),
    ({"rewrite.max_documents": "auto"}, r"rewrite.max_documents must be of type int or None"),
])
def test_bad_values_name_the_key_and_the_spelling(flat, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_flat(flat)


def test_the_mechanism_reads_the_sentinels():
    split, uedp = get("uedp_split"), get("uedp")
    p = PrivacyConfig(m_max=8, k_cap=2, beta=0.5)
    assert split.gamma(p) == 2 * 0.5 / 8
    assert split.gamma(dataclasses.replace(p, gamma=0.01)) == 0.01
    assert uedp.k_cap(dataclasses.replace(p, k_cap=None)) is None
    assert split.gamma(dataclasses.replace(p, k_cap=None)) == 0.5 / 8
    with pytest.raises(ConfigError, match='privacy.m_max = "auto"'):
        split.gamma(PrivacyConfig())


def test_no_target_is_none_and_a_python_config_takes_the_old_zero(tmp_path):
    for target in (None, 0, 0.0):  # 0: the run-config spelling, still accepted from Python
        privacy = PrivacyConfig(target_epsilon=target, noise_multiplier=1.3, m_max=0)
        accountant = UeDPAccountant("uedp", privacy, num_users=20, rounds=3, noise_multiplier=1.3)
        assert accountant.max_epsilon is None and accountant.privacy.target_epsilon is None
        assert run_noise_multiplier(get("uedp"), privacy, rounds=3, num_users=20) == 1.3
        wrapper = UserEntityDP.from_privacy(FedAvg(), places=20, num_rounds=3, privacy=privacy,
                                            store=RunStore(tmp_path))
        assert wrapper.accountant.noise_multiplier == 1.3 and wrapper.accountant.max_epsilon is None
        with pytest.raises(ConfigError, match="make_private_with_epsilon needs privacy.target_epsilon > 0"):
            UserEntityDP.make_private_with_epsilon(FedAvg(), places=20, num_rounds=3, privacy=privacy)
    assert UeDPAccountant("uedp", PrivacyConfig(target_epsilon=5), num_users=20, rounds=3,
                          noise_multiplier=1.0).max_epsilon == 5.0


def test_the_python_api_takes_none_for_the_options_off():
    """The functions behind the federation and training options take None where the option is not set; the
    training message's record (a Flower ConfigRecord, which refuses None) keeps local_steps' number."""
    from uedp.config import ClientTrainConfig
    from uedp.training import LocalTraining

    training = LocalTraining.from_config(ClientTrainConfig())
    assert training.local_steps is None and training.to_record()["local_steps"] == 0
    assert LocalTraining.from_record(training.to_record()) == training
    assert LocalTraining.from_config(ClientTrainConfig(local_steps=0)).local_steps is None  # the old number
    assert LocalTraining.from_config(ClientTrainConfig(local_steps=3)).to_record()["local_steps"] == 3
    with pytest.raises(ConfigError, match="round_period must be a number of seconds > 0, or None"):
        UserEntityDP(FedAvg(), places=4, accountant=UeDPAccountant("fedavg", PrivacyConfig(), num_users=4,
                                                                    rounds=1, noise_multiplier=0.0),
                     round_period=0.0)


def test_the_rewrite_settings_take_none_for_labels_in_the_clear():
    """RewriteSettings.label_epsilon None: labels in the clear; the old 0 reads as None, and the record sent to
    the owners and the rewrite cache key keep the number (0.0)."""
    from uedp.rewriting.rewrite import RewriteSettings

    assert RewriteSettings(epsilon=100.0).label_epsilon is None
    assert RewriteSettings(epsilon=100.0, label_epsilon=0.0) == RewriteSettings(epsilon=100.0)
    assert RewriteSettings(epsilon=100.0).wire()["label_epsilon"] == 0.0
    assert RewriteSettings(epsilon=100.0, label_epsilon=2.0).wire()["label_epsilon"] == 2.0
    with pytest.raises(ConfigError, match="label_epsilon must be a finite number > 0, or None"):
        RewriteSettings(epsilon=100.0, label_epsilon=-1.0)


def test_the_rewrite_settings_take_none_for_every_document():
    """RewriteSettings.max_documents None: every document of each user; the old 0 reads as None, the owners'
    record and the rewrite cache key keep the number (0), and a cap selects that many documents."""
    import numpy as np

    from uedp.rewriting.rewrite import RewriteSettings, select_documents

    assert RewriteSettings(epsilon=100.0).max_documents is None
    assert RewriteSettings(epsilon=100.0, max_documents=0) == RewriteSettings(epsilon=100.0)
    assert RewriteSettings(epsilon=100.0).wire()["max_documents"] == 0
    assert RewriteSettings(epsilon=100.0, max_documents=3).wire()["max_documents"] == 3
    rng = np.random.default_rng(0)
    assert select_documents(7, None, rng) == list(range(7))
    assert len(select_documents(7, 3, rng)) == 3 and select_documents(2, 3, rng) == [0, 1]
    with pytest.raises(ConfigError, match=r"max_documents must be an integer >= 1 \(or None: all\)"):
        RewriteSettings(epsilon=100.0, max_documents=-2)
