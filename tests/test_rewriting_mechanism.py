"""The DP-BART-CLV mechanism (uedp.rewriting.mechanism, docs/dp-bart-system.md): the analytic Gaussian sigma
against its defining inequality and two slow references, sensitivities, privatize (clamp, pruning, noise),
Laplace, and per-user composition."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from uedp.errors import ConfigError
from uedp.rewriting.mechanism import (
    ClvMechanism,
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    compose_documents,
    laplace_scale,
    sensitivities,
)

CASES = [(e, d) for e in (0.5, 1.0, 10.0, 250.0, 1000.0) for d in (1e-5, 1e-8)] + [(2000.0, 1e-5), (1.0, 0.1)]


def delta_reference_mp(epsilon: float, sigma: float, sensitivity: float) -> float:
    """The Balle-Wang delta, straight from the formula, in 60-digit arithmetic (no overflow at any epsilon)."""
    with mpmath.workdps(60):
        e, s, d = mpmath.mpf(epsilon), mpmath.mpf(sigma), mpmath.mpf(sensitivity)
        return float(mpmath.ncdf(d / (2 * s) - e * s / d) - mpmath.exp(e) * mpmath.ncdf(-d / (2 * s) - e * s / d))


def sigma_reference_float(epsilon: float, delta: float, sensitivity: float) -> float:
    """The analytic sigma from the plain float formula (valid only while exp(epsilon) does not overflow)."""

    def excess(s: float) -> float:
        d = sensitivity
        return norm.cdf(d / (2 * s) - epsilon * s / d) - math.exp(epsilon) * norm.cdf(-d / (2 * s) - epsilon * s / d)

    return brentq(lambda s: excess(s) - delta, 1e-3 * sensitivity, 1e3 * sensitivity, xtol=1e-15, rtol=1e-14)


@pytest.mark.parametrize(("epsilon", "delta"), CASES)
def test_analytic_sigma_is_the_smallest_satisfying_sigma(epsilon, delta):
    for sensitivity in (1.0, 17.5):
        sigma = analytic_gaussian_sigma(epsilon, delta, sensitivity)
        assert analytic_gaussian_delta(epsilon, sigma, sensitivity) <= delta
        assert analytic_gaussian_delta(epsilon, sigma * (1 - 1e-6), sensitivity) > delta
        # the same verdicts from the slow high-precision reference
        assert delta_reference_mp(epsilon, sigma, sensitivity) <= delta * (1 + 1e-9)
        assert delta_reference_mp(epsilon, sigma * (1 - 1e-6), sensitivity) > delta


@pytest.mark.parametrize(("epsilon", "delta"), CASES)
def test_log_space_delta_matches_high_precision_reference(epsilon, delta):
    sigma = analytic_gaussian_sigma(epsilon, delta, 1.0)
    # float64 log-space evaluation against 60-digit mpmath: float64 special functions, ~1e-13 (measured 6e-13)
    for s in (sigma * 0.7, sigma, sigma * 1.3):
        assert analytic_gaussian_delta(epsilon, s, 1.0) == pytest.approx(delta_reference_mp(epsilon, s, 1.0), rel=1e-8)


@pytest.mark.parametrize(("epsilon", "delta"), [(0.5, 1e-5), (1.0, 1e-5), (1.0, 1e-3), (5.0, 1e-6)])
def test_analytic_sigma_matches_plain_float_reference(epsilon, delta):
    # two root finders (bisection to SIGMA_RTOL 1e-12; brentq to 1e-14 on the plain formula, whose cancellation
    # costs ~1e-11 of delta): measured 4e-13 apart, so rel 1e-9
    assert analytic_gaussian_sigma(epsilon, delta, 2.0) == pytest.approx(
        sigma_reference_float(epsilon, delta, 2.0), rel=1e-9
    )


def test_known_value_balle_wang():
    # epsilon 1, delta 1e-5, sensitivity 1: 3.7306 (analytic) against 4.8448 (classic); printed to 5 decimals,
    # so half a unit in the last place
    assert analytic_gaussian_sigma(1.0, 1e-5, 1.0) == pytest.approx(3.73063, abs=5e-6)
    assert classic_gaussian_sigma(1.0, 1e-5, 1.0) == pytest.approx(4.84481, abs=5e-6)


def test_classic_formula_under_noises_about_2_8x_at_epsilon_250():
    # Measured 2.7835: the published DP-BART scripts' classic sigma at epsilon 250 is far too small.
    ratio = analytic_gaussian_sigma(250.0, 1e-5, 1.0) / classic_gaussian_sigma(250.0, 1e-5, 1.0)
    assert ratio == pytest.approx(2.78, abs=0.005)  # 2.78 to 2 decimals: half a unit in the last place
    # and the classic sigma really is not (250, 1e-5)-DP
    assert analytic_gaussian_delta(250.0, classic_gaussian_sigma(250.0, 1e-5, 1.0), 1.0) > 1e-2


def test_sigma_scales_with_sensitivity_and_decreases_with_epsilon():
    base = analytic_gaussian_sigma(3.0, 1e-5, 1.0)
    # two bisections, each to SIGMA_RTOL 1e-12 and then raised by steps of 1e-12: rel 1e-10
    assert analytic_gaussian_sigma(3.0, 1e-5, 4.0) == pytest.approx(4.0 * base, rel=1e-10)
    sigmas = [analytic_gaussian_sigma(e, 1e-5, 1.0) for e in (0.5, 1, 10, 250, 1000, 2000)]
    assert all(a > b for a, b in zip(sigmas, sigmas[1:]))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"epsilon": 0.0, "delta": 1e-5, "sensitivity": 1.0}, "epsilon"),
        ({"epsilon": -1.0, "delta": 1e-5, "sensitivity": 1.0}, "epsilon"),
        ({"epsilon": math.inf, "delta": 1e-5, "sensitivity": 1.0}, "epsilon"),
        ({"epsilon": 1.0, "delta": 0.0, "sensitivity": 1.0}, "delta"),
        ({"epsilon": 1.0, "delta": 1.0, "sensitivity": 1.0}, "delta"),
        ({"epsilon": 1.0, "delta": 1e-5, "sensitivity": 0.0}, "sensitivity"),
        ({"epsilon": 1.0, "delta": 1e-5, "sensitivity": math.nan}, "sensitivity"),
    ],
)
def test_sigma_input_validation(kwargs, name):
    with pytest.raises(ConfigError, match=name):
        analytic_gaussian_sigma(**kwargs)
    with pytest.raises(ConfigError, match=name):
        classic_gaussian_sigma(**kwargs)


def test_sensitivities():
    l2, l1 = sensitivities(20, 384, 0.1)
    # a few float64 products and a sqrt (laplace_scale raised by at most 2^-50): a few ulps, so rel 1e-12
    assert l2 == pytest.approx(0.2 * math.sqrt(7680), rel=1e-12)
    assert l1 == pytest.approx(0.2 * 7680, rel=1e-12)
    assert sensitivities(20, 768, 0.1)[0] == pytest.approx(math.sqrt(2) * l2, rel=1e-12)
    assert laplace_scale(2.0, l1) == pytest.approx(768.0, rel=1e-12)
    for bad in ({"length": 0}, {"dim_released": 3.0}, {"clip": -0.1}, {"length": True}):
        args = {"length": 20, "dim_released": 384, "clip": 0.1, **bad}
        with pytest.raises(ConfigError, match=next(iter(bad))):
            sensitivities(**args)


KEPT = np.array([0, 3, 4, 9, 15])


def mechanism(**kw) -> ClvMechanism:
    args = {"epsilon": 10.0, "delta": 1e-5, "dim": 16, "length": 4, "clip": 0.1, "kept": KEPT, **kw}
    return ClvMechanism(**args)


def test_mechanism_properties():
    m = mechanism()
    assert m.dim_released == 5
    # a few float64 ops: rel 1e-12; sigma: the same function on the same inputs, bit-identical
    assert m.l2_sensitivity == pytest.approx(0.2 * math.sqrt(20), rel=1e-12)
    assert m.sigma == analytic_gaussian_sigma(10.0, 1e-5, m.l2_sensitivity)
    full = mechanism(kept=None)
    assert full.dim_released == 16
    # pruning: noise / sqrt(d/d'); two bisections to 1e-12 relative each, so rel 1e-9
    assert full.sigma == pytest.approx(m.sigma * math.sqrt(16 / 5), rel=1e-9)
    assert mechanism(kept=[15, 0, 9, 3, 4]) == m  # order does not matter; equality and hash use kept
    assert hash(mechanism(kept=[15, 0, 9, 3, 4])) == hash(m)
    assert mechanism(kept=[0, 3]) != m
    assert not m.kept.flags.writeable


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.5}, "delta"),
        ({"noise": "laplace"}, "delta"),  # laplace with delta 1e-5
        ({"noise": "uniform"}, "noise"),
        ({"dim": 0}, "dim"),
        ({"length": 2.5}, "length"),
        ({"clip": 0.0}, "clip"),
        ({"kept": [0, 16]}, "kept"),
        ({"kept": [-1, 2]}, "kept"),
        ({"kept": [1, 1]}, "kept"),
        ({"kept": []}, "kept"),
        ({"kept": [0.0, 1.0]}, "kept"),
    ],
)
def test_mechanism_validation(kwargs, name):
    with pytest.raises(ConfigError, match=name):
        mechanism(**kwargs)


def test_clamp_and_pruning_are_exact():
    m = mechanism()
    z = np.random.default_rng(0).normal(0.0, 1.0, size=(3, 4, 16))
    clamped = m.clamp(z)
    pruned = np.setdiff1d(np.arange(16), KEPT)
    assert np.all(clamped[..., pruned] == 0.0)
    np.testing.assert_array_equal(clamped[..., KEPT], np.clip(z[..., KEPT], -0.1, 0.1))
    out = m.privatize(z, np.random.default_rng(1))
    assert out.dtype == np.float64 and out.shape == z.shape
    assert np.all(out[..., pruned] == 0.0)
    assert np.all(out[..., KEPT] != clamped[..., KEPT])  # noise on every released coordinate
    # the noise added is exactly the noise drawn: one array of shape (..., d'), standard normal times sigma
    drawn = np.random.default_rng(1).standard_normal((3, 4, 5)) * m.sigma
    # (c + d) - c differs from d by at most an ulp of c + d (below 4 here: <= 8.9e-16)
    np.testing.assert_allclose(out[..., KEPT] - clamped[..., KEPT], drawn, rtol=0, atol=1e-15)
    # z itself is untouched
    assert np.abs(z).max() > 0.1


def test_privatize_without_pruning_and_single_document():
    m = mechanism(kept=None, epsilon=1e4)  # huge epsilon: output stays within a few sigma of the clamp
    z = np.linspace(-1, 1, 64).reshape(4, 16)
    out = m.privatize(z, np.random.default_rng(2))
    assert out.shape == (4, 16)
    assert m.sigma < 0.02  # 0.0117: far below the clip, so the clamp shows through the noise
    assert np.all(np.abs(out - np.clip(z, -0.1, 0.1)) < 8 * m.sigma)
    assert np.abs(out).max() < 0.1 + 8 * m.sigma  # inputs up to 1, clamped to 0.1 before the noise


@pytest.mark.parametrize("shape", [(4,), (4, 15), (5, 16), (2, 3, 4, 16), (2, 16, 4)])
def test_privatize_shape_errors_name_the_expected_shape(shape):
    with pytest.raises(ConfigError, match=r"\(4, 16\) or \(batch, 4, 16\)"):
        mechanism().privatize(np.zeros(shape), np.random.default_rng(0))


def test_privatize_rejects_nan_and_non_generators():
    z = np.zeros((4, 16))
    z[1, 3] = np.nan
    with pytest.raises(ConfigError, match="NaN"):
        mechanism().privatize(z, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="rng"):
        mechanism().privatize(np.zeros((4, 16)), np.random.RandomState(0))  # type: ignore[arg-type]


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_empirical_noise_spread_matches_sigma(noise):
    m = mechanism(noise=noise, delta=0.0 if noise == "laplace" else 1e-5, epsilon=50.0)
    z = np.zeros((4000, 4, 16))  # 80,000 noise draws on the released coordinates
    noise_draws = m.privatize(z, np.random.Generator(np.random.Philox(1234)))[..., KEPT].ravel()
    expected_std = m.sigma if noise == "gaussian" else math.sqrt(2.0) * m.sigma  # Laplace(b): std b sqrt(2)
    # 80,000 draws: the std's standard error is 0.25% (Gaussian), 0.4% (Laplace); 2% is 5 or more of them
    assert abs(noise_draws.mean()) < 0.02 * expected_std
    assert noise_draws.std() == pytest.approx(expected_std, rel=0.02)
    if noise == "laplace":
        assert np.abs(noise_draws).mean() == pytest.approx(m.sigma, rel=0.02)  # E|X| = b


def test_laplace_variant():
    m = mechanism(noise="laplace", delta=0.0, epsilon=2.0)
    # laplace_scale rounds l1 / epsilon up by at most 2^-50; products of small numbers: rel 1e-12
    assert m.sigma == pytest.approx(m.l1_sensitivity / 2.0, rel=1e-12)
    assert m.l1_sensitivity == pytest.approx(0.2 * 4 * 5, rel=1e-12)
    out = m.privatize(np.ones((4, 16)), np.random.default_rng(3))
    assert np.all(out[:, np.setdiff1d(np.arange(16), KEPT)] == 0.0)
    c = m.compose(7)
    assert (c.epsilon, c.delta, c.pld_epsilon) == (pytest.approx(14.0), 0.0, None)  # n * epsilon: a product


@pytest.mark.parametrize(("epsilon", "n"), [(1.0, 1), (1.0, 10), (4.0, 25), (250.0, 3)])
def test_pld_composition_between_single_and_basic(epsilon, n):
    m = mechanism(epsilon=epsilon)
    c = m.compose(n)
    # n * epsilon, n * delta as the code computes them: a product, default rel 1e-6 is ample
    assert (c.basic_epsilon, c.basic_delta) == (pytest.approx(n * epsilon), pytest.approx(n * 1e-5))
    assert c.pld_epsilon is not None
    assert c.epsilon <= c.basic_epsilon
    assert c.pld_epsilon >= epsilon * (1 - 1e-3)
    if n == 1:  # one Gaussian: the PLD reads back the analytic calibration (up to its grid)
        assert c.pld_epsilon == pytest.approx(epsilon, rel=1e-3)  # the grid is <= 3e-4 epsilon (pessimistic)
    else:
        assert c.pld_epsilon < c.basic_epsilon


def test_compose_documents_validation():
    with pytest.raises(ConfigError, match="n"):
        compose_documents(1.0, 1e-5, 0)
    with pytest.raises(ConfigError, match="delta"):
        compose_documents(1.0, 0.0, 3, noise_multiplier=1.0)
    with pytest.raises(ConfigError, match="n \\* delta"):
        compose_documents(1.0, 0.2, 5, noise_multiplier=1.0)
    assert compose_documents(1.0, 0.0, 3).epsilon == pytest.approx(3.0)  # n * epsilon: a product, exact here


def test_composition_with_negligible_noise_falls_back_to_basic():
    """A 'no-noise' reference (epsilon 1e9) must not build a PLD of billions of points (it ran out of memory)."""
    from uedp.rewriting.mechanism import ClvMechanism

    m = ClvMechanism(epsilon=1e9, delta=1e-5, dim=128, length=20)
    for n in (1, 4, 150):  # n = 1 and 4 got through the first guard and were killed out of memory
        c = m.compose(n)
        assert c.pld_epsilon is None and c.epsilon == n * 1e9


@pytest.mark.parametrize("noise_multiplier", [0.02, 0.3, 2.0])
def test_pld_size_estimate_bounds_the_real_grid(noise_multiplier):
    """The guard's estimate is an upper bound on the grid dp-accounting actually builds (one mechanism)."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    from uedp.rewriting.mechanism import pld_points

    vdi = 1e-2
    pld = pld_lib.from_gaussian_mechanism(noise_multiplier, value_discretization_interval=vdi)
    size = max(pld._pmf_add.size, pld._pmf_remove.size)  # noqa: SLF001
    assert size > 0
    assert size <= pld_points(1, noise_multiplier, vdi)
