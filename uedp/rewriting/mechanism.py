"""The privacy mechanism of DP-BART-CLV (docs/dp-bart-system.md, "The mechanism (DP-BART-CLV)"): pure numpy,
no model code.

A document's encoder output z in R^{l x d} is clipped by value (every entry clamped to [-C, C]); the pruned
coordinates (the same indices for every token) are set to zero and never released; the l * d' released
coordinates get i.i.d. noise. Any document against any document (substitution, local DP), the released part
moves by at most

    L2 = 2 C sqrt(l d'),    L1 = 2 C l d'                                  (`sensitivities`)

so the release is (epsilon, delta)-LDP per document with Gaussian noise of the ANALYTIC Gaussian mechanism's
sigma (Balle and Wang, ICML 2018; `analytic_gaussian_sigma`), or epsilon-LDP with Laplace noise of scale
L1 / epsilon (`laplace_scale`). The classic sigma = L2 sqrt(2 ln(1.25/delta)) / epsilon holds only for
epsilon < 1 (`classic_gaussian_sigma`, for comparison only). The analytic condition is evaluated in log space
(exp(epsilon) overflows a float near epsilon 710); it is exact for any epsilon up to several thousands.

Composition (`compose_documents`): each document is privatized independently, so a user's n documents are
covered by basic composition, (n epsilon, n delta), and for the Gaussian by the tighter PLD composition of n
Gaussian mechanisms (dp-accounting), reported at the same total delta n * delta. A document rewritten twice
counts twice.

Randomness: `ClvMechanism.privatize` draws from the numpy Generator it is given. Production callers must pass
one seeded from the operating system's CSPRNG, as uedp.privacy.noise.GaussianNoise does:

    rng = np.random.Generator(np.random.Philox(secrets.randbits(128)))

and never store or log the seed; a fixed seed is for tests and reproduction only (not private). The
floating-point caveat of uedp.privacy.noise applies (noise is drawn and added in float64; no claim of
resistance to attacks on the floating-point representation, Mironov 2012).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.special import log_ndtr

from uedp.checks import positive, positive_int
from uedp.errors import ConfigError

NOISES = ("gaussian", "laplace")
VARIANTS = ("clv", "pr", "pr+", "adept")  # the rewriting variants; adept: the ADePT mechanism on our model
MECHANISM_NAMES = {"clv": "DP-BART-CLV", "pr": "DP-BART-PR", "pr+": "DP-BART-PR+",
                   "adept": "ADePT mechanism on our model (norm clip)"}
SIGMA_RTOL = 1e-12  # bisection stops when the bracket's width is below this fraction of its upper end
_MAX_BRACKET_STEPS = 2200  # factors of 2 from the classic sigma: far beyond any float's range


def _open_unit(name: str, value: float) -> float:
    v = float(value)
    if not 0.0 < v < 1.0:
        raise ConfigError(f"{name} must lie in (0, 1), got {value!r}")
    return v


def _log1mexp(x: float) -> float:
    """log(1 - exp(x)) for x <= 0, accurate on both sides of -ln 2; -inf at x = 0."""
    if x >= 0.0:
        return -math.inf
    return math.log(-math.expm1(x)) if x > -math.log(2.0) else math.log1p(-math.exp(x))


def _log_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    """log of Phi(D/(2s) - e s/D) - exp(e) Phi(-D/(2s) - e s/D), computed without forming exp(e).

    With L1 = log Phi(D/(2s) - e s/D) and L2 = e + log Phi(-D/(2s) - e s/D) (L2 <= L1 mathematically), the
    difference is exp(L1) (1 - exp(L2 - L1)). Returns -inf where the two terms agree to rounding (delta is then
    below any meaningful target)."""
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    log_first = float(log_ndtr(a - b))
    log_second = epsilon + float(log_ndtr(-a - b))
    if log_first == -math.inf:
        return -math.inf
    return log_first + _log1mexp(log_second - log_first)


def analytic_gaussian_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    """The delta at which N(0, sigma^2) noise on a query of L2 sensitivity `sensitivity` is
    (epsilon, delta)-DP, exactly (Balle and Wang 2018, Theorem 8); finite for any epsilon (log space)."""
    epsilon = positive("epsilon", epsilon)
    sigma = positive("sigma", sigma)
    sensitivity = positive("sensitivity", sensitivity)
    return math.exp(_log_delta(epsilon, sigma, sensitivity))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The smallest sigma (to a relative 1e-12) for which Gaussian noise of std sigma on a query of L2
    sensitivity `sensitivity` is (epsilon, delta)-DP: the analytic Gaussian mechanism (Balle and Wang, ICML
    2018), i.e. Phi(D/(2s) - e s/D) - exp(e) Phi(-D/(2s) - e s/D) <= delta.

    Bisection (geometric) on the condition, which is monotone in sigma; the returned value is the upper end
    of the final bracket, so it SATISFIES the condition (`analytic_gaussian_delta(...) <= delta`) while
    sigma * (1 - 1e-10) does not. Works for epsilon up to several thousands (log space). ConfigError names
    the bad parameter (epsilon > 0, 0 < delta < 1, sensitivity > 0, all finite)."""
    epsilon = positive("epsilon", epsilon)
    delta = _open_unit("delta", delta)
    sensitivity = positive("sensitivity", sensitivity)
    log_target = math.log(delta)

    def ok(s: float) -> bool:
        return _log_delta(epsilon, s, sensitivity) <= log_target

    hi = classic_gaussian_sigma(epsilon, delta, sensitivity)
    for _ in range(_MAX_BRACKET_STEPS):
        if ok(hi):
            break
        hi *= 2.0
    else:  # pragma: no cover - the condition holds for large enough sigma
        raise RuntimeError(f"no sigma found for epsilon={epsilon!r}, delta={delta!r}")
    lo = hi / 2.0
    for _ in range(_MAX_BRACKET_STEPS):
        if not ok(lo):
            break
        hi, lo = lo, lo / 2.0
    else:  # pragma: no cover - delta -> 1 as sigma -> 0
        raise RuntimeError(f"no sigma found for epsilon={epsilon!r}, delta={delta!r}")
    while hi - lo > SIGMA_RTOL * hi:
        mid = math.sqrt(lo * hi)
        if not lo < mid < hi:  # adjacent floats
            break
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return _verified_sigma(epsilon, delta, sensitivity, hi)


