"""Gaussian noise for the aggregate (contract 2.8).

`GaussianNoise()` seeds numpy's Philox generator with 128 bits from `secrets` (the operating system's
CSPRNG): a CSPRNG-seeded PRNG, not a CSPRNG. Philox is a counter-based generator whose output is not
predictable without the seed; the seed is never stored, logged or exposed. Noise is drawn in float64 and
added to the float64 sum of updates; only the noisy result is rounded to the model's dtype.

Floating-point caveat: the analysis assumes real-valued Gaussian noise. Floating-point samples are a
discrete, non-uniformly spaced set, which in principle leaks (Mironov 2012 showed it for the Laplace
mechanism; Opacus's "secure mode" mitigates it for Gaussians by summing several draws). We do not claim
resistance to such attacks; drawing and adding in float64 makes the gaps far smaller than the model's
float32 resolution, which is the usual practical mitigation.

`GaussianNoise(seed=...)` is for reproduction only: it sets `.reproducible = True` and
`.warning = "not private: fixed seed"` so that callers can say so loudly in their outputs, and logs a
WARNING when created.
"""

from __future__ import annotations

import logging
import math
import secrets
from typing import Protocol

import numpy as np

log = logging.getLogger(__name__)

FIXED_SEED_WARNING = "not private: fixed seed"


class NoiseSource(Protocol):
    reproducible: bool
    warning: str | None

    def normal(self, shape: tuple[int, ...], std: float) -> np.ndarray: ...


class GaussianNoise:
    """Independent N(0, std^2) float64 samples; see the module docstring for seeding."""

    def __init__(self, *, seed: int | None = None) -> None:
        if seed is None:
            self._rng = np.random.Generator(np.random.Philox(secrets.randbits(128)))
            self.reproducible = False
            self.warning: str | None = None
        else:
            if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                raise ValueError(f"noise seed must be a non-negative integer or None, got {seed!r}")
            self._rng = np.random.Generator(np.random.Philox(seed))
            self.reproducible = True
            self.warning = FIXED_SEED_WARNING
            log.warning("Gaussian noise uses a fixed seed: %s (reproduction only)", FIXED_SEED_WARNING)

    def normal(self, shape: tuple[int, ...], std: float) -> np.ndarray:
        """A float64 array of the given shape with i.i.d. N(0, std^2) entries (zeros when std == 0)."""
        std = float(std)
        if not (std >= 0.0 and math.isfinite(std)):
            raise ValueError(f"noise std must be a non-negative finite number, got {std!r}")
        if std == 0.0:
            return np.zeros(shape, dtype=np.float64)
        return self._rng.standard_normal(shape, dtype=np.float64) * std

    def __repr__(self) -> str:
        return f"GaussianNoise(reproducible={self.reproducible})"


def secure_generator(seed: int | None = None) -> tuple[np.random.Generator, str | None]:
    """A numpy Generator for privacy noise and the warning its output must carry: cryptographically seeded
    (Philox, 128 bits from `secrets`) and no warning when `seed` is None; seeded for reproduction, with
    FIXED_SEED_WARNING, otherwise. Used where a mechanism needs a Generator (uedp.rewriting)."""
    if seed is None:
        return np.random.Generator(np.random.Philox(secrets.randbits(128))), None
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"noise seed must be a non-negative integer or None, got {seed!r}")
    log.warning("noise uses a fixed seed: %s (reproduction only)", FIXED_SEED_WARNING)
    return np.random.Generator(np.random.Philox(seed)), FIXED_SEED_WARNING
