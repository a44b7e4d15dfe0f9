"""The ADePT mechanism on our model (uedp.rewriting.mechanism.NormClipMechanism; docs/proofs.md section 10):
the norm clip's bound checked exactly (in rationals, not floats), the corrected sensitivity (2C, and the
pair that attains it), sigma against dp_accounting computed directly, and its validation."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from uedp.errors import ConfigError
from uedp.rewriting.mechanism import (
    MAX_NORM_COORDINATES,
    ClvMechanism,
    NormClipMechanism,
    analytic_gaussian_sigma,
    norm_clip,
    norm_sensitivities,
)


def exact_norm_squared(v: np.ndarray) -> Fraction:
    """||v||_2^2 of a float64 vector in exact rational arithmetic (every float is a rational)."""
    return sum((Fraction(float(x)) ** 2 for x in np.ravel(v)), Fraction(0))


def mechanism(**kw) -> NormClipMechanism:
    args = {"epsilon": 2.0, "delta": 1e-5, "dim": 8, "length": 3, "clip": 1.5}
    args.update(kw)
    return NormClipMechanism(**args)


def test_sensitivities_are_the_corrected_ones():
    # a product and a sqrt in float64, as in the closed form: a few ulps; approx's default rel 1e-6 is ample
    assert norm_sensitivities(20, 128, 4.0) == (pytest.approx(8.0), pytest.approx(8.0 * math.sqrt(2560)))
    m = mechanism()
    assert (m.l2_sensitivity, m.l1_sensitivity) == (pytest.approx(3.0), pytest.approx(3.0 * math.sqrt(24)))
    assert m.dim_released == 24 // 3 and m.kept is None


@pytest.mark.parametrize("scale", [1e-120, 1e-3, 1.0, 1.4999999999, 1.5, 1.5000000001, 7.0, 1e90, 1e250])
def test_every_clipped_output_has_exact_norm_below_the_bound(scale):
    """Random directions at many scales (tiny, at the bound to 1e-10, huge: squares overflow without the entry
    cap), checked exactly: the float rounding of the norm and of the product never lands above C."""
    rng = np.random.default_rng(int(-math.log10(scale) * 10) % 1000 if scale < 1 else int(scale) % 1000)
    for bound in (1.5, 1e-100, 3.7e5):
        unit = rng.standard_normal((40, 3, 8))
        unit /= np.linalg.norm(unit.reshape(40, -1), axis=1)[:, None, None]
        z = unit * scale
        out = norm_clip(z, bound)
        for doc in out:
            assert exact_norm_squared(doc) < Fraction(bound) ** 2
        below = np.full(40, scale < bound * (1 - 1e-9) * (1 - 1e-12))  # every row has norm `scale`
        assert np.array_equal(out[below], z[below])  # inside the ball: released unchanged


def test_norm_clip_keeps_the_direction_and_handles_infinite_and_zero_entries():
    z = np.zeros((2, 3, 8))
    z[0, 1, 2], z[0, 2, 5] = 3.0, 4.0  # norm 5
    out = norm_clip(z, 1.0)
    # scaled to C (1 - NORM_MARGIN = 1e-9): inside approx's default rel 1e-6
    assert out[0, 1, 2] == pytest.approx(0.6) and out[0, 2, 5] == pytest.approx(0.8)
    assert np.all(out[1] == 0.0)
    inf = np.zeros((3, 8))
    inf[0, 0], inf[1, 1] = np.inf, -np.inf
    got = norm_clip(inf, 2.0)
    assert np.isfinite(got).all() and exact_norm_squared(got) < 4
    assert got[0, 0] > 0 > got[1, 1]


def test_the_sensitivity_2c_is_attained():
    """Any z with ||z|| >= C against -z: the clipped outputs are 2C apart (to the margin), so C (ADePT's published
    sensitivity) is not a bound on the released vector's movement."""
    rng = np.random.default_rng(0)
    m = mechanism()
    z = rng.standard_normal((3, 8)) * 10
    gap = np.linalg.norm(m.clamp(z) - m.clamp(-z))
    # rel 1e-8 here and for L1 below: both sides are clipped to C (1 - NORM_MARGIN = 1e-9), plus float64 rounding
    assert gap == pytest.approx(2 * m.clip, rel=1e-8) and gap <= m.l2_sensitivity
    assert gap > 1.99 * m.clip  # the published C would be exceeded
    ones = np.full((3, 8), 5.0)  # all coordinates equal: the L1 bound 2C sqrt(n) is attained too
    assert np.abs(m.clamp(ones) - m.clamp(-ones)).sum() == pytest.approx(m.l1_sensitivity, rel=1e-8)