SENSITIVITY_SLACK = 2.0**-50  # the callers' float sensitivities are within a few ulps of the exact ones
_CHECK_DIGITS = 60


def _exact_delta(epsilon: float, sigma: float, sensitivity: float) -> object:
    """The Balle-Wang delta in 60-digit arithmetic (mpmath), at the sensitivity raised by SENSITIVITY_SLACK."""
    import mpmath

    with mpmath.workdps(_CHECK_DIGITS):
        e, s = mpmath.mpf(epsilon), mpmath.mpf(sigma)
        d = mpmath.mpf(sensitivity) * (1 + mpmath.mpf(SENSITIVITY_SLACK))
        return mpmath.ncdf(d / (2 * s) - e * s / d) - mpmath.exp(e) * mpmath.ncdf(-d / (2 * s) - e * s / d)


def _verified_sigma(epsilon: float, delta: float, sensitivity: float, sigma: float) -> float:
    """`sigma`, raised (by factors 1 + 1e-12 * 2^k) until the condition holds in 60-digit arithmetic at the
    slightly raised sensitivity: the float evaluation loses digits to cancellation at tiny epsilon (found by the
    adversarial read of docs/proofs.md section 10: at epsilon 1e-8, delta 1e-20 the float-bisected sigma gave an
    exact delta 1.0000116 times the target), and a float sensitivity may lie an ulp below the exact one."""
    step = 1e-12
    for _ in range(80):
        if _exact_delta(epsilon, sigma, sensitivity) <= delta:
            return sigma
        sigma *= 1.0 + step
        step *= 2.0
    raise RuntimeError(f"no verified sigma for epsilon={epsilon!r}, delta={delta!r}")  # pragma: no cover


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """sensitivity * sqrt(2 ln(1.25 / delta)) / epsilon: the classic Gaussian mechanism (Dwork and Roth,
    Theorem A.1), which is (epsilon, delta)-DP only for epsilon < 1. For comparison in tests and docs only:
    never use it to calibrate noise, and never for epsilon >= 1 (at epsilon 250, delta 1e-5 it under-noises
    by about 2.8x against `analytic_gaussian_sigma`)."""
    epsilon = positive("epsilon", epsilon)
    delta = _open_unit("delta", delta)
    sensitivity = positive("sensitivity", sensitivity)
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def sensitivities(length: int, dim_released: int, clip: float) -> tuple[float, float]:
    """(L2, L1) sensitivities of the clipped encoder output over its l * d' released coordinates, any
    document against any document: (2 C sqrt(l d'), 2 C l d')."""
    length = positive_int("length", length)
    dim_released = positive_int("dim_released", dim_released)
    clip = positive("clip", clip)
    n = length * dim_released
    return 2.0 * clip * math.sqrt(n), 2.0 * clip * n


