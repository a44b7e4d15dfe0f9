"""A lower bound for one user and an entity held by k other users: a concrete world's epsilon (docs/proofs.md
section 11, "Lower bound").

The accountant's bound for that pair (uedp.privacy.holders) is an UPPER bound. What a run provably leaks is
at least the epsilon of any pair of neighbouring worlds it can meet. The world here, along one coordinate, in
units of b = w_max beta: every holder's update is -b without e' and, with e', +b when its sentence holding e'
is selectable (probability q_sel: 1 for user-level DP, q_s for an entity-free sentence under UeDP) and -b
otherwise; u''s update is +b. Per round, with J ~ Bin(k, q_u) drawn holders and u' drawn with probability
q_u:

    D  (no u', no e')  sum over drawn holders of -b                        = N(-J b, sigma^2)
    D' (u' and e')     sum over drawn holders of +-b, plus +b if u' drawn

Every round is the same independent pair, so the run's epsilon is the T-fold composition of this pair of 1-D
Gaussian mixtures (uedp.privacy.numeric.pair_pld), discretized OPTIMISTICALLY (every delta(eps) a lower
bound): `world_epsilon` is a lower bound on the epsilon of ANY valid accounting of that run, and the
accountant's bound must stay above it (tests/test_holders.py).

  holder_world(k, q_u, q_sel) -> (p_means, p_weights, q_means, q_weights)   the per-round pair, units of b
  world_epsilon(k, *, q_u, q_sel, sigma, rounds, delta) -> float             its T-fold epsilon, a lower bound
"""

from __future__ import annotations

import numpy as np
from scipy.stats import binom

from uedp.checks import non_negative_int, probability
from uedp.privacy.composition import pairs_epsilon
from uedp.privacy.numeric import NumericPair

LOSS_GRID = 2e-3  # the optimistic loss grid: it lowers epsilon by at most ~rounds * LOSS_GRID


def _merge(means: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    out: dict[float, float] = {}
    for m, w in zip(means.tolist(), weights.tolist()):
        if w > 0.0:
            out[m] = out.get(m, 0.0) + w
    keys = sorted(out)
    return np.array(keys), np.array([out[m] for m in keys])


def holder_world(k: int, q_u: float, q_sel: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The per-round pair of the module docstring: (means, weights) of D, then of D', in units of b."""
    non_negative_int("the number of other holders k", k)
    for name, q in (("q_u", q_u), ("q_sel", q_sel)):
        probability(name, q)
    j = np.arange(k + 1)
    p_means, p_weights = -j.astype(float), binom.pmf(j, k, q_u)
    # D': a drawn holder is +1 with probability q_sel, -1 otherwise; plus (u') +1 with probability q_u
    plus = binom.pmf(j, k, q_u * q_sel)  # number of +1 holders
    q_means, q_weights = [], []
    r = 0.0 if q_u * q_sel >= 1.0 else q_u * (1 - q_sel) / (1 - q_u * q_sel)  # P(-1 | not +1), per holder
    for a in j:  # a holders at +1, c at -1 (c ~ Bin(k - a, r))
        rest = k - a
        c = np.arange(rest + 1)
        wc = binom.pmf(c, rest, r) * plus[a]
        for i, wi in ((0, 1 - q_u), (1, q_u)):
            q_means.append(a - c + i)
            q_weights.append(wc * wi)
    qm, qw = _merge(np.concatenate(q_means).astype(float), np.concatenate(q_weights))
    pm, pw = _merge(p_means, p_weights)
    return pm, pw / pw.sum(), qm, qw / qw.sum()


def world_epsilon(k: int, *, q_u: float, q_sel: float, sigma: float, rounds: int, delta: float,
                  vdi: float = LOSS_GRID) -> float:
    """The T-fold epsilon at `delta` of the holder world (a lower bound; sigma in units of b)."""
    pair = NumericPair.of(*holder_world(k, q_u, q_sel), sigma, pessimistic=False)
    return pairs_epsilon([(pair, rounds)], delta=delta, value_discretization_interval=vdi)
