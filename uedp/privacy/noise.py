"""Gaussian noise for the aggregate (docs/mechanism.md step 8), and how it was drawn (recorded in the ledger: `mode`).

Three sources, chosen by `noise_source(seed=, choice=)` from privacy.seed and privacy.noise (`NOISE_CHOICES`):

- `SecureGaussianNoise()` (mode "secure", the default of private runs): every bit comes from a CSPRNG
  (ChaCha20 keyed with 256 bits from `secrets`, the operating system's CSPRNG, through `cryptography`), and
  each coordinate is the sum of FOUR independent N(0, std^2) draws divided by 2, itself exactly
  N(0, std^2). This is the defence Opacus's secure mode adopted against floating-point attacks on the
  Gaussian sampler (Jin et al. 2022, arXiv 2112.05307, who attacked Opacus's noise; the sum of 2n draws is
  Holohan and Braghin 2021, arXiv 2107.10138, section 5.1, with n = 2): a MITIGATION that makes the attack's
  search about 2^(53 (2n-1)) harder, not a proof. A proof needs a discrete Gaussian on a fixed grid
  (Canonne, Kamath and Steinke 2020) with its own accounting and a sensitivity inflated by the rounding;
  we do not implement it. Draws: uniforms in (0, 1) from the keystream's 53-bit words, Box-Muller, float64
  (about 8 times the time of a Philox draw: 0.04 s for the main job's 233k parameters, about 7% of its round).
- `GaussianNoise()` (mode "philox", privacy.noise=philox): numpy's Philox seeded with 128 bits from
  `secrets`: a CSPRNG-SEEDED PRNG, one draw per coordinate; faster, and not hardened against the attacks
  above (Mironov 2012 showed them for the Laplace mechanism). Kept for comparison (experiments/benchmark.py).
- `GaussianNoise(seed=...)` (mode "philox_fixed_seed", any privacy.seed >= 0): for reproduction only, with
  `.reproducible = True` and `.warning = "not private: fixed seed"` so that callers say so loudly; logs a
  WARNING when created. (Reproduction runs keep the draw they always had, so their results do not move.)

Noise is drawn in float64 and added to the float64 sum of updates; only the noisy result is rounded to the
model's dtype. The key and seeds are never stored, logged or exposed.
"""

from __future__ import annotations

import logging
import math
import secrets
from typing import Protocol

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from uedp.checks import non_negative_int

log = logging.getLogger(__name__)

FIXED_SEED_WARNING = "not private: fixed seed"
NOISE_CHOICES = ("secure", "philox")  # the values of privacy.noise
SECURE_DRAWS = 4  # draws summed per coordinate (Holohan and Braghin's 2n with n = 2, as Opacus)
_CHUNK = 1 << 18  # coordinates drawn per keystream request (bounds the temporary memory: ~24 MiB per chunk)


class NoiseSource(Protocol):
    reproducible: bool
    warning: str | None
    mode: str  # recorded in the ledger: uedp.privacy.ledger.NOISE_MODES

    def normal(self, shape: tuple[int, ...], std: float) -> np.ndarray: ...


def _check_std(std: float) -> float:
    std = float(std)
    if not (std >= 0.0 and math.isfinite(std)):
        raise ValueError(f"noise std must be a non-negative finite number, got {std!r}")
    return std


def _check_seed(seed: int) -> int:
    return non_negative_int("noise seed", seed, note="or None")


class GaussianNoise:
    """Independent N(0, std^2) float64 samples from Philox; see the module docstring for seeding."""

    def __init__(self, *, seed: int | None = None) -> None:
        if seed is None:
            self._rng = np.random.Generator(np.random.Philox(secrets.randbits(128)))
            self.reproducible = False
            self.warning: str | None = None
            self.mode = "philox"
        else:
            self._rng = np.random.Generator(np.random.Philox(_check_seed(seed)))
            self.reproducible = True
            self.warning = FIXED_SEED_WARNING
            self.mode = "philox_fixed_seed"
            log.warning("Gaussian noise uses a fixed seed: %s (reproduction only)", FIXED_SEED_WARNING)

    def normal(self, shape: tuple[int, ...], std: float) -> np.ndarray:
        """A float64 array of the given shape with i.i.d. N(0, std^2) entries (zeros when std == 0)."""
        std = _check_std(std)
        if std == 0.0:
            return np.zeros(shape, dtype=np.float64)
        return self._rng.standard_normal(shape, dtype=np.float64) * std

    def __repr__(self) -> str:
        return f"GaussianNoise(mode={self.mode!r})"


