"""uedp.checks: each helper returns the checked value, refuses with ConfigError (a ValueError) naming the field."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uedp.checks import (
    finite,
    integer,
    non_negative,
    non_negative_int,
    one_of,
    positive,
    positive_int,
    probability,
)
from uedp.errors import ConfigError


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"^privacy\.q_u must lie in \[0, 1\], got 1\.5$"):
        probability("privacy.q_u", 1.5)


@pytest.mark.parametrize("helper", [integer, positive_int, non_negative_int])
@pytest.mark.parametrize("bad", [True, False, 1.0, 2.5, "3", None, float("nan")])
def test_integers_refuse_bools_floats_text(helper, bad) -> None:
    with pytest.raises(ConfigError, match=r"^train\.rounds must be .*integer.*, got "):
        helper("train.rounds", bad)


def test_integer_bounds_and_messages() -> None:
    assert integer("n", 5) == 5 and integer("n", -5) == -5
    assert integer("n", np.int64(3), minimum=0) == 3 and type(integer("n", np.int64(3))) is int
    assert integer("n", 0, minimum=0, maximum=0) == 0
    with pytest.raises(ConfigError, match=r"^n must be an integer >= 1, got 0$"):
        integer("n", 0, minimum=1)
    with pytest.raises(ConfigError, match=r"^n must be an integer <= 3, got 4$"):
        integer("n", 4, maximum=3)
    with pytest.raises(ConfigError, match=r"^slot must be an integer in \[0, 3\] \(k = 3\), got -1$"):
        integer("slot", -1, minimum=0, maximum=3, note="(k = 3)")
    with pytest.raises(ConfigError, match=r"^seed must be an integer, got True$"):
        integer("seed", True)


def test_positive_and_non_negative_int() -> None:
    assert positive_int("m_max", 1) == 1 and non_negative_int("every", 0) == 0
    with pytest.raises(ConfigError, match=r"^m_max must be a positive integer, got 0$"):
        positive_int("m_max", 0)
    with pytest.raises(ConfigError, match=r"^k_cap must be a positive integer or None, got -2$"):
        positive_int("k_cap", -2, note="or None")
    with pytest.raises(ConfigError, match=r"^every must be a non-negative integer, got -1$"):
        non_negative_int("every", -1)


def test_probability() -> None:
    assert probability("q", 0) == 0.0 and probability("q", 1) == 1.0 and probability("q", np.float32(0.5)) == 0.5
    for bad in (-1e-12, 1.0000001, math.nan, math.inf, -math.inf):
        with pytest.raises(ConfigError, match=r"^q_e must lie in \[0, 1\], got "):
            probability("q_e", bad)
    for bad in ("0.5", None, [0.5]):  # not numbers: refused, not converted
        with pytest.raises(ConfigError, match=r"^q_e must be a number in \[0, 1\], got "):
            probability("q_e", bad)


def test_real_number_helpers() -> None:
    assert positive("beta", 2) == 2.0 and non_negative("sigma", 0) == 0.0 and finite("lr", -3) == -3.0
    for helper, bad in ((positive, 0.0), (positive, -1.0), (positive, math.inf), (positive, math.nan),
                        (non_negative, -0.5), (non_negative, math.inf), (non_negative, math.nan),
                        (finite, math.inf), (finite, math.nan), (finite, "1"), (non_negative, None)):
        with pytest.raises(ConfigError, match=r"^field\.x must be a .*number.*, got "):
            helper("field.x", bad)


def test_one_of() -> None:
    assert one_of("noise", "gaussian", ("gaussian", "none")) == "gaussian"
    with pytest.raises(ConfigError, match=r"^noise must be one of gaussian, none, got 'laplace'$"):
        one_of("noise", "laplace", ("gaussian", "none"))
