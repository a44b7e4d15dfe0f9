"""A numerical privacy loss distribution of two 1-D Gaussian mixtures, pessimistic (an upper bound) or optimistic
(a lower bound), vectorized over a fine grid of outputs.

  pair_pld(p_means, p_weights, q_means, q_weights, sigma, *, vdi, points, tail, pessimistic) -> PLD
  NumericPair(p_means, p_weights, q_means, q_weights, sigma)   a `Pair` of uedp.privacy.accounting built by it

dp-accounting's `from_mixture_gaussian_mechanism` inverts the privacy loss point by point: seconds for a
mixture without a zero shift (the parts of uedp.privacy.holders' revealed-count pair); this is ~0.3 s at
400,001 grid points whatever the shifts. The crafted-update audit's "true epsilon" of a realizable world
(uedp.audit.mechanism) and its lower bounds (uedp.audit.holders) use it too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import dp_accounting
import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy.special import ndtr


def _log_density(y: np.ndarray, means: np.ndarray, weights: np.ndarray, sigma: float) -> np.ndarray:
    """log sum_k w_k exp(-(y - m_k)^2 / (2 sigma^2)) (the common normalization cancels in a ratio): the
    largest term factored out, so that far from every mean (terms below 1e-308) the value stays finite."""
    terms = np.log(weights)[:, None] - 0.5 * ((y[None, :] - means[:, None]) / sigma) ** 2
    top = terms.max(axis=0)
    return top + np.log(np.exp(terms - top).sum(axis=0))


def _loss_pmf(loss_at_edges: np.ndarray, edges: np.ndarray, means: np.ndarray, weights: np.ndarray,
              sigma: float, slack: float, vdi: float, pessimistic: bool = True) -> pld_pmf.PLDPmf:
    """The privacy loss distribution of y ~ sum_k w_k N(m_k, sigma^2), pessimistically by default: each bin of the
    y-grid carries its exact mass and a loss >= the loss anywhere in it (the larger end value plus `slack`,
    rounded up to the grid of `vdi`); the mass outside the y-grid is put at infinite loss. With
    `pessimistic=False` the other way round (a lower bound of every delta(eps)): the smaller end value minus
    `slack`, rounded down, and the mass outside dropped."""
    if pessimistic:
        loss = np.maximum(loss_at_edges[:-1], loss_at_edges[1:]) + slack
    else:
        loss = np.minimum(loss_at_edges[:-1], loss_at_edges[1:]) - slack
    cdf = sum(w * ndtr((edges - m) / sigma) for m, w in zip(means, weights))
    mass = np.diff(cdf)
    outside = float(sum(w * (ndtr((edges[0] - m) / sigma) + ndtr((m - edges[-1]) / sigma))
                        for m, w in zip(means, weights))) if pessimistic else 0.0
    idx = (np.ceil(loss / vdi) if pessimistic else np.floor(loss / vdi)).astype(np.int64)
    keep = mass > 0.0
    idx, mass = idx[keep], mass[keep]
    lo = int(idx.min())
    sums = np.bincount(idx - lo, weights=mass)
    probs = {lo + int(i): float(p) for i, p in enumerate(sums) if p > 0.0}
    return pld_pmf.create_pmf(probs, vdi, outside, pessimistic)


def pair_pld(p_means: Any, p_weights: Any, q_means: Any, q_weights: Any, sigma: float, *, vdi: float = 5e-5,
             points: int = 400_001, tail: float = 8.5, pessimistic: bool = True) -> pld_lib.PrivacyLossDistribution:
    """The PLD of the pair P = sum_j p_j N(c_j, sigma^2) (world 0), Q = sum_k q_k N(a_k, sigma^2) (world 1):
    the "remove" PMF is the loss log q/p under Q, the "add" PMF the loss log p/q under P, so that the
    composed PLD's delta(eps) is max(H_{e^eps}(Q^T||P^T), H_{e^eps}(P^T||Q^T)).

    Pessimistic (an upper bound on the true PLD's delta at every eps, up to float rounding): the y-grid spans
    the means +- `tail` sigma (`points` edges); the mass outside is put at infinite loss (< 1e-16 per side
    at 8.5 sigma). L = log q - log p has |L''| <= D^2 / (4 sigma^4), D the spread of all means (L'' is the
    difference of two posterior variances of the mean, over sigma^4), so on a bin of width w, L <= the
    larger end value + D^2 w^2 / (32 sigma^4); that value is rounded up to the loss grid `vdi`. With
    `pessimistic=False` every delta(eps) is a LOWER bound instead (the bins' smallest losses, rounded down, the
    outer mass dropped; dp-accounting's optimistic composition): a concrete world's epsilon as a lower bound
    (uedp.audit.holders)."""
    pm, pw = np.asarray(p_means, dtype=np.float64), np.asarray(p_weights, dtype=np.float64)
    qm, qw = np.asarray(q_means, dtype=np.float64), np.asarray(q_weights, dtype=np.float64)
    if not (sigma > 0.0 and math.isfinite(sigma)):
        raise ValueError(f"sigma must be positive and finite, got {sigma!r}")
    for w in (pw, qw):
        if w.ndim != 1 or w.size == 0 or w.min() < 0.0 or not math.isclose(float(w.sum()), 1.0, abs_tol=1e-9):
            raise ValueError("mixture weights must be non-negative and sum to 1")
    pm, pw = pm[pw > 0.0], pw[pw > 0.0]
    qm, qw = qm[qw > 0.0], qw[qw > 0.0]
    every = np.concatenate([pm, qm])
    edges = np.linspace(every.min() - tail * sigma, every.max() + tail * sigma, points)
    width = edges[1] - edges[0]
    spread = float(every.max() - every.min())
    slack = spread**2 * width**2 / (32.0 * sigma**4)
    loss = _log_density(edges, qm, qw, sigma) - _log_density(edges, pm, pw, sigma)
    remove = _loss_pmf(loss, edges, qm, qw, sigma, slack, vdi, pessimistic)
    add = _loss_pmf(-loss, edges, pm, pw, sigma, slack, vdi, pessimistic)
    return pld_lib.PrivacyLossDistribution(remove, add)


@dataclass(frozen=True)
class NumericPair:
    """The pair P = sum_j p_j N(c_j, sigma^2) (the dataset without the neighbour) and Q = sum_k q_k N(a_k,
    sigma^2) (with it), both directions, as a `Pair` of uedp.privacy.pairs: its PLD is `pair_pld` on the
    accountant's grid, pessimistic (an upper bound) unless `pessimistic` is False (an optimistic estimate: what
    a lower bound of the audit computes)."""

    p_means: tuple[float, ...]
    p_weights: tuple[float, ...]
    q_means: tuple[float, ...]
    q_weights: tuple[float, ...]
    sigma: float
    pessimistic: bool = True

    @classmethod
    def of(cls, p_means: Any, p_weights: Any, q_means: Any, q_weights: Any, sigma: float, *,
           pessimistic: bool = True) -> NumericPair:
        """The pair of any sequences or arrays of means and weights (stored as tuples of floats: hashable)."""
        def floats(xs: Any) -> tuple[float, ...]:
            return tuple(float(x) for x in np.asarray(xs, dtype=float).ravel())

        return cls(floats(p_means), floats(p_weights), floats(q_means), floats(q_weights), float(sigma),
                   bool(pessimistic))

    @property
    def is_null(self) -> bool:
        return set(zip(self.p_means, self.p_weights)) == set(zip(self.q_means, self.q_weights))

    @property
    def is_blatant(self) -> bool:
        return not self.is_null and (self.sigma == 0.0 or not all(map(math.isfinite, self.q_means + self.p_means)))

    @property
    def max_shift(self) -> float:
        return max(self.q_means + self.p_means) - min(self.q_means + self.p_means)

    @property
    def zero_mass(self) -> float:
        return 0.0

    def rdp_event(self) -> dp_accounting.DpEvent:
        """The Gaussian of the largest distance between any two means: the SCALE of the epsilon (for the
        accountant's automatic grid), not a bound."""
        return dp_accounting.GaussianDpEvent(self.sigma / self.max_shift)

    def pld(self, value_discretization_interval: float) -> pld_lib.PrivacyLossDistribution:
        return pair_pld(self.p_means, self.p_weights, self.q_means, self.q_weights, self.sigma,
                        vdi=value_discretization_interval, pessimistic=self.pessimistic)
