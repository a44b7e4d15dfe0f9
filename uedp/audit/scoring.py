"""Scoring a trained model on the audit's canaries: the rank and exposure of every planted secret.

Each canary's secret is ranked by the model's likelihood of the whole canary sentence among candidates
from the same space (uedp.audit.exposure): the WHOLE rest of the space when it is that small (exact
exposure; the quick audit's 3-digit secrets), otherwise `num_candidates` random ones.
"""

from __future__ import annotations

import os

import torch

from uedp.audit.exposure import exposure, rank_of, sentence_nll
from uedp.data.synthetic import canary_candidates
from uedp.models.base import UedpModel
from uedp.tokenization import TextTokenizer


def candidates_for(canary: dict, num_candidates: int, *, seed: int) -> list[str]:
    """`num_candidates` random secrets of the canary's space other than its own; the WHOLE rest of the
    space (exact exposure) when the space has at most num_candidates + 1 values."""
    space, secret = canary["space"], canary["secret"]
    k = space.count("d")
    if 10**k - 1 <= num_candidates:
        pieces = space.split("d")
        out = []
        for value in range(10**k):
            digits = f"{value:0{k}d}"
            text = "".join(p + d for p, d in zip(pieces, digits)) + pieces[-1]
            if text != secret:
                out.append(text)
        return out
    return canary_candidates(space, num_candidates, seed, exclude={secret})


def score(model: UedpModel, tokenizer: TextTokenizer, canaries: list[dict], *, num_candidates: int,
          max_len: int) -> list[dict]:
    """Per canary: rank and exposure of its secret under the trained `model` (the prefix is shared, so ranking
    whole-sentence NLLs ranks the secret's log-likelihood given the prefix), and its mean token loss (kept for
    reference). `max_len`: the run's task.max_len, which a canary must fit (a cut secret is never trained on)."""
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    rows = []
    for i, c in enumerate(canaries):
        cands = candidates_for(c, num_candidates, seed=1000 + i)
        texts = [c["text"]] + [c["prefix"] + s + "." for s in cands]
        nll = sentence_nll(model, tokenizer, texts, max_len=64)
        ids = tokenizer.encode(c["text"])
        if len(ids) + 2 > max_len:  # [BOS] ... [EOS]: a cut canary's secret is never trained on
            raise ValueError(f"canary {c['id']} is {len(ids) + 2} tokens > task.max_len={max_len}: "
                             "raise max_len or tokenizer.vocab_size, or the audit measures nothing")
        rank = rank_of(float(nll[0]), nll[1:])
        if len(cands) != num_candidates:
            raise ValueError(f"canary {c['id']}: {len(cands)} candidates, {num_candidates} asked")
        rows.append({"id": c["id"], "frequency": c["frequency"], "member": c["member"],
                     "loss": float(nll[0]) / (len(ids) + 1), "rank": rank,
                     "exposure": exposure(rank, num_candidates)})
    return rows
