"""The expected share of a client's sentences a round may train on (docs/mechanism.md step 4: selection).

A sampled client uses sentence x in a round iff (uedp.privacy.selection) ent(x), its set of DISTINCT protected
entity keys, is empty and its extended entity is sampled, or every e in ent(x) is sampled and, with the entity
cap on, permitted in the client's slot b. The coins are keyed hashes (uedp.privacy.sampling) of distinct
inputs, taken as independent uniform 64-bit values (the random-oracle model every proof uses), so for a
sentence with j distinct entities

    P(x selectable) = p_s                          j = 0
                    = (p_e * pi)^j                 j >= 1
    p_e = floor(q_e 2^64) / 2^64,  p_s = floor(q_s 2^64) / 2^64      (exactly q for q = 0 or q >= 2^-12)
    pi  = 1 - (1 - 1/m_max)^k_cap   with the cap (k_cap >= 1),  1 without it (k_cap = 0 or None)

pi is the probability that slot b is among e's permitted slots {h_int(k, "P", e, i) mod m_max : i < k_cap}:
k_cap independent draws, any of which may hit b (k_cap / m_max - O(k_cap^2 / m_max^2): at most k_cap
distinct slots); the modulo bias of h_int mod m_max (below m_max / 2^64 relative) is ignored, so pi is the
same for every slot. An entity's E-coin and P-coins, and different entities' coins, hash different inputs,
hence the product. Expectations are linear, so the expected share of a client's sentences is the mean of
these probabilities over its sentences, whether or not its sentences share entities (the coins of one
round are correlated across sentences, the expectation is not).

`trainable_share(entity_counts, q_e=, q_s=, k_cap=, m_max=)` gives, per number j of distinct entities per
sentence, the sentences, the probability and the expected number selectable, and the overall expected
share: what `uedp corpus-stats` prints (uedp.entities.stats) and what each node logs of its own sentences
before its first training (client/update.py). A mechanism that is not keyed (user-level DP, the noiseless
baselines) uses every sentence: its rates are (1, 1) and it has no cap (uedp.privacy.mechanisms), which gives
1 here. Below TINY_SHARE the node's line is a warning.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

from uedp.checks import integer
from uedp.privacy.sampling import check_cap, threshold

TINY_SHARE = 0.01  # an expected share below this (1% of the sentences) is flagged: the client barely trains
_HASH_RANGE = 1 << 64


def _cap(k_cap: int | None, m_max: int | None) -> int | None:
    """k_cap in force (None: off), checked with m_max (ValueError naming the option)."""
    if k_cap is None:
        return None
    integer("k_cap", k_cap, minimum=0, note="(0: no entity cap)")
    if k_cap == 0:
        return None
    check_cap(k_cap, m_max)  # m_max an integer >= 1
    return k_cap


def slot_probability(k_cap: int | None, m_max: int | None) -> float:
    """pi: the probability that a given slot is among an entity's permitted slots (1 without the cap)."""
    cap = _cap(k_cap, m_max)
    if cap is None:
        return 1.0
    assert m_max is not None  # check_cap
    if m_max == 1:
        return 1.0
    return -math.expm1(cap * math.log1p(-1.0 / m_max))  # 1 - (1 - 1/m)^k, accurate for large m


def selection_probability(entities: int, *, q_e: float, q_s: float, k_cap: int | None = None,
                          m_max: int | None = None) -> float:
    """P(a sentence with `entities` distinct protected entities is selectable) in one round (module docstring)."""
    integer("the number of entities of a sentence", entities, minimum=0)
    if entities == 0:
        return threshold(q_s, name="q_s") / _HASH_RANGE
    per_entity = threshold(q_e, name="q_e") / _HASH_RANGE * slot_probability(k_cap, m_max)
    return per_entity ** entities


def trainable_share(entity_counts: Iterable[int], *, q_e: float, q_s: float, k_cap: int | None = None,
                    m_max: int | None = None) -> dict[str, Any]:
    """The expected share of these sentences a sampled client may train on in one round, by the number of
    distinct protected entities per sentence (`entity_counts[i]` for sentence i). Plain JSON values:

        setting      {q_e, q_s, k_cap (0: off), m_max (None unless the cap is on), slot_probability (pi)}
        sentences    how many
        expected     the expected number selectable: sum over sentences of P(selectable)
        share        expected / sentences (0.0 for no sentence)
        by_entities  [{entities: j, sentences: n_j, probability: P_j, expected: n_j P_j, share: n_j P_j /
                      sentences}, ...] for each j that occurs, ascending

    ValueError (naming q_e, q_s, k_cap or m_max) for a rate outside [0, 1], a k_cap < 0, or the cap without
    an m_max >= 1."""
    cap = _cap(k_cap, m_max)
    counts: Counter[int] = Counter()
    for i, j in enumerate(entity_counts):
        integer(f"entity_counts[{i}]", j, minimum=0)
        counts[j] += 1
    pi = slot_probability(cap, m_max)
    n = sum(counts.values())
    rows = []
    for j in sorted(counts):
        p = selection_probability(j, q_e=q_e, q_s=q_s, k_cap=cap, m_max=m_max)
        rows.append({"entities": j, "sentences": counts[j], "probability": p, "expected": counts[j] * p,
                     "share": counts[j] * p / n})
    expected = math.fsum(r["expected"] for r in rows)
    return {
        "setting": {"q_e": float(q_e), "q_s": float(q_s), "k_cap": cap or 0, "m_max": m_max if cap else None,
                    "slot_probability": pi},
        "sentences": n,
        "expected": expected,
        "share": expected / n if n else 0.0,
        "by_entities": rows,
    }
