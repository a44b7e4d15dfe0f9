"""Clipping, noise, server re-check and the aggregation core (docs/mechanism.md steps 6-8)."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch
from scipy.stats import chi2

from uedp.privacy.aggregation import aggregate, denominator, recheck, shapes_of
from uedp.privacy.clipping import clip_update, scale, update_norm
from uedp.privacy.noise import FIXED_SEED_WARNING, GaussianNoise
from uedp.privacy.sensitivity import Sensitivities, noise_std, sensitivities

SHAPES = [(7, 5), (5,), (3, 2, 2), ()]
# Sensitivities, sigmas and denominators below are products of a few decimals in float64 (a few ulps):
# pytest.approx's default rel 1e-6 is ample, and a wrong term is off by far more.


def np_update(rng: np.random.Generator, scale_: float, dtype=np.float32) -> list[np.ndarray]:
    return [np.asarray(rng.standard_normal(s) * scale_, dtype=dtype) for s in SHAPES]


def torch_update(rng: np.random.Generator, scale_: float, dtype=torch.float32) -> dict[str, torch.Tensor]:
    return {f"p{i}": torch.tensor(rng.standard_normal(s) * scale_, dtype=dtype) for i, s in enumerate(SHAPES)}


def norm64(update) -> float:
    arrays = update.values() if isinstance(update, dict) else update
    return math.sqrt(sum(float(np.sum(np.asarray(a, dtype=np.float64) ** 2)) for a in arrays))


# -- clipping --------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [np_update, torch_update])
def test_clipped_norm_never_exceeds_w_u_beta(make) -> None:
    rng = np.random.default_rng(0)
    for scale_ in (0.0, 1e-30, 1e-6, 0.3, 1.0, 17.0, 1e6, 1e30):
        for beta in (1e-3, 0.1, 1.0, 25.0):
            for w_u in (0.0, 0.37, 1.0):
                update = make(rng, scale_)
                before = {k: v.clone() for k, v in update.items()} if isinstance(update, dict) else [
                    a.copy() for a in update]  # fmt: skip
                clipped, norm = clip_update(update, beta)
                weighted, norm_w = clip_update(update, beta, w_u=w_u)
                # float64 sums of the same 53 exact squares (float32 squares fit a float64) in torch's or numpy's
                # order against ours: at most ~53 ulps apart, so rel 1e-12
                assert norm == norm_w == pytest.approx(norm64(update), rel=1e-12)
                assert norm64(clipped) <= beta and norm64(weighted) <= w_u * beta
                assert norm64(scale(clipped, w_u)) <= w_u * beta * (1 + 1e-6)  # the server's slack
                if isinstance(update, dict):  # no mutation, same container and dtypes
                    assert all(torch.equal(update[k], before[k]) for k in update)
                    assert list(clipped) == list(update) and clipped["p0"].dtype == torch.float32
                else:
                    assert all(np.array_equal(a, b) for a, b in zip(update, before))
                    assert all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in clipped)
                if norm <= beta:  # unchanged below the bound (zero stays zero): the factor 1.0, bit-identical
                    assert norm64(clipped) == norm64(update)
                else:  # clipped exactly to the bound, direction kept; a float32 clip may be nudged down by
                    # (1 - 1e-6) to stay below it (uedp.privacy.clipping), so rel 1e-5
                    assert norm64(clipped) == pytest.approx(beta, rel=1e-5)


def test_clip_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        clip_update([np.array([1.0, np.nan])], 1.0)
    with pytest.raises(ValueError, match="beta"):
        clip_update([np.ones(3)], 0.0)
    with pytest.raises(TypeError, match="dtype"):
        clip_update([np.ones(3, dtype=np.int64)], 1.0)
    with pytest.raises(ValueError, match="w_u"):
        scale([np.ones(3)], 1.5)
    assert update_norm({"a": torch.ones(4), "b": np.ones(5)}) == pytest.approx(3.0)


# -- sensitivities and noise -----------------------------------------------------------------------
def test_sensitivities_and_noise_std() -> None:
    # s_u = w_max beta whatever the truncation and the cap (docs/proofs.md Theorem 1; the first rule had 3 and 2)
    assert sensitivities(beta=2.0, w_max=0.5, m_max=10, k_cap=3) == Sensitivities(1.0, 6.0, 2.0, 1.0)
    assert sensitivities(beta=2.0, w_max=0.5, m_max=10, k_cap=None) == Sensitivities(1.0, 20.0, 2.0, 1.0)
    assert sensitivities(beta=1.0, w_max=1.0, m_max=10, k_cap=None, rule="user_dp").s_u == 1.0
    assert sensitivities(beta=1.0, w_max=1.0, m_max=None, k_cap=None, rule="user_dp").s_u == 1.0
    sens = sensitivities(beta=2.0, w_max=0.5, m_max=10, k_cap=3)
    assert noise_std("uedp", 1.5, sens) == pytest.approx(1.5 * 7.0)
    assert noise_std("user_dp", 1.5, sens) == pytest.approx(1.5)
    assert noise_std("noiseless", 1.5, sens) == 0.0
    with pytest.raises(ValueError, match="accounting rule"):
        noise_std("dp", 1.0, sens)


def test_noise_seeding(caplog: pytest.LogCaptureFixture) -> None:
    private = GaussianNoise()
    assert not private.reproducible and private.warning is None
    assert not np.array_equal(private.normal((8,), 1.0), GaussianNoise().normal((8,), 1.0))
    with caplog.at_level(logging.WARNING, logger="uedp.privacy.noise"):
        a, b = GaussianNoise(seed=3), GaussianNoise(seed=3)
    assert a.reproducible and a.warning == FIXED_SEED_WARNING
    assert any(FIXED_SEED_WARNING in r.getMessage() for r in caplog.records)
    np.testing.assert_array_equal(a.normal((5, 3), 2.0), b.normal((5, 3), 2.0))
    assert (GaussianNoise(seed=1).normal((4,), 0.0) == 0.0).all()


def test_released_noise_has_std_sigma_over_z_and_mean_zero() -> None:
    """500 aggregations of zero updates (2 x 300 coordinates each): 300k samples of N(0, (sigma/Z)^2).
    Variance: chi-square 99.9% interval; mean: |z-score| < 3.5."""
    sigma, Z, rounds = 3.0, 4.0, 500
    template = [torch.zeros(20, 15), torch.zeros(300)]
    noise = GaussianNoise(seed=12345)
    zeros = [[torch.zeros(20, 15), torch.zeros(300)] for _ in range(3)]
    samples = []
    for _ in range(rounds):
        mean, stats = aggregate(zeros, template=template, w_max=1.0, beta=1.0, sigma=sigma, denominator=Z, noise=noise)
        assert stats.ok == 3 and mean[0].dtype == torch.float32 and mean[0].shape == (20, 15)
        samples.append(torch.cat([m.flatten() for m in mean]).double().numpy())
    x = np.concatenate(samples)
    n, target = x.size, sigma / Z
    ss = float(np.sum(x**2))  # mean known to be 0 under H0
    lo, hi = chi2.ppf(5e-4, n) * target**2, chi2.ppf(1 - 5e-4, n) * target**2
    assert lo <= ss <= hi, (ss / n) ** 0.5
    assert abs(x.mean()) / (target / math.sqrt(n)) < 3.5


# -- re-check and aggregation ----------------------------------------------------------------------
def test_recheck_statuses() -> None:
    shapes = [(3,), (2, 2)]
    ok = [np.array([0.1, 0.2, 0.0]), np.zeros((2, 2))]
    assert recheck(ok, shapes, w_max=1.0, beta=1.0) == (ok, "ok")
    at_bound = [np.array([1.0 + 5e-7, 0.0, 0.0]), np.zeros((2, 2))]  # within the 1e-6 slack
    assert recheck(at_bound, shapes, w_max=1.0, beta=1.0)[1] == "ok"
    big = [np.array([30.0, 40.0, 0.0]), np.zeros((2, 2))]
    clipped, status = recheck(big, shapes, w_max=0.5, beta=2.0)
    assert status == "reclipped" and norm64(clipped) <= 1.0 and big[0][0] == 30.0
    np.testing.assert_allclose(clipped[0], [0.6, 0.8, 0.0])  # (30, 40) / 50 in float64: default rtol 1e-7
    bad_shape = [np.zeros(4), np.zeros((2, 2))]
    int_dtype = [np.zeros(3, dtype=np.int32), np.zeros((2, 2))]
    for update in (bad_shape, [np.zeros(3)], {"a": np.zeros(3)}, int_dtype, "junk", None, [np.zeros(3), "x"]):
        assert recheck(update, shapes, w_max=1.0, beta=1.0) == (None, "dropped_shape")
    for value in (np.nan, np.inf, -np.inf):
        bad = [np.array([0.1, value, 0.0]), np.zeros((2, 2))]
        assert recheck(bad, shapes, w_max=1.0, beta=1.0) == (None, "dropped_nonfinite")
    huge = [np.array([1e200, 1e200, 0.0]), np.zeros((2, 2))]  # finite, but its norm overflows
    assert recheck(huge, shapes, w_max=1.0, beta=1.0) == (None, "dropped_nonfinite")


def test_aggregate_counts_and_value_dict_torch() -> None:
    template = {"w": torch.zeros(2, 3, dtype=torch.float64), "b": torch.zeros(3, dtype=torch.float64)}
    good = {
        "w": torch.full((2, 3), 0.1, dtype=torch.float64),
        "b": torch.full((3,), 0.1, dtype=torch.float64),
    }
    big = {
        "b": torch.tensor([3.0, 4.0, 0.0], dtype=torch.float64),
        "w": torch.zeros(2, 3, dtype=torch.float64),
    }
    nan = {"w": torch.full((2, 3), float("nan")), "b": torch.zeros(3)}
    wrong = {"w": torch.zeros(3, 2), "b": torch.zeros(3)}
    updates = [good, big, nan, wrong, good]
    mean, stats = aggregate(updates, template=template, w_max=1.0, beta=1.0, sigma=0.0, denominator=2.0,
                            noise=GaussianNoise())  # fmt: skip
    assert stats.as_dict() == {"received": 5, "ok": 2, "reclipped": 1, "dropped_shape": 1,
                               "dropped_nonfinite": 1}  # fmt: skip
    assert set(mean) == {"w", "b"} and mean["w"].dtype == torch.float64
    # float64 sums of a few decimals over 2.0: a few ulps, inside assert_close's float64 defaults (rtol 1e-7)
    torch.testing.assert_close(mean["w"], torch.full((2, 3), 0.1, dtype=torch.float64))
    torch.testing.assert_close(mean["b"], torch.tensor([0.1 + 0.3, 0.1 + 0.4, 0.1], dtype=torch.float64))
    assert big["b"][0].item() == 3.0  # inputs are not mutated


def test_aggregate_list_numpy_and_empty_round() -> None:
    template = [np.zeros((4,), dtype=np.float32)]
    mean, stats = aggregate(
        [], template=template, w_max=1.0, beta=1.0, sigma=0.0, denominator=5.0, noise=GaussianNoise()
    )
    assert stats.received == 0 and mean[0].dtype == np.float32 and (mean[0] == 0).all()
    assert shapes_of(template) == [(4,)]
    with pytest.raises(ValueError, match="denominator"):
        aggregate([], template=template, w_max=1.0, beta=1.0, sigma=0.0, denominator=0.0, noise=GaussianNoise())
    with pytest.raises(ValueError, match="sigma"):
        aggregate([], template=template, w_max=1.0, beta=1.0, sigma=-1.0, denominator=1.0, noise=GaussianNoise())


def test_denominator() -> None:
    assert denominator("uedp", q_u=0.05, num_users=200) == pytest.approx(10.0)
    assert denominator("user_dp", q_u=0.05, num_users=200, W_u=100.0) == pytest.approx(5.0)
    paper = denominator("uedp", q_u=0.05, num_users=200, q_e=0.5, W_e=1000, q_s=0.1, W_s=300, paper_z=True)
    assert paper == pytest.approx(10.0 * (500 + 30))
    naive = denominator("uedp_naive", q_u=0.05, num_users=200, q_e=0.5, W_e=1000, q_s=None, W_s=None,
                        paper_z=True)  # fmt: skip
    assert naive == pytest.approx(10.0 * 500)
    with pytest.raises(ValueError, match="W_e"):
        denominator("uedp", q_u=0.05, num_users=200, q_e=0.5, q_s=0.1, W_s=3, paper_z=True)
    with pytest.raises(ValueError, match="paper_z"):
        denominator("user_dp", q_u=0.05, num_users=200, paper_z=True)
    with pytest.raises(ValueError, match="q_u"):
        denominator("uedp", q_u=0.0, num_users=200)
