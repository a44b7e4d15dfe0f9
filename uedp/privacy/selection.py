"""Client-side sentence selection and loss weights for one round (docs/mechanism.md steps 4-5).

A sentence x with entity set ent(x) is used in the round iff
  - ent(x) is non-empty and EVERY e in ent(x) is sampled (h(k, "E", e) < q_e) and, with the entity cap on,
    permitted in the client's slot b (b in permitted_slots(k, e, k_cap, m_max)); or
  - ent(x) is empty and its extended entity (user, sid) is sampled (h(k, "S", user, sid) < q_s).
"Every", not "any": a sentence holding an unsampled entity must not influence the round.

Its loss weight is omega(x) = sum of w_e over ent(x) (sensitive) or w_s (extended); each w_e and w_s must
lie in [0, 1] (default 1; out-of-range weights are refused, not clipped), so omega may exceed 1 for a
sentence with several entities (clients use a weighted-MEAN loss). Unselected sentences get weight 0.

This is the rule of the keyed mechanisms (uedp.privacy.mechanisms, `keyed`); the naive estimator f_E is
the same rule with q_s = 0 (its spec's rates say so). Mechanisms that are not keyed (user-level DP, the
noiseless baselines) use every sentence of the sampled user with weight 1 and never call this module.

The sentence ids (`sids`) name the extended entities: `stable_sids(texts, entities)` computes them from
each sentence alone (a hash of its text, its entity set and its occurrence index among the user's identical
such sentences), so removing any other sentence, or another user, never changes them (docs/proofs.md
section 2). Every caller passes these ids (client/update.py through uedp.prepare.users.UserData.stable_ids).

`select_sentences` hashes each DISTINCT entity of the user once and decides per sentence with numpy;
tests/test_privacy_sampling.py compares it with a slow, obviously-correct reference (plain loops).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from uedp.checks import integer, probability
from uedp.privacy.sampling import (
    TAG_ENTITY,
    TAG_EXTENDED,
    RoundKey,
    as_round_key,
    check_cap,
    check_probability,
    encode,
    extended_entity,
    h_int,
    permitted_slots,
    threshold,
)

EntityWeights = Mapping[str, float] | None  # entity key -> w_e
ExtendedWeights = Mapping[int, float] | float | None  # sid -> w_s, or one w_s for every sentence


@dataclass(frozen=True)
class Selection:
    """`mask[i]`: sentence i is used; `weights[i]`: its loss weight omega (0 where not used)."""

    mask: np.ndarray
    weights: np.ndarray

    @property
    def count(self) -> int:
        return int(self.mask.sum())


@dataclass(frozen=True)
class SelectionParams:
    """The public per-round selection settings a sampled client receives (besides the round key)."""

    q_e: float
    q_s: float
    k_cap: int | None = None
    m_max: int | None = None
    slot: int | None = None

    def __post_init__(self) -> None:
        check_probability("q_e", self.q_e)
        check_probability("q_s", self.q_s)
        check_cap(self.k_cap, self.m_max)
        if self.k_cap is not None:
            slot = integer("slot", self.slot, minimum=0, maximum=self.m_max - 1,
                           note=f"(m_max = {self.m_max}, k_cap set)")
            object.__setattr__(self, "slot", slot)


_SID_TAG = "uedp sentence id"


def stable_sids(texts: Sequence[str], entities: Sequence[Collection[str]]) -> list[int]:
    """Each sentence's id for its extended entity, a function of the sentence alone: the first 63 bits of
    BLAKE2b (unkeyed, 8 bytes) of the prefix-free encoding (uedp.privacy.sampling.encode) of its text, its
    sorted protected entity keys `entities[i]`, and its occurrence index, the number of earlier sentences
    in `texts` with the same text and the same entity set. So removing any other sentence (another owner's,
    or one holding an entity e' that sentence i does not hold) never changes sentence i's id, and identical
    sentences get distinct ids (removing one of them removes the last id; docs/proofs.md section 2 says why no
    neighbouring relation depends on which).

    Ids are ints in [0, 2**63). Two different sentences of one owner colliding (probability about
    n**2 / 2**64 for n sentences) is refused with a ValueError rather than letting them share an S-coin."""
    if len(texts) != len(entities):
        raise ValueError(f"stable_sids: {len(texts)} texts for {len(entities)} entity sets")
    seen: dict[tuple[str, tuple[str, ...]], int] = {}
    ids: list[int] = []
    for i, (text, ents) in enumerate(zip(texts, entities)):
        if not isinstance(text, str):
            raise TypeError(f"stable_sids: texts[{i}] must be str, got {type(text).__name__}")
        if isinstance(ents, str):
            raise TypeError(f"stable_sids: entities[{i}] must be a collection of entity keys, got a str")
        keys = tuple(sorted(set(ents)))
        occurrence = seen.get((text, keys), 0)
        seen[(text, keys)] = occurrence + 1
        digest = hashlib.blake2b(encode(_SID_TAG, text, occurrence, *keys), digest_size=8).digest()
        ids.append(int.from_bytes(digest, "big") >> 1)
    if len(set(ids)) != len(ids):
        raise ValueError("stable_sids: two different sentences' ids collide (a 63-bit hash collision); "
                         "they would share an S-coin")
    return ids


def _weight(name: str, value: float) -> float:
    return probability(name, value)


def _entity_weight(weights: EntityWeights, e: str) -> float:
    return 1.0 if weights is None else _weight(f"entity weight w_e[{e!r}]", weights.get(e, 1.0))


def _extended_weight(weights: ExtendedWeights, sid: int) -> float:
    if weights is None:
        return 1.0
    if isinstance(weights, Mapping):
        return _weight(f"extended weight w_s[{sid}]", weights.get(sid, 1.0))
    return _weight("extended weight w_s", weights)


def _check_inputs(sids: Sequence[int], entities: Sequence[Collection[str]]) -> None:
    if len(sids) != len(entities):
        raise ValueError(f"sids and entities differ in length: {len(sids)} != {len(entities)}")


def select_sentences(
    key: RoundKey | bytes | None,
    *,
    user: str,
    sids: Sequence[int],
    entities: Sequence[Collection[str]],
    params: SelectionParams,
    entity_weights: EntityWeights = None,
    extended_weights: ExtendedWeights = None,
) -> Selection:
    """Selection mask and loss weights of one user's sentences (`entities[i]` = ent(x_i), keys as strings)."""
    _check_inputs(sids, entities)
    n = len(sids)
    if key is None:
        raise ValueError("keyed selection needs the round key")
    key = as_round_key(key)

    # Distinct entities of the user, and each sentence's (deduplicated) entity indices, flattened.
    index: dict[str, int] = {}
    flat: list[int] = []
    owner: list[int] = []
    for i, ents in enumerate(entities):
        if isinstance(ents, str):
            raise TypeError(f"entities[{i}] must be a collection of entity keys, got a str")
        for e in set(ents):
            flat.append(index.setdefault(e, len(index)))
            owner.append(i)

    # One hash per distinct entity (plus k_cap for the slot rule), one weight lookup per distinct entity.
    t_e = threshold(params.q_e, name="q_e")
    ok = np.empty(len(index), dtype=bool)
    w_e = np.empty(len(index), dtype=np.float64)
    for e, j in index.items():
        good = h_int(key, TAG_ENTITY, e) < t_e
        if good and params.k_cap is not None:
            good = params.slot in permitted_slots(key, e, params.k_cap, params.m_max)
        ok[j] = good
        w_e[j] = _entity_weight(entity_weights, e)

    flat_a = np.asarray(flat, dtype=np.int64)
    owner_a = np.asarray(owner, dtype=np.int64)
    sizes = np.bincount(owner_a, minlength=n)
    bad = np.bincount(owner_a, weights=~ok[flat_a], minlength=n)
    omega_sensitive = np.bincount(owner_a, weights=w_e[flat_a], minlength=n)
    sensitive = sizes > 0
    mask = sensitive & (bad == 0)
    weights = np.where(mask, omega_sensitive, 0.0)

    # Extended entities: one hash per entity-free sentence (each has its own identity).
    q_s = params.q_s
    if q_s > 0.0:
        t_s = threshold(q_s, name="q_s")
        for i in np.flatnonzero(~sensitive):
            s = extended_entity(user, sids[i])
            if h_int(key, TAG_EXTENDED, *s) < t_s:
                mask[i] = True
                weights[i] = _extended_weight(extended_weights, s[1])
    return Selection(mask=mask, weights=weights)