def laplace_scale(epsilon: float, l1_sensitivity: float) -> float:
    """The Laplace scale l1_sensitivity / epsilon of the epsilon-DP Laplace mechanism, rounded UP: the smallest
    float b with b * epsilon >= l1_sensitivity * (1 + SENSITIVITY_SLACK) in exact rationals (a float quotient
    can land an ulp below: adversarial read, docs/proofs.md section 10)."""
    from fractions import Fraction

    l1 = positive("l1_sensitivity", l1_sensitivity)
    epsilon = positive("epsilon", epsilon)
    need = Fraction(l1) * (1 + Fraction(SENSITIVITY_SLACK))
    b = l1 / epsilon
    while Fraction(b) * Fraction(epsilon) < need:
        b = math.nextafter(b, math.inf)
    return b


@dataclass(frozen=True)
class Composition:
    """The (epsilon, delta) of n independently privatized documents of one user.

    `basic_epsilon`, `basic_delta`: n * epsilon, n * delta (any mechanism). `pld_epsilon`: for the Gaussian,
    the PLD composition of the n Gaussian mechanisms at the same total delta `basic_delta` (an upper bound:
    dp-accounting's pessimistic estimate), None for pure-epsilon mechanisms. `epsilon` is the tighter one."""

    n: int
    basic_epsilon: float
    basic_delta: float
    pld_epsilon: float | None

    @property
    def epsilon(self) -> float:
        return self.basic_epsilon if self.pld_epsilon is None else min(self.basic_epsilon, self.pld_epsilon)

    @property
    def delta(self) -> float:
        return self.basic_delta


MAX_PLD_POINTS = 20_000_000  # above this PLD grid size, compose_documents reports basic composition only


def pld_points(n: int, noise_multiplier: float, vdi: float) -> float:
    """An upper estimate of the grid size of n composed Gaussian PLDs (see compose_documents)."""
    return n * (1.0 / noise_multiplier**2 + 21.0 / noise_multiplier) / vdi


