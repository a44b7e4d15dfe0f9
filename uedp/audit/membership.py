"""Membership inference on planted canaries and the empirical epsilon lower bounds it yields.

Pure functions (no model, no I/O); `experiments/audit.py` feeds them the canaries' scores.

Set-up (one-run auditing, Steinke, Nasr and Jagielski 2023): m canaries are drawn BEFORE training and
each is planted with an independent fair coin flip. After training, each canary gets a score, lower =
more likely a member (experiments/audit.py uses its secret's rank among the candidates of its space).
Two bounds are computed:

- `cp_epsilon_lower_bound`: a threshold attack ("member iff score < threshold", the threshold fixed by a
  label-free rule, `median_threshold`) gives a confusion matrix; with Clopper-Pearson upper bounds
  FPR_hi and FNR_hi (each one-sided at (1 + confidence) / 2, so both hold jointly with probability >=
  `confidence`), any (eps, delta)-DP mechanism satisfies TPR <= e^eps FPR + delta and TNR <= e^eps FNR +
  delta, hence eps >= max(ln((1 - delta - FNR_hi) / FPR_hi), ln((1 - delta - FPR_hi) / FNR_hi)) (Kairouz
  et al. 2015 hypothesis-testing view; Jagielski et al. 2020). Each trial is treated as independent: that
  holds for the coin flips but the trials share one model, which the one-run bound below handles.
- `one_run_epsilon_lower_bound`: the attacker guesses "in" for the `k` lowest scores and "out" for the
  `k` highest, abstaining on the rest; with r = 2k guesses and v correct, Steinke et al. (Theorem 3.1,
  pure eps-DP) show P[W >= v] <= P[Binomial(r, e^eps / (1 + e^eps)) >= v], so eps_lb = logit(p_lo)
  where p_lo is the one-sided Clopper-Pearson lower bound of v / r. We use the delta = 0 form (their
  Theorem 5.2 adds a delta term, of order m * delta; with m <= 256 and delta = 1e-5 it moves the tail
  probability by < 3e-3, so the reported bound is very slightly optimistic; say so where it is used).

Every bound is clipped at 0 (a lower bound of 0 says nothing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta as beta_dist


def clopper_pearson(k: int, n: int, *, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided exact binomial interval for k successes in n trials (each side (1 - confidence) / 2)."""
    _check_counts(k, n)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    a = (1.0 - confidence) / 2.0
    lo = 0.0 if k == 0 else float(beta_dist.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta_dist.ppf(1.0 - a, k + 1, n - k))
    return lo, hi


def cp_upper(k: int, n: int, *, level: float) -> float:
    """One-sided Clopper-Pearson upper bound: P[Binomial(n, p) <= k] = 1 - level at p = result."""
    _check_counts(k, n)
    return 1.0 if k == n else float(beta_dist.ppf(level, k + 1, n - k))


def cp_lower(k: int, n: int, *, level: float) -> float:
    """One-sided Clopper-Pearson lower bound: P[Binomial(n, p) >= k] = 1 - level at p = result."""
    _check_counts(k, n)
    return 0.0 if k == 0 else float(beta_dist.ppf(1.0 - level, k, n - k + 1))


def _check_counts(k: int, n: int) -> None:
    if not (isinstance(k, int | np.integer) and isinstance(n, int | np.integer)) or n < 1 or not 0 <= k <= n:
        raise ValueError(f"need integers 0 <= k <= n and n >= 1, got k={k!r}, n={n!r}")


@dataclass(frozen=True)
class Confusion:
    tp: int
    fn: int
    fp: int
    tn: int

    @property
    def tpr(self) -> float:
        return self.tp / max(1, self.tp + self.fn)

    @property
    def fpr(self) -> float:
        return self.fp / max(1, self.fp + self.tn)


def median_threshold(scores: Sequence[float]) -> float:
    """A label-free threshold rule: the median of all canaries' scores (members and non-members)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0 or not np.isfinite(s).all():
        raise ValueError("median_threshold: need at least one finite score")
    return float(np.median(s))


def threshold_attack(scores: Sequence[float], members: Sequence[bool], threshold: float) -> Confusion:
    """Predict "member" iff score < threshold (scores are losses: lower = more likely seen)."""
    s = np.asarray(scores, dtype=np.float64)
    m = np.asarray(members, dtype=bool)
    if s.shape != m.shape or s.ndim != 1:
        raise ValueError(f"scores {s.shape} and members {m.shape} must be vectors of the same length")
    guess = s < threshold
    return Confusion(tp=int((guess & m).sum()), fn=int((~guess & m).sum()),
                     fp=int((guess & ~m).sum()), tn=int((~guess & ~m).sum()))


def cp_epsilon_lower_bound(c: Confusion, *, delta: float, confidence: float = 0.95) -> float:
    """max(0, ln((1 - delta - FNR_hi) / FPR_hi), ln((1 - delta - FPR_hi) / FNR_hi)); see module docstring."""
    if c.tp + c.fn < 1 or c.fp + c.tn < 1:
        raise ValueError(f"need at least one member and one non-member, got {c}")
    level = (1.0 + confidence) / 2.0
    fpr_hi = cp_upper(c.fp, c.fp + c.tn, level=level)
    fnr_hi = cp_upper(c.fn, c.tp + c.fn, level=level)
    best = 0.0
    for num, den in ((1.0 - delta - fnr_hi, fpr_hi), (1.0 - delta - fpr_hi, fnr_hi)):
        if num > 0 and den > 0:
            best = max(best, math.log(num / den))
    return best


def one_run_guesses(scores: Sequence[float], members: Sequence[bool], k: int) -> tuple[int, int]:
    """(r, v): guess "in" for the k lowest scores and "out" for the k highest; v = correct guesses."""
    s = np.asarray(scores, dtype=np.float64)
    m = np.asarray(members, dtype=bool)
    if s.shape != m.shape or s.ndim != 1:
        raise ValueError(f"scores {s.shape} and members {m.shape} must be vectors of the same length")
    if not 1 <= 2 * k <= s.size:
        raise ValueError(f"need 1 <= 2k <= number of canaries, got k={k}, m={s.size}")
    order = np.argsort(s, kind="stable")
    v = int(m[order[:k]].sum()) + int((~m[order[-k:]]).sum())
    return 2 * k, v


def one_run_epsilon_lower_bound(r: int, v: int, *, confidence: float = 0.95) -> float:
    """Steinke et al. (2023), pure-DP form: logit of the one-sided CP lower bound of v/r, clipped at 0."""
    p_lo = cp_lower(v, r, level=confidence)
    if p_lo <= 0.5:
        return 0.0
    if p_lo >= 1.0:
        return math.inf
    return math.log(p_lo / (1.0 - p_lo))
