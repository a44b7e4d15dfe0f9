"""The crafted-document audit of the local mechanisms (uedp.audit.local): the crafted pairs realize the loose case
of each sensitivity, the sound mechanisms' bounds stay below their claims, and the broken "adept-published"
(ADePT's published sensitivity C) is certified above its claim. Seeded (an audit): each run is reproducible."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uedp.audit.local import LOCAL_VARIANTS, audit_variant, crafted_pair, is_consistent


@pytest.mark.parametrize("name", sorted(LOCAL_VARIANTS))
def test_crafted_pairs_realize_the_largest_movement(name):
    variant = LOCAL_VARIANTS[name]
    mech = variant.mechanism(2.0, 1e-5, length=3, dim=8, clip=1.0)
    z0, z1 = crafted_pair(variant, length=3, dim=8, clip=1.0)
    gap = mech.clamp(z1) - mech.clamp(z0)
    l2, l1 = np.linalg.norm(gap), np.abs(gap).sum()
    if variant.clipping == "value":  # every coordinate moves by exactly 2C: a sqrt of a sum of 24 fours, few ulps
        assert (l2, l1) == (pytest.approx(2 * math.sqrt(24)), pytest.approx(48.0))
    else:
        # 2C: twice ADePT's published sensitivity; rel 1e-8 covers the norm clip's margin (C (1 - 1e-9))
        assert l2 == pytest.approx(2.0, rel=1e-8)
        if variant.noise == "laplace":
            assert l1 == pytest.approx(2.0 * math.sqrt(24), rel=1e-8)
    if variant.sound:  # the sound mechanisms' sensitivities are attained, not exceeded
        assert l2 <= mech.l2_sensitivity * (1 + 1e-12) and l1 <= mech.l1_sensitivity * (1 + 1e-12)
        assert max(l2 / mech.l2_sensitivity, l1 / mech.l1_sensitivity) > 1 - 1e-8
    else:
        assert l2 > 1.99 * mech.l2_sensitivity


@pytest.mark.parametrize("name", ["adept", "clv", "adept-laplace"])
def test_sound_mechanisms_stay_below_their_claim(name):
    row = audit_variant(name, epsilon=2.0, trials=100_000, seed=1)
    assert is_consistent(row), row
    # the calibration is tight on the crafted pair: the Gaussian's true epsilon is read off a pessimistic PLD grid
    # of 1e-3 (5e-4 of epsilon 2), the Laplace's is exact up to the clip margin 1e-9: rel 2e-3
    assert row.true_eps == pytest.approx(2.0, rel=2e-3)
    assert row.bound.eps_lb > 0.6  # and the audit has power: far from chance (0), at 100,000 trials


@pytest.mark.parametrize(("name", "claim"), [("adept-published", 2.0), ("adept-published-laplace", 4.0)])
def test_the_published_adept_sensitivity_is_certified_above_its_claim(name, claim):
    row = audit_variant(name, epsilon=claim, trials=100_000, seed=1)
    assert row.bound.eps_lb > claim and row.true_eps > 2 * claim * 0.99, row