def compose_documents(epsilon: float, delta: float, n: int, *, noise_multiplier: float | None = None,
                      value_discretization_interval: float | None = None) -> Composition:
    """The guarantee for one user whose n documents are each privatized once with an (epsilon, delta) mechanism.

    Basic composition always; with `noise_multiplier` (sigma / L2 sensitivity of a Gaussian mechanism) also the
    PLD composition of n such Gaussians, built with dp-accounting (`from_gaussian_mechanism`, sensitivity 1:
    the two output distributions of any pair of documents are Gaussians whose means are at most one
    sensitivity apart, which is exactly the pair it models) and read at delta = n * delta. The PLD grid is
    uedp.privacy.accounting's `auto_discretization` of n * epsilon, unless given. delta may be 0 only without
    a noise multiplier (pure epsilon-DP, e.g. Laplace)."""
    epsilon = positive("epsilon", epsilon)
    n = positive_int("n", n)
    delta = float(delta)
    if not 0.0 <= delta < 1.0:
        raise ConfigError(f"delta must lie in [0, 1), got {delta!r}")
    if noise_multiplier is None:
        return Composition(n=n, basic_epsilon=n * epsilon, basic_delta=n * delta, pld_epsilon=None)
    noise_multiplier = positive("noise_multiplier", noise_multiplier)
    if delta == 0.0:
        raise ConfigError("delta must be positive for a Gaussian mechanism (noise_multiplier given), got 0.0")
    if n * delta >= 1.0:
        raise ConfigError(f"n * delta must be below 1, got n={n} and delta={delta!r}")
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    from uedp.privacy.composition import auto_discretization

    if value_discretization_interval is None:
        vdi = auto_discretization(n * epsilon)
    else:
        vdi = positive("value_discretization_interval", value_discretization_interval)
    # The PLD's grid runs over the privacy loss (x - 1/2) / noise_multiplier^2 of the Gaussian truncated at
    # about 10 standard deviations: a range of 1 / noise_multiplier^2 + 20 / noise_multiplier (measured:
    # tests/test_rewriting_mechanism.py), in steps of vdi, and it grows n-fold under composition. With very
    # little noise (a "no-noise" reference at epsilon 1e9: noise_multiplier 2e-5) that is billions of points
    # (a run was killed out of memory, and a first guard that counted only the 14 / noise_multiplier spread
    # let n = 1 through): basic composition only there.
    if pld_points(n, noise_multiplier, vdi) > MAX_PLD_POINTS:
        return Composition(n=n, basic_epsilon=n * epsilon, basic_delta=n * delta, pld_epsilon=None)
    pld = pld_lib.from_gaussian_mechanism(noise_multiplier, value_discretization_interval=vdi)
    if n > 1:
        pld = pld.self_compose(n)
    pld_epsilon = float(pld.get_epsilon_for_delta(n * delta))
    return Composition(n=n, basic_epsilon=n * epsilon, basic_delta=n * delta, pld_epsilon=pld_epsilon)


