"""Parsing `KEY=VALUE` command-line options into typed values (JSON where it parses, else a string).

The one KEY=VALUE parser of the project: `split_option` splits one item into raw strings, `parse_options`
splits many and decodes each value (`json_value` by default; `toml_value` for a Flower run config; `str` to
keep them raw; `float`...).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from uedp.errors import ConfigError


def split_option(item: str) -> tuple[str, str]:
    """`KEY=VALUE` -> (KEY, VALUE), split at the first "="; ConfigError if there is no "=" or no KEY."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"option {item!r} is not of the form KEY=VALUE")
    return key, raw


def json_value(raw: str) -> Any:
    """The JSON value `raw` stands for, or `raw` itself where it is not JSON (a bare string)."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def toml_value(raw: str) -> Any:
    """The TOML value `raw` stands for (strings quoted), or `raw` itself where it is not TOML."""
    import tomllib

    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def parse_options(items: Iterable[str] | None, *, value: Callable[[str], Any] = json_value) -> dict[str, Any]:
    """{KEY: value(VALUE)} for each `KEY=VALUE` item, in order (a repeated KEY: the last wins)."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, raw = split_option(item)
        out[key] = value(raw)
    return out
