"""Sentinel options: None where an option is not set, "auto" where the run chooses, in RunConfig and Hydra;
their numbers (TOML has no null) in a Flower run config, which every reader accepts with the same meaning."""

from __future__ import annotations

import dataclasses

import pytest

from uedp.config import AUTO, PrivacyConfig, RunConfig
from uedp.config_values import SENTINELS, to_wire
from uedp.errors import ConfigError
from uedp.privacy.mechanisms import get

# flat key: (the Python spelling, the run config's number for it)
SPELLINGS = {"privacy.m_max": (AUTO, 0), "privacy.gamma": (AUTO, 0.0), "privacy.k_cap": (None, 0),
             "privacy.target_holders": (None, -1), "privacy.seed": (None, -1)}


def test_the_sentinels_are_the_documented_ones():
    assert {k: (s.value, s.wire) for k, s in SENTINELS.items()} == SPELLINGS


def test_defaults_use_none_and_auto():
    p = PrivacyConfig()
    assert (p.m_max, p.gamma, p.target_holders, p.seed) == (AUTO, AUTO, None, None)


@pytest.mark.parametrize("key", sorted(SPELLINGS))
def test_the_old_number_is_read_as_the_new_spelling(key):
    new, old = SPELLINGS[key]
    assert RunConfig.from_flat({key: old}).to_flat()[key] == new
    assert RunConfig.from_flat({key: new}).to_flat()[key] == new
    group, name = key.split(".")
    assert getattr(RunConfig.from_nested({group: {name: old}}).privacy, name) == new
    assert RunConfig.from_run_config({f"uedp.{key}": old}).to_flat()[key] == new
    wire = RunConfig.from_flat({key: new}).to_run_config()[f"uedp.{key}"]
    assert wire == old and type(wire) is type(old)  # TOML has no null: the run config keeps the number
    assert to_wire(key, new) == old


def test_set_values_pass_unchanged():
    cfg = RunConfig.from_flat({"privacy.m_max": 40, "privacy.gamma": 0.05, "privacy.k_cap": 2,
                               "privacy.target_holders": 0, "privacy.seed": 0})
    p = cfg.privacy
    assert (p.m_max, p.gamma, p.k_cap, p.target_holders, p.seed) == (40, 0.05, 2, 0, 0)
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
