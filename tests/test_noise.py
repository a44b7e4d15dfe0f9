"""The noise sources (uedp.privacy.noise): the secure source's distribution (std, tails, shape, independence)
by statistical tests with fixed tolerances, which source a run uses, and that the ledger records it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from uedp.config import RunConfig
from uedp.errors import ConfigError
from uedp.privacy.noise import FIXED_SEED_WARNING, GaussianNoise, SecureGaussianNoise, noise_source

N = 400_000


@pytest.fixture(scope="module", params=["keyed", "csprng"])
def draws(request) -> np.ndarray:
    """N draws of N(0, 3^2): from a fixed key (the same numbers on every run) and from a fresh CSPRNG key
    (tolerances below are at >= 5 standard errors, 5.7e-7 each two-sided, and the KS test at p 1e-7: summed over
    its 12 checks, a correct sampler fails about once in 100,000 runs)."""
    source = SecureGaussianNoise(key=bytes(range(32))) if request.param == "keyed" else SecureGaussianNoise()
    return source.normal((N // 2, 2), 3.0).ravel() / 3.0


def test_mean_and_standard_deviation(draws) -> None:
    assert abs(draws.mean()) < 5 / math.sqrt(N)
    assert abs(draws.std() - 1.0) < 5 / math.sqrt(2 * N)  # the std's standard error is 1/sqrt(2N)
    assert abs(stats.kurtosis(draws)) < 5 * math.sqrt(24 / N)  # Gaussian: excess kurtosis 0


def test_distribution_and_tails(draws) -> None:
    assert stats.kstest(draws, "norm").pvalue > 1e-7
    for k in (2.0, 3.0, 4.0):  # two-sided tail mass beyond k sigma, against a binomial tolerance
        p = 2 * stats.norm.sf(k)
        count = int(np.sum(np.abs(draws) > k))
        assert abs(count - N * p) < 5 * math.sqrt(N * p * (1 - p)) + 1, (k, count, N * p)
    assert np.abs(draws).max() < 7.0  # P(any |x| > 7 sigma) ~ 1e-6 for N draws


def test_draws_are_independent(draws) -> None:
    for lag in (1, 2, 4):  # neighbouring coordinates, and the Box-Muller partners' offsets
        assert abs(np.corrcoef(draws[:-lag], draws[lag:])[0, 1]) < 5 / math.sqrt(N)
    squares = draws**2  # dependence that a correlation misses (e.g. a shared Box-Muller radius)
    assert abs(np.corrcoef(squares[:-1], squares[1:])[0, 1]) < 5 / math.sqrt(N)


def test_keys_shapes_and_zero_std() -> None:
    a, b = SecureGaussianNoise(key=bytes(32)), SecureGaussianNoise(key=bytes(32))
    assert np.array_equal(a.normal((5, 3), 1.0), b.normal((5, 3), 1.0))  # a key is for tests: reproducible
    assert a.reproducible and a.warning == FIXED_SEED_WARNING
    fresh = SecureGaussianNoise()
    assert not fresh.reproducible and fresh.warning is None and fresh.mode == "secure"
    assert not np.array_equal(fresh.normal((8,), 1.0), SecureGaussianNoise().normal((8,), 1.0))
    assert fresh.normal((3, 0), 1.0).shape == (3, 0)
    assert np.array_equal(fresh.normal((4,), 0.0), np.zeros(4))
    big = fresh.normal((300_001,), 1.0)  # more than one chunk: every coordinate drawn, none left empty
    assert big.shape == (300_001,) and np.isfinite(big).all() and abs(big[-1000:].std() - 1) < 0.2
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="noise std"):
            fresh.normal((2,), bad)
    with pytest.raises(ValueError, match="32 bytes"):
        SecureGaussianNoise(key=b"short")


def test_which_source_a_run_uses() -> None:
    assert noise_source(seed=None).mode == "secure"  # the default of private runs
    assert noise_source(seed=None, choice="philox").mode == "philox"
    fixed = noise_source(seed=3, choice="secure")  # a fixed seed is reproduction: Philox, said loudly
    assert isinstance(fixed, GaussianNoise) and fixed.mode == "philox_fixed_seed"
    assert fixed.warning == FIXED_SEED_WARNING
    with pytest.raises(ValueError, match="privacy.noise"):
        noise_source(seed=None, choice="laplace")
    assert RunConfig().privacy.noise == "secure"
    with pytest.raises(ConfigError, match="privacy.noise must be one of secure, philox"):
        RunConfig.from_flat({"privacy.noise": "fast"})