@pytest.mark.parametrize(("epsilon", "delta"), [(0.5, 1e-5), (1.0, 1e-5), (8.0, 1e-6), (1000.0, 1e-5)])
def test_gaussian_sigma_against_dp_accounting_directly(epsilon, delta):
    """dp_accounting's PLD of the Gaussian mechanism with noise multiplier sigma / (2C) reads back epsilon at delta
    (the analytic calibration is tight: within the PLD grid), and a user's n documents compose as dp_accounting's
    n-fold composition, computed here without our wrapper."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    m = mechanism(epsilon=epsilon, delta=delta)
    # same function, same inputs (the L2 sensitivity 2C is computed as 2.0 * clip there too): bit-identical
    assert m.sigma == pytest.approx(analytic_gaussian_sigma(epsilon, delta, 2 * m.clip), rel=1e-12)
    vdi = 1e-4 if epsilon < 100 else 1e-1
    pld = pld_lib.from_gaussian_mechanism(m.sigma / (2 * m.clip), value_discretization_interval=vdi)
    eps = pld.get_epsilon_for_delta(delta)
    assert epsilon * (1 - 1e-3) <= eps <= epsilon * (1 + 1e-3) + 2 * vdi
    if epsilon <= 8:
        n = 5
        direct = pld_lib.from_gaussian_mechanism(m.sigma / (2 * m.clip), value_discretization_interval=1e-3)
        direct = direct.self_compose(n).get_epsilon_for_delta(n * delta)
        ours = m.compose(n)
        # two pessimistic PLD grids (ours: auto, at most 3e-4 epsilon; direct: 1e-3): each of the n compositions
        # may round the loss up by one grid step, so they agree to n * 1e-3 in epsilon (measured: < 5e-5)
        assert ours.pld_epsilon == pytest.approx(direct, rel=0, abs=n * 1e-3)
        # n * delta, computed the same way there: bit-identical
        assert ours.epsilon <= n * epsilon and ours.delta == pytest.approx(n * delta)


def test_laplace_scale_against_dp_accounting_directly():
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    m = mechanism(noise="laplace", delta=0.0, epsilon=3.0)
    # the same float64 quotient, rounded up by laplace_scale by at most SENSITIVITY_SLACK = 2^-50 (~1e-15)
    assert m.sigma == pytest.approx(2 * m.clip * math.sqrt(24) / 3.0, rel=1e-12)
    pld = pld_lib.from_laplace_mechanism(m.sigma, sensitivity=m.l1_sensitivity, value_discretization_interval=1e-4)
    # a pure-epsilon mechanism: epsilon at any delta (dp_accounting's pessimistic grid leaves an infinite-loss
    # mass of ~1e-16 at the truncated tails, so delta 0 itself reads inf)
    assert pld.get_epsilon_for_delta(1e-9) == pytest.approx(3.0, abs=1e-3)  # 10 grid steps of 1e-4


def test_privatize_noises_every_coordinate_with_sigma():
    m = mechanism(epsilon=50.0)
    z = np.zeros((20000, 3, 8))
    out = m.privatize(z, np.random.default_rng(1))
    # 480,000 draws: the std's relative standard error is 1 / sqrt(2N) = 1e-3, so 2% is 20 standard errors
    assert np.std(out) == pytest.approx(m.sigma, rel=0.02)
    assert np.abs(out.mean()) < 0.02 * m.sigma


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"kept": np.array([0, 1])}, "kept must be None"),
    ({"clip": 1e-120}, "norm clip bound"),
    ({"clip": 0.0}, "clip"),
    ({"epsilon": -1.0}, "epsilon"),
    ({"noise": "laplace"}, "delta must be 0"),
])
def test_validation(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        mechanism(**kwargs).privatize(np.zeros((3, 8)), np.random.default_rng(0))


def test_too_many_coordinates_and_bad_shapes_are_refused():
    with pytest.raises(ConfigError, match="coordinates a document"):
        norm_clip(np.zeros((1, 2, MAX_NORM_COORDINATES // 2 + 1)), 1.0)
    with pytest.raises(ConfigError, match="shape"):
        mechanism().privatize(np.zeros((4, 8)), np.random.default_rng(0))


def test_not_equal_to_the_value_clip_mechanism_with_the_same_fields():
    clv = ClvMechanism(epsilon=2.0, delta=1e-5, dim=8, length=3, clip=1.5)
    assert mechanism() != clv and mechanism() == mechanism() and hash(mechanism()) == hash(mechanism())
    assert mechanism().sigma < clv.sigma  # 2C against 2C sqrt(l d)


@pytest.mark.parametrize(("epsilon", "delta"), [(1e-8, 1e-20), (1e-8, 1e-300), (1e-4, 1e-100), (1e-8, 1e-5),
                                                (1.0, 1e-5), (1000.0, 1e-5)])
def test_calibrated_sigma_meets_delta_in_exact_arithmetic(epsilon, delta):
    """Adversarial read of docs/proofs.md section 10: at tiny epsilon the float evaluation of the Balle-Wang
    condition cancels, and the float-bisected sigma gave an exact delta 1.0000116 x the target (1e-8, 1e-20) and
    1.0024 x (1e-8, 1e-300). The sigma is now verified in 60 digits; here it is rechecked in 100, for both clips
    at their exact sensitivities (2C; 2C sqrt(n), irrational, as an mpmath value)."""
    import mpmath

    for mech, exact_d in ((mechanism(epsilon=epsilon, delta=delta), None),
                          (ClvMechanism(epsilon=epsilon, delta=delta, dim=8, length=3, clip=0.7), 24)):
        with mpmath.workdps(100):
            c = mpmath.mpf(Fraction(mech.clip).numerator) / Fraction(mech.clip).denominator
            d = 2 * c if exact_d is None else 2 * c * mpmath.sqrt(exact_d)
            s, e = mpmath.mpf(mech.sigma), mpmath.mpf(epsilon)
            got = mpmath.ncdf(d / (2 * s) - e * s / d) - mpmath.exp(e) * mpmath.ncdf(-d / (2 * s) - e * s / d)
            assert got <= delta, (type(mech).__name__, float(got / delta))


def test_laplace_scale_is_rounded_up_against_the_exact_l1_sensitivity():
    """Adversarial read: b = fl(fl(2 C n) / epsilon) was an ulp below 2 C n / epsilon at C 0.7, epsilon 1.1, n 24,
    so the box corners realized a loss of epsilon (1 + 1.6e-16)."""
    clv = ClvMechanism(epsilon=1.1, delta=0.0, dim=8, length=3, clip=0.7, noise="laplace")
    assert Fraction(clv.sigma) * Fraction(1.1) >= 2 * Fraction(0.7) * 24
    gap = clv.clamp(np.full((3, 8), 1.0)) - clv.clamp(np.full((3, 8), -1.0))
    assert sum(Fraction(float(x)) for x in np.abs(gap).ravel()) / Fraction(clv.sigma) <= Fraction(1.1)
