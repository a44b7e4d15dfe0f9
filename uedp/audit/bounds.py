"""The auditor's test statistic and the epsilon lower bound of a distinguishing game.

Game: many independent trials per world (world 0 without the canary, world 1 with it); in each the auditor
sees the T released aggregates of a fresh run and computes a score, higher = "canary world".

- `log_likelihood_ratio`: the Neyman-Pearson score of two Gaussian mixtures. Per round, with y the canary
  coordinate of the released aggregate times Z minus a known offset, world 1 sum_k p_k N(s_k, sigma^2) and
  world 0 sum_j p0_j N(c_j, sigma^2): log LR = log sum_k p_k exp((s_k y - s_k^2 / 2) / sigma^2) - log sum_j
  p0_j exp((c_j y - c_j^2 / 2) / sigma^2) (the second term is 0 when world 0 is the point 0); summed over
  the T rounds.
- `epsilon_lower_bound`: the threshold ("canary world iff score >= tau") is chosen on a held-out half of
  each world's trials (the even trials), where it maximizes the bound below; the bound is then evaluated on
  the other half (the odd trials) only, so the choice costs nothing in confidence. The selection uses a
  stricter confidence (99.9%) than the reported bound: among many thresholds the best-looking one sits
  where few trials lie and looks better than it is (the winner's curse); a stricter interval prefers
  thresholds with more support, which then hold up on the evaluation half. With Clopper-Pearson
  one-sided upper bounds FPR_hi and FNR_hi, each at (1 + confidence) / 2 (jointly `confidence`), an
  (eps, delta)-DP mechanism satisfies TPR <= e^eps FPR + delta and TNR <= e^eps FNR + delta, hence
  eps >= max(ln((1 - delta - FNR_hi) / FPR_hi), ln((1 - delta - FPR_hi) / FNR_hi))
  (`uedp.audit.membership.cp_epsilon_lower_bound`, the same formula as the canary audit).
- `resolution_limit`: the largest bound n trials per world can give (no false positive, every true positive):
  about ln(n / 3.69) at 95% confidence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy.special import logsumexp
from scipy.stats import beta as beta_dist

from uedp.audit.membership import Confusion, cp_epsilon_lower_bound, cp_upper


def _log_mixture_kernel(y: np.ndarray, sigma: float, shifts: Sequence[float], probs: Sequence[float]) -> np.ndarray:
    """log sum_k p_k exp((s_k y - s_k^2/2) / sigma^2) per element of y (log of the mixture density over the
    N(0, sigma^2) density)."""
    s = np.asarray(shifts, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    if s.shape != p.shape or s.ndim != 1 or not math.isclose(float(p.sum()), 1.0, abs_tol=1e-9) or p.min() < 0.0:
        raise ValueError("shifts and probs must be vectors of the same length, probs >= 0 summing to 1")
    keep = p > 0.0
    s, logp = s[keep], np.log(p[keep])
    return logsumexp(logp + (s * y[..., None] - 0.5 * s * s) / sigma**2, axis=-1)


def log_likelihood_ratio(y: np.ndarray, *, sigma: float, shifts: Sequence[float], probs: Sequence[float],
                         shifts0: Sequence[float] = (0.0,), probs0: Sequence[float] = (1.0,)) -> np.ndarray:
    """Sum over the last axis (rounds) of the per-round log-likelihood ratio of "y ~ sum_k p_k N(s_k,
    sigma^2)" (world 1) against "y ~ sum_j p0_j N(c_j, sigma^2)" (world 0; default the point 0, which gives
    log sum_k p_k exp((s_k y - s_k^2/2) / sigma^2)), per trial."""
    if not (sigma > 0.0 and math.isfinite(sigma)):
        raise ValueError(f"sigma must be positive and finite, got {sigma!r}")
    y = np.asarray(y, dtype=np.float64)
    per_round = _log_mixture_kernel(y, sigma, shifts, probs)
    if not (len(shifts0) == 1 and float(shifts0[0]) == 0.0):
        per_round = per_round - _log_mixture_kernel(y, sigma, shifts0, probs0)
    return per_round.sum(axis=-1)


def _bounds_vector(fp: np.ndarray, n0: int, tp: np.ndarray, n1: int, *, delta: float, level: float) -> np.ndarray:
    """cp_epsilon_lower_bound for arrays of counts ("positive" = score >= tau), vectorized."""
    fn = n1 - tp
    fpr_hi = np.where(fp >= n0, 1.0, beta_dist.ppf(level, fp + 1, np.maximum(n0 - fp, 1)))
    fnr_hi = np.where(fn >= n1, 1.0, beta_dist.ppf(level, fn + 1, np.maximum(n1 - fn, 1)))
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where((1 - delta - fnr_hi > 0) & (fpr_hi > 0), np.log((1 - delta - fnr_hi) / fpr_hi), 0.0)
        b = np.where((1 - delta - fpr_hi > 0) & (fnr_hi > 0), np.log((1 - delta - fpr_hi) / fnr_hi), 0.0)
    return np.maximum(0.0, np.maximum(a, b))


@dataclass(frozen=True)
class LowerBound(Confusion):
    """The bound from one game: eps_lb (on the evaluation half, at `confidence`), the threshold chosen on
    the selection half and the evaluation half's counts (tp, fn, fp, tn: its Confusion)."""

    eps_lb: float
    confidence: float
    delta: float
    threshold: float
    selection_eps_lb: float  # the same bound on the selection half (optimistic: the threshold was fit there)
    resolution_limit: float  # the best bound the evaluation half could give

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "tpr": self.tpr, "fpr": self.fpr}


