"""RunConfig: flat (Flower) and nested (Hydra) forms, unknown keys, types, and pyproject's app config."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from uedp.config import NAMESPACE, RunConfig
from uedp.errors import ConfigError


def test_flat_round_trip():
    cfg = RunConfig.from_nested({"privacy": {"q_u": 0.2, "k_cap": 2}, "dataset": {"options": {"num_users": 9}}})
    assert RunConfig.from_flat(cfg.to_flat()) == cfg
    assert cfg.dataset.option_dict() == {"num_users": 9}


@pytest.mark.parametrize(
    "flat, message",
    [
        ({"privacy.q_x": 1.0}, "unknown config key privacy.q_x"),
        ({"privcy.q_u": 1.0}, "unknown config group 'privcy'"),
        ({"privacy.q_u": "high"}, "privacy.q_u must be of type float"),
        ({"privacy.q_u": 1.5}, r"privacy.q_u must lie in \[0, 1\]"),
        ({"privacy.m_max": True}, "privacy.m_max must be of type int"),
        ({"federation.resume": 1}, "federation.resume must be true or false"),
        ({"dataset.options": "[1, 2]"}, "dataset.options must be a JSON object"),
        ({"strategy.name": "dpsgd"}, "strategy.name"),
        ({"tokenizer.source": "users"}, "tokenizer.source must be public or private_split"),
    ],
)
def test_bad_values_name_the_key(flat, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_flat(flat)


def test_int_is_accepted_for_float():
    assert RunConfig.from_flat({"privacy.beta": 1}).privacy.beta == 1.0


def test_pyproject_app_config_lists_every_key():
    """`flwr run --run-config` can only override keys present in [tool.flwr.app.config]; the project's keys
    live under its namespace (`uedp.`), where an app's own keys would sit beside them."""
    data = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    app_cfg = data["tool"]["flwr"]["app"]["config"]
    assert set(app_cfg) == {NAMESPACE}
    flat = dict(_flat(app_cfg[NAMESPACE]))  # a nested block's keys too: uedp.model.lora.r
    # as a run config spells them: None and "auto" as their numbers (TOML has no null)
    defaults = {k.removeprefix(f"{NAMESPACE}."): v for k, v in RunConfig().to_run_config().items()}
    assert set(flat) - set(defaults) == set(), "keys RunConfig does not have"
    assert set(defaults) - set(flat) == set(), "RunConfig keys missing (flwr run --run-config could not set them)"
    # the same value and TOML type as RunConfig's default (8.0, not 8): RunConfig is the one source
    differ = {k: (flat[k], v) for k, v in defaults.items() if flat[k] != v or type(flat[k]) is not type(v)}
    assert differ == {}, f"pyproject value != RunConfig default: {differ}"
    assert RunConfig.from_flat(flat) == RunConfig()


def _flat(table: dict, prefix: str = ""):
    for key, value in table.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def test_nested_block_keys():
    """model.lora is a block of its own inside the model group: flat keys model.lora.r, a mapping in nested form,
    and its misspelt or mistyped options are refused naming the flat key."""
    cfg = RunConfig.from_flat({"model.lora.r": 8, "model.lora.target_modules": "c_attn"})
    assert cfg.model.lora.r == 8 and cfg.model.lora.modules() == ["c_attn"]
    assert cfg.to_flat()["model.lora.r"] == 8 and "model.lora" not in cfg.to_flat()
    assert RunConfig.from_nested({"model": {"lora": {"r": 8, "target_modules": "c_attn"}}}) == cfg
    assert RunConfig.from_flat(cfg.to_flat()) == cfg
    assert RunConfig.from_run_config(cfg.to_run_config()) == cfg
    for flat, message in (({"model.lora.rank": 8}, "unknown config key model.lora.rank; model.lora has: r,"),
                          ({"model.lora.r": "8"}, "config key model.lora.r must be of type int"),
                          ({"model.lora.r": -1}, "model.lora.r must be >= 0"),
                          ({"model.lora": 8}, "config key model.lora must be a mapping"),
                          ({"model.name.x": 1}, "unknown config key model.name.x"),
                          ({"model.lora.export_merged": True}, "needs model.lora.r > 0")):
        with pytest.raises(ConfigError, match=message):
            RunConfig.from_flat(flat)
    with pytest.raises(ConfigError, match=r"config key uedp\.model\.lora\.alpha must be of type float"):
        RunConfig.from_run_config({"uedp.model.lora.alpha": "big"})


def test_local_training_has_no_defaults_of_its_own():
    """The client's LocalTraining takes exactly the train.* fields, each from the round's instructions: no
    default of its own to drift from ClientTrainConfig's (its batch_size once said 32 against 16)."""
    import dataclasses

    from uedp.config import SCHEDULE_FIELDS, ClientTrainConfig
    from uedp.training import LocalTraining

    fields = dataclasses.fields(LocalTraining)
    assert [f.name for f in fields] == [f.name for f in dataclasses.fields(ClientTrainConfig)
                                        if f.name not in SCHEDULE_FIELDS]
    assert all(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING for f in fields)


def test_a_flower_run_config_passes_an_apps_own_keys_and_refuses_unknown_ones_of_ours():
    """RunConfig.from_run_config reads the `uedp.` keys of a Flower run config: the app's own keys (another
    prefix, or none) pass through; an unknown key or group inside the namespace is refused, naming it as the
    run config spells it."""
    run_config = {"num-server-rounds": 3, "myapp.lr": 0.1, "myapp.model": "gpt2", "uedp.privacy.q_u": 0.5,
                  "uedp.federation.rounds": 7}
    cfg = RunConfig.from_run_config(run_config)
    assert (cfg.privacy.q_u, cfg.federation.rounds) == (0.5, 7) and cfg.dataset == RunConfig().dataset
    assert RunConfig.from_run_config(cfg.to_run_config()) == cfg
    assert all(k.startswith("uedp.") for k in cfg.to_run_config())
    with pytest.raises(ConfigError, match=r"unknown config key uedp\.privacy\.qu;"):
        RunConfig.from_run_config({**run_config, "uedp.privacy.qu": 1.0})
    with pytest.raises(ConfigError, match=r"unknown config group 'uedp\.myapp'"):
        RunConfig.from_run_config({**run_config, "uedp.myapp.lr": 1.0})
    with pytest.raises(ConfigError, match=r"config key uedp\.privacy\.q_u must be of type float"):
        RunConfig.from_run_config({"uedp.privacy.q_u": "half"})
