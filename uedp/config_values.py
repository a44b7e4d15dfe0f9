"""How a run configuration's values are read: each option checked against its type (uedp.config's dataclass
defaults), JSON object options, nested blocks, and the options whose value may be "not set" or "choose for me".

Sentinels. In Python (RunConfig, Hydra's YAML) an option that may be left unset takes None, and one the run may
choose takes "auto" (`AUTO`): `privacy.m_max = "auto"` (the smallest cohort cap whose truncation charge is at most
1% of delta: uedp.privacy.accounting.safe_m_max), `privacy.gamma = "auto"` (max(k_cap, 1) * beta / m_max),
`privacy.k_cap = None` (no entity cap), `privacy.target_holders = None` (no holders target), `privacy.seed = None`
(cryptographically seeded noise), `privacy.target_epsilon = None` (no target: privacy.noise_multiplier as given, no
budget stop), `federation.client_gpus = "auto"` (a Ray simulation's GPU share per client sized by the model's
memory), `federation.num_nodes = None` (one node per corpus user), `federation.eval_sentences = None` (central
evaluation on the whole test split), `federation.poll_interval = None` (Flower's own 3-s wait for replies),
`federation.round_period = None` (no schedule: rounds back to back), `train.local_steps = None` (train.local_epochs
epochs), `rewrite.label_epsilon = None` (labels in the clear), `rewrite.max_documents = None` (every document of
each user; the per-user epsilon then depends on the data). A Flower run config (pyproject's
`[tool.flwr.app.config]`, `flwr run --run-config`: TOML, which has no null) and a Flower record (a ConfigRecord
refuses None) spell them as numbers, the `SENTINELS` wire values: m_max 0, gamma 0.0, k_cap 0, target_holders -1,
seed -1, target_epsilon 0.0, client_gpus 0.0, num_nodes 0, eval_sentences 0, poll_interval 0.0, round_period 0.0,
local_steps 0, label_epsilon 0.0, max_documents 0. RunConfig.to_run_config writes those (`to_wire`; `from_wire`
reads one back), and every reader (from_run_config, from_flat, from_nested, so config files and Hydra overrides
too) accepts the wire value with the same meaning and holds it as None or "auto".
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

from uedp.errors import ConfigError

AUTO = "auto"  # an option the run chooses (SENTINELS)
INT_RANGE = (-(2**63), 2**63 - 1)  # an integer option fits a signed 64-bit integer (TOML's, NumPy's, torch's)


@dataclass(frozen=True)
class Sentinel:
    """An option's "not set" (None) or "choose for me" (AUTO) value, and its spelling in a Flower run config."""

    value: str | None  # None or AUTO
    wire: int | float  # the run config's number for it (TOML has no null); also its type: int or float
    meaning: str

    def spelling(self) -> str:
        return "None (null)" if self.value is None else repr(self.value)


SENTINELS = {
    "privacy.m_max": Sentinel(AUTO, 0, "the smallest cap whose truncation charge is at most 1% of delta"),
    "privacy.gamma": Sentinel(AUTO, 0.0, "max(k_cap, 1) * beta / m_max"),
    "privacy.k_cap": Sentinel(None, 0, "no entity cap"),
    "privacy.target_holders": Sentinel(None, -1, "no holders target"),
    "privacy.seed": Sentinel(None, -1, "cryptographically seeded noise"),
    "privacy.target_epsilon": Sentinel(None, 0.0, "no target: privacy.noise_multiplier as given, no budget stop"),
    "federation.client_gpus": Sentinel(AUTO, 0.0, "a GPU share sized by the model's estimated memory"),
    "federation.num_nodes": Sentinel(None, 0, "one node per corpus user"),
    "federation.eval_sentences": Sentinel(None, 0, "the whole test split"),
    "federation.poll_interval": Sentinel(None, 0.0, "Flower's own 3-s wait"),
    "train.local_steps": Sentinel(None, 0, "train.local_epochs epochs"),
    "federation.round_period": Sentinel(None, 0.0, "no schedule: rounds run back to back"),
    "rewrite.label_epsilon": Sentinel(None, 0.0, "labels in the clear: not private"),
    "rewrite.max_documents": Sentinel(None, 0, "every document of each user: the per-user epsilon then depends on "
                                               "the data"),
}


def to_wire(key: str, value: Any) -> Any:
    """`value` of flat key `key` as a Flower run config holds it: a sentinel's number for None or "auto"."""
    sentinel = SENTINELS.get(key)
    if sentinel is not None and (value is None or isinstance(value, str)) and value == sentinel.value:
        return sentinel.wire
    return value