class SecureGaussianNoise:
    """N(0, std^2) float64 samples, each the sum of SECURE_DRAWS CSPRNG-drawn N(0, std^2) divided by
    sqrt(SECURE_DRAWS) (= 2); see the module docstring. `key` (32 bytes) is for the distribution's tests only:
    such a source is reproducible and carries FIXED_SEED_WARNING."""

    mode = "secure"

    def __init__(self, *, key: bytes | None = None) -> None:
        if key is not None and (not isinstance(key, bytes) or len(key) != 32):
            raise ValueError("key must be 32 bytes (tests only) or None")
        self.reproducible = key is not None
        self.warning: str | None = FIXED_SEED_WARNING if key is not None else None
        # ChaCha20 in cryptography takes a 16-byte nonce (counter || nonce); the key is used for one stream.
        cipher = Cipher(algorithms.ChaCha20(key or secrets.token_bytes(32), bytes(16)), mode=None)
        self._stream = cipher.encryptor()

    def _sum_of_draws(self, n: int) -> np.ndarray:
        """n coordinates, each the sum of SECURE_DRAWS (4) i.i.d. N(0, 1): 4n Box-Muller normals from 2n pairs
        of keystream uniforms on (0, 1) (53 bits of a 64-bit word each, plus half a step: never 0 or 1)."""
        words = np.frombuffer(self._stream.update(bytes(8 * SECURE_DRAWS * n)), dtype="<u8").copy()
        np.right_shift(words, np.uint64(11), out=words)
        u = words.astype(np.float64)
        u += 0.5
        u *= 2.0**-53
        half = SECURE_DRAWS * n // 2
        r, theta = u[:half], u[half:]
        np.log(r, out=r)
        r *= -2.0
        np.sqrt(r, out=r)  # Box-Muller radius sqrt(-2 ln u1)
        theta *= 2.0 * math.pi
        cos = np.cos(theta)
        np.sin(theta, out=theta)
        cos *= r
        theta *= r  # 2n draws r cos and 2n draws r sin: 4n independent N(0, 1)
        total = cos[:n] + cos[n:]
        total += theta[:n]
        total += theta[n:]
        return total

    def normal(self, shape: tuple[int, ...], std: float) -> np.ndarray:
        """A float64 array of the given shape with i.i.d. N(0, std^2) entries (zeros when std == 0)."""
        std = _check_std(std)
        if std == 0.0:
            return np.zeros(shape, dtype=np.float64)
        size = math.prod(shape)
        out = np.empty(size, dtype=np.float64)
        for start in range(0, size, _CHUNK):
            n = min(_CHUNK, size - start)
            out[start:start + n] = self._sum_of_draws(n)
        out *= std / math.sqrt(SECURE_DRAWS)  # the sum of 4 N(0, std^2), divided by 2: N(0, std^2)
        return out.reshape(shape)

    def __repr__(self) -> str:
        return f"SecureGaussianNoise(reproducible={self.reproducible})"


def noise_source(*, seed: int | None, choice: str = "secure") -> GaussianNoise | SecureGaussianNoise:
    """The noise of a run: a fixed seed (reproduction) is Philox with FIXED_SEED_WARNING whatever `choice`;
    otherwise `choice` (privacy.noise, NOISE_CHOICES): "secure" (the default) or "philox"."""
    if choice not in NOISE_CHOICES:
        raise ValueError(f"privacy.noise must be one of {', '.join(NOISE_CHOICES)}, got {choice!r}")
    if seed is not None:
        return GaussianNoise(seed=seed)
    return SecureGaussianNoise() if choice == "secure" else GaussianNoise()


def secure_generator(seed: int | None = None) -> tuple[np.random.Generator, str | None]:
    """A numpy Generator for privacy noise and the warning its output must carry: cryptographically seeded
    (Philox, 128 bits from `secrets`) and no warning when `seed` is None; seeded for reproduction, with
    FIXED_SEED_WARNING, otherwise. Used where a mechanism needs a Generator (uedp.rewriting)."""
    if seed is None:
        return np.random.Generator(np.random.Philox(secrets.randbits(128))), None
    _check_seed(seed)
    log.warning("noise uses a fixed seed: %s (reproduction only)", FIXED_SEED_WARNING)
    return np.random.Generator(np.random.Philox(seed)), FIXED_SEED_WARNING