@dataclass(frozen=True, kw_only=True, eq=False)
class _EncoderMechanism:
    """What the local mechanisms on an encoder output share: validation, sigma from the sensitivities, the
    composition over a user's documents, the noise on the released coordinates. A subclass gives `clamp` (the
    noiseless, bounded part) and `_sensitivities` (L2, L1 of that part between any two documents)."""

    epsilon: float
    delta: float
    dim: int
    clip: float = 0.1
    length: int = 20
    kept: np.ndarray | None = None
    noise: Literal["gaussian", "laplace"] = "gaussian"
    _sigma: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.noise not in NOISES:
            raise ConfigError(f"noise must be one of {', '.join(NOISES)}, got {self.noise!r}")
        object.__setattr__(self, "epsilon", positive("epsilon", self.epsilon))
        if self.noise == "gaussian":
            object.__setattr__(self, "delta", _open_unit("delta", self.delta))
        elif float(self.delta) != 0.0:
            raise ConfigError(f"delta must be 0 with laplace noise (pure epsilon-DP), got {self.delta!r}")
        else:
            object.__setattr__(self, "delta", 0.0)
        object.__setattr__(self, "dim", positive_int("dim", self.dim))
        object.__setattr__(self, "length", positive_int("length", self.length))
        object.__setattr__(self, "clip", positive("clip", self.clip))
        if self.kept is not None:
            object.__setattr__(self, "kept", self._check_kept(self.kept))
        l2, l1 = self._sensitivities()
        sigma = (
            analytic_gaussian_sigma(self.epsilon, self.delta, l2)
            if self.noise == "gaussian"
            else laplace_scale(self.epsilon, l1)
        )
        object.__setattr__(self, "_sigma", sigma)

    def _sensitivities(self) -> tuple[float, float]:  # pragma: no cover - abstract
        raise NotImplementedError

    def clamp(self, z: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_kept(self, kept: object) -> np.ndarray:
        arr = np.asarray(kept)
        if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
            raise ConfigError(f"kept must be a non-empty 1-D array of integer indices, got {kept!r}")
        arr = np.sort(arr.astype(np.int64))
        if arr[0] < 0 or arr[-1] >= self.dim:
            raise ConfigError(f"kept indices must lie in [0, dim={self.dim}), got {arr[0]}..{arr[-1]}")
        if np.any(np.diff(arr) == 0):
            raise ConfigError("kept indices must be distinct")
        arr.setflags(write=False)
        return arr

    def _key(self) -> tuple[object, ...]:
        kept = None if self.kept is None else tuple(int(i) for i in self.kept)
        return (type(self).__name__, self.epsilon, self.delta, self.dim, self.clip, self.length, kept, self.noise)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _EncoderMechanism) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    @property
    def dim_released(self) -> int:
        """d', the coordinates released per token."""
        return self.dim if self.kept is None else int(self.kept.size)

    @property
    def l2_sensitivity(self) -> float:
        return self._sensitivities()[0]

    @property
    def l1_sensitivity(self) -> float:
        return self._sensitivities()[1]

    @property
    def sigma(self) -> float:
        """The noise parameter: the Gaussian's std (analytic) or the Laplace scale."""
        return self._sigma

    def compose(self, n: int) -> Composition:
        """The guarantee for a user whose n documents are each privatized once (see `compose_documents`)."""
        multiplier = self.sigma / self.l2_sensitivity if self.noise == "gaussian" else None
        return compose_documents(self.epsilon, self.delta, n, noise_multiplier=multiplier)

    def _check_z(self, z: object) -> np.ndarray:
        arr = np.asarray(z)
        expected = f"({self.length}, {self.dim}) or (batch, {self.length}, {self.dim})"
        if arr.ndim not in (2, 3) or arr.shape[-2:] != (self.length, self.dim):
            raise ConfigError(f"z must have shape {expected}, got {arr.shape}")
        if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise ConfigError(f"z must be a real array, got dtype {arr.dtype}")
        arr = arr.astype(np.float64)  # a copy: the caller's array is never changed
        if np.isnan(arr).any():
            raise ConfigError("z contains NaN")
        return arr

    def privatize(self, z: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The released (epsilon, delta)-LDP version of encoder output(s) z, shape (length, dim) or
        (batch, length, dim): `clamp(z)` plus i.i.d. noise on the released coordinates only, drawn in float64
        from `rng` as one array of shape z.shape[:-1] + (dim_released,) (Gaussian: standard_normal * sigma;
        Laplace: laplace(0, sigma)). Pruned coordinates are exactly 0 in the result. A new float64 array; z is
        not modified. `rng` must be CSPRNG-seeded in production (see the module docstring)."""
        if not isinstance(rng, np.random.Generator):
            raise ConfigError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        out = self.clamp(z)
        shape = (*out.shape[:-1], self.dim_released)
        if self.noise == "gaussian":
            noise = rng.standard_normal(shape, dtype=np.float64) * self.sigma
        else:
            noise = rng.laplace(0.0, self.sigma, shape)
        if self.kept is None:
            out += noise
        else:
            out[..., self.kept] += noise
        return out


@dataclass(frozen=True, kw_only=True, eq=False)
class ClvMechanism(_EncoderMechanism):
    """DP-BART-CLV on one encoder output (or a batch): clip by value, drop pruned coordinates, add noise.

    epsilon, delta  the per-document guarantee; Gaussian: epsilon > 0, 0 < delta < 1 (analytic sigma);
                    Laplace: pure epsilon-DP, delta must be 0
    clip            C, the value clip (published default 0.1)
    length          l, tokens per document (padded or truncated by the caller; published default 20)
    dim             d, the encoder's output width (no default: 768 for bart-base, 384 for MiniLM)
    kept            the released coordinates per token (DP-BART-PR: the same for every token and document),
                    distinct integers in [0, dim), stored sorted and read-only; None releases all d
    noise           "gaussian" or "laplace"

    Everything is validated at construction (ConfigError naming the field), where sigma is also computed.
    Equality and hashing use the class and every field (kept as a tuple)."""

    def _sensitivities(self) -> tuple[float, float]:
        return sensitivities(self.length, self.dim_released, self.clip)

    def clamp(self, z: np.ndarray) -> np.ndarray:
        """The noiseless part of `privatize`: a float64 copy of z with every entry clamped to [-clip, clip]
        and the pruned coordinates set to 0. Not private on its own."""
        out = np.clip(self._check_z(z), -self.clip, self.clip)
        if self.kept is not None:
            pruned = np.ones(self.dim, dtype=bool)
            pruned[self.kept] = False
            out[..., pruned] = 0.0
        return out


NORM_MARGIN = 1e-9  # norm_clip scales to C (1 - NORM_MARGIN): a float64 norm's rounding stays below C
MAX_NORM_COORDINATES = 4_000_000  # n * 2^-52 < NORM_MARGIN / 2: the margin covers the rounding of n squares
NORM_CLIP_RANGE = (1e-100, 1e100)  # C here: no square of an entry that matters under- or overflows
_ENTRY_CAP = 1e100  # entries are clamped to +-1e100 first (any map into the ball is fine): no overflow


def norm_clip(z: np.ndarray, bound: float) -> np.ndarray:
    """Each document's encoder output (the last two axes, flattened: its n = l * d coordinates) scaled by
    min(1, C' / ||z||_2) with C' = bound * (1 - NORM_MARGIN), in float64, after clamping every entry to +-1e100
    (infinite entries included: a deterministic map, so the bound below is all privacy needs). With n at most
    MAX_NORM_COORDINATES and bound in NORM_CLIP_RANGE, the rounding of the norm and of the product is below
    the margin, so every result has EXACT L2 norm below `bound` (docs/proofs.md section 10; checked in exact
    rationals by tests/test_rewriting_mechanism.py). A new array."""
    arr = np.clip(np.asarray(z, dtype=np.float64), -_ENTRY_CAP, _ENTRY_CAP)
    if arr.ndim < 2:
        raise ConfigError(f"norm_clip: z must have shape (..., length, dim), got {arr.shape}")
    n = arr.shape[-1] * arr.shape[-2]
    if n > MAX_NORM_COORDINATES:
        raise ConfigError(f"norm_clip: {n} coordinates a document, at most {MAX_NORM_COORDINATES}")
    low, high = NORM_CLIP_RANGE
    if not low <= float(bound) <= high:
        raise ConfigError(f"norm clip bound must lie in [{low:g}, {high:g}], got {bound!r}")
    norms = np.sqrt(np.einsum("...ij,...ij->...", arr, arr))
    target = float(bound) * (1.0 - NORM_MARGIN)
    scale = np.where(norms > target, target / np.maximum(norms, target), 1.0)
    return arr * scale[..., None, None]


def norm_sensitivities(length: int, dim: int, clip: float) -> tuple[float, float]:
    """(L2, L1) sensitivities of an output norm-clipped to C over its n = l * d coordinates, any document against
    any document: (2 C, 2 C sqrt(n)) (Cauchy-Schwarz: ||v||_1 <= sqrt(n) ||v||_2)."""
    length = positive_int("length", length)
    dim = positive_int("dim", dim)
    clip = positive("clip", clip)
    return 2.0 * clip, 2.0 * clip * math.sqrt(length * dim)


@dataclass(frozen=True, kw_only=True, eq=False)
class NormClipMechanism(_EncoderMechanism):
    """The ADePT mechanism on our model (docs/dp-bart-system.md; docs/proofs.md section 10): each
    document's encoder output, flattened to its l * d coordinates, is clipped to L2 norm C (`norm_clip`) and
    every coordinate gets i.i.d. noise calibrated to the CORRECTED sensitivity of any two documents: L2 2C
    (analytic Gaussian), L1 2C sqrt(l d) (Laplace). ADePT's published analysis took C: that under-noises by 2x
    in the sensitivity (Habernal 2021; the audit's "adept-published" variant shows it). No pruning: `kept` must
    be None. Fields as ClvMechanism, with `clip` the norm bound C."""

    def __post_init__(self) -> None:
        if self.kept is not None:
            raise ConfigError("the norm-clip (ADePT) mechanism releases every coordinate: kept must be None")
        super().__post_init__()

    def _sensitivities(self) -> tuple[float, float]:
        return norm_sensitivities(self.length, self.dim, self.clip)

    def clamp(self, z: np.ndarray) -> np.ndarray:
        """The noiseless part of `privatize`: a float64 copy of z, each document scaled to L2 norm below clip
        (`norm_clip`). Not private on its own."""
        return norm_clip(self._check_z(z), self.clip)


LocalMechanism = ClvMechanism | NormClipMechanism