def from_wire(key: str, value: Any) -> Any:
    """`value` of flat key `key` read from a Flower record or run config: a sentinel's number as its None or
    "auto" (`to_wire` undone)."""
    sentinel = SENTINELS.get(key)
    if sentinel is not None and not isinstance(value, (str, bool)) and value == sentinel.wire:
        return sentinel.value
    return value


def label_list(labels: str) -> list[str] | None:
    """A comma-separated public label set (task.labels) as its names, None where it names none."""
    return [x.strip() for x in labels.split(",") if x.strip()] or None


def show(value: Any, *, quote: bool = True, limit: int = 80) -> str:
    """`repr(value)` (or `str` when not `quote`), cut to `limit` characters: an error message names a huge
    value without repeating it."""
    text = repr(value) if quote else str(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def leaves(block: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """(flat key, value) of every option of `block`, a nested block's under its own name."""
    for f in fields(block):
        value = getattr(block, f.name)
        if dataclasses.is_dataclass(value):
            yield from leaves(value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", value


def assign(target: Any, prefix: str, name: Any, value: Any) -> None:
    """Set option `name` of config block `target` (whose flat prefix is `prefix`: "privacy", "model.lora") to
    `value`, checked against the default's type. A nested block (model.lora) takes a dotted name ("lora.r") or
    a mapping of its options; `options` takes a JSON object string or a mapping."""
    known = [f.name for f in fields(target)]  # in declaration order, as error messages list them
    head, _, rest = name.partition(".") if isinstance(name, str) else (name, "", "")
    if head not in known:
        raise ConfigError(f"unknown config key {prefix}.{show(name, quote=False)}; {prefix} has: {', '.join(known)}")
    key, current = f"{prefix}.{head}", getattr(target, head)
    if dataclasses.is_dataclass(current):
        if rest:
            assign(current, key, rest, value)
            return
        if not isinstance(value, Mapping):
            raise ConfigError(f"config key {key} must be a mapping of its options "
                              f"({', '.join(f.name for f in fields(current))}), got {show(value)}")
        for sub, v in value.items():
            assign(current, key, sub, v)
        return
    if rest:
        raise ConfigError(f"unknown config key {prefix}.{show(name, quote=False)}; {prefix} has: {', '.join(known)}")
    if isinstance(value, Mapping) and head == "options":
        try:
            value = json.dumps(value, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ConfigError(f"config key {key} must be a JSON object ({exc}), got {show(value)}") from None
    setattr(target, head, coerce(key, value, current))


def json_object(key: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{key} must be a JSON object, got {show(text)}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{key} must be a JSON object, got {show(text)}: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise ConfigError(f"{key} must be a JSON object, got {show(text)}: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{key} must be a JSON object, got {show(text)}")
    return value


def coerce(key: str, value: Any, default: Any) -> Any:
    """Check `value` against the default's type (int -> float is allowed; bool is never a number). A sentinel
    option (SENTINELS) also takes its None or "auto", and reads its wire number as that."""
    sentinel = SENTINELS.get(key)
    if sentinel is None:
        return _typed(key, value, default)
    if value is None or (isinstance(value, str) and value == AUTO):
        if value != sentinel.value:
            raise ConfigError(f"config key {key} must be of type {type(sentinel.wire).__name__} or "
                              f"{sentinel.spelling()} ({sentinel.meaning}), got {show(value)}")
        return value
    if isinstance(value, str):
        raise ConfigError(f"config key {key} must be of type {type(sentinel.wire).__name__} or "
                          f"{sentinel.spelling()} ({sentinel.meaning}), got {show(value)}")
    return from_wire(key, _typed(key, value, sentinel.wire))


def _typed(key: str, value: Any, default: Any) -> Any:
    kind = type(default)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        try:
            value = float(value)
        except OverflowError:
            raise ConfigError(f"config key {key} must be a finite number, got {show(value)}") from None
    if kind is bool and not isinstance(value, bool):
        raise ConfigError(f"config key {key} must be true or false, got {show(value)}")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"config key {key} must be of type {kind.__name__}, got {show(value)}")
    if kind is float and not math.isfinite(value):
        raise ConfigError(f"config key {key} must be a finite number, got {value!r}")
    if kind is int and not INT_RANGE[0] <= value <= INT_RANGE[1]:
        raise ConfigError(f"config key {key} is out of range (a 64-bit integer), got {show(value)}")
    if kind is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(f"config key {key} holds a lone surrogate, which is not text: {show(value)}") from None
    return value
