"""Exposure of planted secrets (Carlini et al. 2019, "The Secret Sharer") and its DP lower bound.

A canary's secret is ranked by the model's log-likelihood of the WHOLE canary sentence (prefix + secret
+ rest) among N random candidates from the same space, planted in the same sentence:

    rank = 1 + #{candidates whose sentence loss <= the secret's}     (ties count against the secret)
    exposure = log2(N + 1) - log2(rank)          (0 .. log2(N + 1) bits; about 1.44 bits by chance)

`sentence_nll(model, tokenizer, texts)` gives the summed token negative log-likelihood of each sentence
(the shared prefix adds the same amount to every candidate, so ranks are those of the secret's part).

Lower bound from a rank: if the secret is uniform over its space and the model was trained WITHOUT the
canary, the secret and its candidates (drawn uniformly, excluding it) are exchangeable, so P[rank <= r] <=
r / (N + 1) (ties only make it smaller). Under (eps, delta)-DP with respect to adding the canary, P[rank <=
r | planted] <= e^eps r / (N + 1) + delta. Observing rank r (a p-value argument at level alpha, Bonferroni
over the K canaries of a group) therefore gives

    eps_lb = ln((alpha / K - delta) * (N + 1) / rank),   clipped at 0,

see `rank_epsilon_lower_bound`. `chance_p_value` is a Fisher-style test that a group's exposures exceed
chance at all: under the null each rank / (N + 1) is (at most) uniform, so sum(ln((N + 1) / rank)) is
(stochastically dominated by) Gamma(K, 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from scipy.stats import gamma

from uedp.prepare.encoding import encode_sentences
from uedp.tasks import NextWordTask
from uedp.tokenization import Batch, TextTokenizer


def rank_of(secret_score: float, candidate_scores: Sequence[float]) -> int:
    """1 + number of candidates scoring at most the secret (scores are losses: lower = more likely)."""
    c = np.asarray(candidate_scores, dtype=np.float64)
    if c.ndim != 1 or c.size == 0 or not math.isfinite(secret_score) or not np.isfinite(c).all():
        raise ValueError("rank_of: need a finite secret score and a non-empty vector of finite candidates")
    return 1 + int((c <= secret_score).sum())


def exposure(rank: int, num_candidates: int) -> float:
    """log2(N + 1) - log2(rank), rank in 1..N+1."""
    if not 1 <= rank <= num_candidates + 1:
        raise ValueError(f"rank must lie in 1..{num_candidates + 1}, got {rank}")
    return math.log2(num_candidates + 1) - math.log2(rank)


def rank_epsilon_lower_bound(rank: int, num_candidates: int, *, delta: float, alpha: float = 0.05,
                             tests: int = 1) -> float:
    """max(0, ln((alpha / tests - delta) * (N + 1) / rank)): see the module docstring."""
    if not 1 <= rank <= num_candidates + 1 or tests < 1 or not 0 < alpha < 1:
        raise ValueError(f"bad rank bound inputs: rank={rank}, N={num_candidates}, tests={tests}, alpha={alpha}")
    level = alpha / tests - delta
    if level <= 0:
        return 0.0
    return max(0.0, math.log(level * (num_candidates + 1) / rank))


def chance_p_value(ranks: Sequence[int], num_candidates: int) -> float:
    """P-value of "these secrets rank no better than chance" (Fisher-style, Gamma(K, 1) tail)."""
    r = np.asarray(ranks, dtype=np.float64)
    if r.size == 0:
        raise ValueError("chance_p_value: no ranks")
    stat = float(np.log((num_candidates + 1) / r).sum())
    return float(gamma.sf(stat, a=r.size))


@torch.no_grad()
def sentence_nll(model: torch.nn.Module, tokenizer: TextTokenizer, texts: Sequence[str], *,
                 max_len: int = 64, batch_size: int = 1024) -> np.ndarray:
    """Summed next-token negative log-likelihood of each text ([BOS] text [EOS]) under `model`."""
    was_training = model.training
    model.eval()
    out = np.empty(len(texts), dtype=np.float64)
    try:
        for start in range(0, len(texts), batch_size):
            chunk = list(texts[start:start + batch_size])
            enc = encode_sentences(tokenizer, chunk, None, task="next_word", max_len=max_len)
            nll, _ = NextWordTask.sentence_nll(model, Batch(enc.ids, enc.mask))
            out[start:start + len(chunk)] = nll.double().numpy()
    finally:
        model.train(was_training)
    return out
