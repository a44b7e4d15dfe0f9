"""Parsing `KEY=VALUE` command-line options into typed values (JSON where it parses, else a string)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from uedp.errors import ConfigError


def parse_options(items: Sequence[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"option {item!r} is not of the form KEY=VALUE")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out
