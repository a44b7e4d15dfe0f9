"""Server-side user sampling for one round (docs/mechanism.md steps 1-2).

Poisson sampling: every registered user is drawn independently with probability q_u. If more than m_max
are drawn, a uniformly random m_max of them are kept (truncation bounds the sensitivity; the accountant charges
the rare rounds where it acts as delta_trunc: docs/proofs.md section 4). With the entity cap on, the sampled
users are placed into distinct slots 0..m_max-1 by a uniformly random injection; a client may only use entity e in
its slot b if b is one of e's k_cap permitted slots (uedp.privacy.sampling.permitted_slots).

Randomness comes from the caller's `random.Random`: `secrets.SystemRandom()` for private runs, a seeded
`random.Random(seed)` only for reproduction (which the run reports as "not private: fixed seed").

The Poisson coin is decided on integers, like the entity thresholds (uedp.privacy.sampling.threshold): both
`random.Random.random()` and `SystemRandom.random()` return k / 2^53 for a uniform 53-bit integer k, and a
place is drawn iff k < floor(q_u 2^53). Its probability is floor(q_u 2^53) / 2^53 <= q_u, so the accountant's
q_u is an upper bound (`rng.random() < q_u` would draw with ceil(q_u 2^53) / 2^53, up to 2^-53 above q_u);
equal to q_u whenever q_u 2^53 is an integer (every q_u >= 1/2, and every multiple of 2^-53).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from uedp.checks import probability

_BITS = 53  # random.random() returns k / 2**53

@dataclass(frozen=True)
class Cohort:
    """The users sampled in one round and (with the entity cap) their slots; never logged per user."""

    nodes: tuple[int, ...]
    slots: tuple[int, ...] | None  # slots[i] belongs to nodes[i]; None when the entity cap is off
    drawn: int  # users drawn by Poisson sampling before truncation
    truncated: bool

    @property
    def size(self) -> int:
        return len(self.nodes)


def poisson_threshold(q_u: float) -> int:
    """floor(q_u 2^53): a place is drawn iff its 53-bit uniform integer is below it (module docstring)."""
    return math.floor(Fraction(q_u) * (1 << _BITS))


def sample_cohort(
    population: Sequence[int], *, q_u: float, m_max: int, use_slots: bool, rng: random.Random
) -> Cohort:
    probability("q_u", q_u)
    if m_max < 1:
        raise ValueError(f"m_max must be >= 1, got {m_max}")
    t = poisson_threshold(q_u)
    drawn = [node for node in population if int(rng.random() * (1 << _BITS)) < t]
    truncated = len(drawn) > m_max
    kept = rng.sample(drawn, m_max) if truncated else list(drawn)
    rng.shuffle(kept)
    slots = tuple(rng.sample(range(m_max), len(kept))) if use_slots else None
    return Cohort(nodes=tuple(kept), slots=slots, drawn=len(drawn), truncated=truncated)