def resolution_limit(n0: int, n1: int, *, delta: float, confidence: float = 0.95) -> float:
    """The bound of a perfect outcome on n0 / n1 evaluation trials (no false positive, no false negative)."""
    return cp_epsilon_lower_bound(Confusion(tp=n1, fn=0, fp=0, tn=n0), delta=delta, confidence=confidence)


def epsilon_lower_bound(scores0: np.ndarray, scores1: np.ndarray, *, delta: float, confidence: float = 0.95,
                        selection_confidence: float = 0.999) -> LowerBound:
    """The epsilon lower bound of the game whose world-0 / world-1 trials scored `scores0` / `scores1`
    (see the module docstring: threshold on the even trials, bound on the odd ones)."""
    s0 = np.asarray(scores0, dtype=np.float64).ravel()
    s1 = np.asarray(scores1, dtype=np.float64).ravel()
    if s0.size < 2 or s1.size < 2 or not (np.isfinite(s0).all() and np.isfinite(s1).all()):
        raise ValueError("need at least two finite scores per world")
    sel0, ev0 = np.sort(s0[0::2]), s0[1::2]
    sel1, ev1 = np.sort(s1[0::2]), s1[1::2]
    level = (1.0 + selection_confidence) / 2.0  # stricter than `confidence`: favours well-supported tails
    candidates = np.unique(np.concatenate([sel0, sel1]))
    fp = sel0.size - np.searchsorted(sel0, candidates, side="left")  # scores >= tau
    tp = sel1.size - np.searchsorted(sel1, candidates, side="left")
    bounds = _bounds_vector(fp, sel0.size, tp, sel1.size, delta=delta, level=level)
    best = int(np.argmax(bounds))
    tau = float(candidates[best])
    c = Confusion(tp=int((ev1 >= tau).sum()), fn=int((ev1 < tau).sum()),
                  fp=int((ev0 >= tau).sum()), tn=int((ev0 < tau).sum()))
    eps = cp_epsilon_lower_bound(c, delta=delta, confidence=confidence)
    return LowerBound(eps_lb=eps, confidence=confidence, delta=delta, threshold=tau, tp=c.tp, fn=c.fn, fp=c.fp,
                      tn=c.tn, selection_eps_lb=float(bounds[best]),
                      resolution_limit=resolution_limit(ev0.size, ev1.size, delta=delta, confidence=confidence))


def cp_upper_zero(n: int, *, confidence: float = 0.95) -> float:
    """FPR_hi with no false positive in n trials (one-sided at (1 + confidence) / 2): about 3.69 / n."""
    return cp_upper(0, n, level=(1.0 + confidence) / 2.0)
