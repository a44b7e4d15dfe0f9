"""Hydra's view of RunConfig: the config nodes `python -m experiments.run` composes, derived from the
RunConfig dataclasses (uedp/config.py), the one place where defaults live.

`register()` puts into Hydra's ConfigStore
- `run_config` (a root config): RunConfig's defaults for the blocks that are not config groups
  (entities, tokenizer, train, server), and a defaults list choosing, per group, the option holding
  RunConfig's defaults (`default_choices()`);
- for each group, that option: dataset/synthetic, task/next_word, model/lstm (named after the component
  RunConfig chooses), privacy/default and federation/default;
- one strategy option per mechanism spec of uedp.privacy.mechanisms (its name and aliases: strategy=uedp,
  uedp_naive, user_dp, fedavg or noiseless, deid, deid_dp), so a new mechanism needs no file here.
conf/config.yaml composes `run_config` and adds only what the entry point itself sets (runner,
replicate, federation.out_dir, Hydra's settings); conf/<group>/*.yaml hold only presets that differ
from RunConfig's defaults.

The nodes are plain mappings, not typed structured configs: Hydra's struct mode refuses a misspelt key
when it composes, and RunConfig.from_nested checks types and values per job (one bad value in a sweep
fails that job, with its error.json, not the sweep). `dataset.options` and `model.options`, JSON object
strings in RunConfig, are nested mappings here (`dataset.options.num_users=50`). A group option replaces
the whole group node, so a preset never inherits the options of another loader or model.

More group options can be added from Python with `store_option(group, name, node)` before Hydra composes
(e.g. from `register()`). Do not also keep a file conf/GROUP/NAME.yaml of the same name: the file would win,
and Hydra would use the stored node as its schema (a deprecated behaviour it warns about).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from hydra.core.config_store import ConfigStore

from uedp.config import CLASSIFICATION_MODEL, RunConfig, StrategyConfig, json_object
from uedp.errors import ConfigError
from uedp.privacy import mechanisms

TASK_MODEL_CHOICE = "default_${task}"
ROOT_NODE = "run_config"  # listed first in conf/config.yaml's defaults list
DEFAULT_OPTION = "default"  # option name of a group whose options are not named by a field (privacy, federation)
_NAMED_GROUPS = ("dataset", "task", "model", "strategy")  # the default option is named after group.name
_UNNAMED_GROUPS = ("privacy", "federation")


def default_choices() -> dict[str, str]:
    """The option of each config group that the default composition chooses (it holds RunConfig's
    defaults): {"dataset": "synthetic", ..., "privacy": "default", "federation": "default"}."""
    defaults = RunConfig()
    return {**{g: getattr(defaults, g).name for g in _NAMED_GROUPS}, **dict.fromkeys(_UNNAMED_GROUPS, DEFAULT_OPTION)}


def group_node(group: str, values: Any) -> dict[str, Any]:
    """A RunConfig group (its dataclass, or a mapping of some of its fields) as a Hydra node: keys are
    checked against the group's fields, and `options` JSON object strings become mappings."""
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    if group not in fields:
        raise ConfigError(f"unknown config group {group!r}; known: {', '.join(fields)}")
    if dataclasses.is_dataclass(values) and not isinstance(values, type):
        values = dataclasses.asdict(values)
    if not isinstance(values, Mapping):
        raise ConfigError(f"config group {group!r} must be a mapping or its dataclass, got {values!r}")
    known = {f.name for f in dataclasses.fields(fields[group].default_factory())}  # type: ignore[misc]
    node: dict[str, Any] = {}
    for name, value in values.items():
        if name not in known:
            raise ConfigError(f"unknown config key {group}.{name}; {group} has: {', '.join(sorted(known))}")
        if name == "options" and isinstance(value, str):
            value = json_object(f"{group}.options", value)
        node[name] = value
    return node


def store_option(group: str, name: str, node: Any) -> None:
    """Register option `name` of config group `group` (`python -m experiments.run GROUP=NAME`), e.g.
    store_option("strategy", "uedp_naive", {"name": "uedp", "estimator": "f_E"}); `node` is a mapping
    of the group's fields or its dataclass (uedp.config), checked against RunConfig's fields."""
    ConfigStore.instance().store(group=group, name=name, node=group_node(group, node))


def run_config_node() -> dict[str, Any]:
    """The root node: the default choice of every group, then RunConfig's non-group blocks."""
    defaults = RunConfig()
    choices = default_choices()
    blocks = {f.name: group_node(f.name, getattr(defaults, f.name))
              for f in dataclasses.fields(RunConfig) if f.name not in choices}
    # The model's default depends on the task: `model: default_${task}` picks model/default_next_word (the
    # LSTM) or model/default_classification (uedp.config.CLASSIFICATION_MODEL); `model=NAME` still wins.
    choices["model"] = TASK_MODEL_CHOICE
    return {"defaults": [{g: option} for g, option in choices.items()] + ["_self_"], **blocks}


def register() -> None:
    """Store RunConfig's defaults in Hydra's ConfigStore (idempotent); call before Hydra composes."""
    defaults = RunConfig()
    ConfigStore.instance().store(name=ROOT_NODE, node=run_config_node())
    for group, option in default_choices().items():
        if group != "strategy":  # the strategy options come from the mechanism registry, below
            store_option(group, option, getattr(defaults, group))
    store_option("model", TASK_MODEL_CHOICE.replace("${task}", "next_word"), defaults.model)
    store_option("model", TASK_MODEL_CHOICE.replace("${task}", "classification"), CLASSIFICATION_MODEL)
    for spec in mechanisms.specs():
        node = StrategyConfig(name=spec.strategy, estimator=spec.estimator or defaults.strategy.estimator)
        for option in (spec.name, *spec.aliases):
            store_option("strategy", option, node)
