"""The one module that checks configuration and user values: one error type, every message names the field.

Every helper takes the field's name first, returns the value in its checked form (an int, a float, the
choice) and raises uedp.errors.ConfigError (a ValueError, so `except ValueError` still catches it) whose
message starts with that name and ends with the value refused:

    q_u = probability("privacy.q_u", q_u)                # a number in [0, 1]: "privacy.q_u must lie in [0, 1], got 1.5"
    beta = positive("beta", beta)                        # a finite number > 0
    sigma = non_negative("sigma", sigma)                 # a finite number >= 0
    lr = finite("lr", lr)                                # any finite number
    m_max = positive_int("m_max", m_max)                 # an integer >= 1
    every = non_negative_int("every", every)             # an integer >= 0
    slot = integer("slot", slot, minimum=0, maximum=7)   # an integer in [0, 7]
    noise = one_of("noise", noise, NOISE_MODES)          # one of the choices

Integers are Python or NumPy integers, never a bool (True is not 1 here) nor a float, even 2.0. Numbers are
anything float() takes except text; NaN is refused everywhere, infinities wherever a bound or finiteness is
asked. `note` adds a word after the requirement ("(0: all)"). Checks of our own data structures (not user
input) stay where they are, as assertions or the error that fits them.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import TypeVar

from uedp.errors import ConfigError

T = TypeVar("T")


def _fail(name: str, requirement: str, value: object, note: str) -> ConfigError:
    return ConfigError(f"{name} must be {requirement}{' ' + note if note else ''}, got {value!r}")


def _number(name: str, value: object, requirement: str, note: str) -> float:
    if isinstance(value, str | bytes):
        raise _fail(name, requirement, value, note)
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise _fail(name, requirement, value, note) from None


def _integer(name: str, value: object, minimum: int | None, maximum: int | None, requirement: str,
             note: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
            or (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise _fail(name, requirement, value, note)
    return int(value)


def integer(name: str, value: object, *, minimum: int | None = None, maximum: int | None = None,
            note: str = "") -> int:
    """`value` as an int, if it is an integer (Python or NumPy, not a bool) within [minimum, maximum]."""
    if minimum is not None and maximum is not None:
        requirement = f"an integer in [{minimum}, {maximum}]"
    elif minimum is not None:
        requirement = f"an integer >= {minimum}"
    elif maximum is not None:
        requirement = f"an integer <= {maximum}"
    else:
        requirement = "an integer"
    return _integer(name, value, minimum, maximum, requirement, note)


def positive_int(name: str, value: object, *, note: str = "") -> int:
    """`value` as an int, if it is an integer >= 1 (Python or NumPy, not a bool); ConfigError otherwise."""
    return _integer(name, value, 1, None, "a positive integer", note)


def non_negative_int(name: str, value: object, *, note: str = "") -> int:
    """`value` as an int, if it is an integer >= 0 (Python or NumPy, not a bool); ConfigError otherwise."""
    return _integer(name, value, 0, None, "a non-negative integer", note)


def finite(name: str, value: object, *, note: str = "") -> float:
    """`value` as a float, if it is a finite number; ConfigError naming `name` otherwise."""
    v = _number(name, value, "a finite number", note)
    if not math.isfinite(v):
        raise _fail(name, "a finite number", value, note)
    return v


def positive(name: str, value: float, *, note: str = "") -> float:
    """`value` as a float, if it is a positive finite number; ConfigError naming `name` otherwise."""
    v = float(value)
    if not (v > 0.0 and math.isfinite(v)):
        raise _fail(name, "a positive finite number", value, note)
    return v


def non_negative(name: str, value: object, *, note: str = "") -> float:
    """`value` as a float, if it is a finite number >= 0; ConfigError naming `name` otherwise."""
    v = _number(name, value, "a finite number >= 0", note)
    if not (v >= 0.0 and math.isfinite(v)):
        raise _fail(name, "a finite number >= 0", value, note)
    return v


def probability(name: str, value: object, *, note: str = "") -> float:
    """`value` as a float, if it is a number in [0, 1] (NaN refused); ConfigError naming `name` otherwise."""
    v = _number(name, value, "a number in [0, 1]", note)
    if not 0.0 <= v <= 1.0:
        raise ConfigError(f"{name} must lie in [0, 1]{' ' + note if note else ''}, got {value!r}")
    return v


def one_of(name: str, value: T, choices: Iterable[T], *, note: str = "") -> T:
    """`value` itself, if it is one of `choices`; ConfigError naming `name` and listing them otherwise."""
    options = list(choices)
    if value not in options:
        raise _fail(name, f"one of {', '.join(str(c) for c in options)}", value, note)
    return value
