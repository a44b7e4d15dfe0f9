"""Checks of numeric options and parameters, raising ConfigError (a ValueError) that names the value.

    beta = positive("beta", beta)            # a float > 0 and finite
    m_max = positive_int("m_max", m_max)      # an int >= 1 (a bool is not one)
    every = non_negative_int("every", every)  # an int >= 0
"""

from __future__ import annotations

import math
import numbers

from uedp.errors import ConfigError


def positive(name: str, value: float) -> float:
    """`value` as a float, if it is a positive finite number; ConfigError naming `name` otherwise."""
    v = float(value)
    if not (v > 0.0 and math.isfinite(v)):
        raise ConfigError(f"{name} must be a positive finite number, got {value!r}")
    return v


def positive_int(name: str, value: object) -> int:
    """`value` as an int, if it is an integer >= 1 (Python or NumPy, not a bool); ConfigError otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def non_negative_int(name: str, value: object) -> int:
    """`value` as an int, if it is an integer >= 0 (Python or NumPy, not a bool); ConfigError otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
    return int(value)
