"""Keyed-hash entity sampling, slots and sentence selection (docs/mechanism.md steps 3-5)."""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence

import numpy as np
import pytest
from scipy.stats import binomtest

from uedp.privacy.sampling import (
    RoundKey,
    encode,
    entity_sampled,
    extended_entity,
    extended_sampled,
    h,
    h_int,
    new_round_key,
    permitted_slots,
    threshold,
)
from uedp.privacy.selection import (
    EntityWeights,
    ExtendedWeights,
    Selection,
    SelectionParams,
    select_sentences,
)

P_MIN = 1e-3  # binomial tests: fail only if the observed count has p-value < 1e-3


def select_sentences_reference(key: RoundKey | bytes | None, *, user: str, sids: Sequence[int],
                               entities: Sequence[Collection[str]], params: SelectionParams,
                               entity_weights: EntityWeights = None,
                               extended_weights: ExtendedWeights = None) -> Selection:
    """Slow, obviously-correct reference of uedp.privacy.selection.select_sentences (plain loops)."""
    assert len(sids) == len(entities)
    mask, weights = [], []
    for sid, ents in zip(sids, entities):
        ents = set(ents)
        if ents:
            used = all(entity_sampled(key, e, params.q_e) for e in ents)
            if params.k_cap is not None:
                used = used and all(
                    params.slot in permitted_slots(key, e, params.k_cap, params.m_max) for e in ents
                )
            w = sum(1.0 if entity_weights is None else float(entity_weights.get(e, 1.0)) for e in ents)
        else:
            used = extended_sampled(key, extended_entity(user, sid), params.q_s)
            w = (1.0 if extended_weights is None else float(extended_weights.get(sid, 1.0))
                 if isinstance(extended_weights, dict) else float(extended_weights))
        mask.append(used)
        weights.append(w if used else 0.0)
    return Selection(mask=np.asarray(mask, dtype=bool), weights=np.asarray(weights, dtype=np.float64))


def keys(n: int, seed: int) -> list[RoundKey]:
    rng = random.Random(seed)
    return [RoundKey(rng.randbytes(16)) for _ in range(n)]


# -- keyed hash ------------------------------------------------------------------------------------
def test_encoding_is_unambiguous() -> None:
    assert encode("E", "ab", "c") != encode("E", "a", "bc")
    assert encode("E", "1") != encode("E", 1)
    assert encode("Ex") != encode("E", "x")
    assert encode("S", "u", 12) != encode("S", "u1", 2)
    key = keys(1, 0)[0]
    assert h_int(key, "E", "ab", "c") != h_int(key, "E", "a", "bc")
    # Prefix-freeness over many random tuples: distinct tuples, distinct encodings.
    rng = random.Random(1)
    alphabet = ["", "a", "b", ":", "ab", 0, 1, -1, 256, "0"]
    tuples = {tuple(rng.choice(alphabet) for _ in range(rng.randint(0, 4))) for _ in range(3000)}
    assert len({encode("T", *t) for t in tuples}) == len(tuples)
    with pytest.raises(TypeError):
        encode("E", True)
    with pytest.raises(TypeError):
        encode("E", 1.5)


def test_hash_is_keyed_and_deterministic() -> None:
    material = bytes(range(16))
    a, b = RoundKey(material), RoundKey(bytes(material))
    assert (
        h_int(a, "E", "PERSON:david") == h_int(b, "E", "PERSON:david") == h_int(material, "E", "PERSON:david")
    )
    assert 0 <= h_int(a, "E", "x") < 2**64 and 0.0 <= h(a, "E", "x") < 1.0
    other = RoundKey(bytes(range(1, 17)))
    assert h_int(a, "E", "PERSON:david") != h_int(other, "E", "PERSON:david")
    assert h_int(a, "E", "PERSON:david") != h_int(a, "S", "PERSON:david")


def test_round_key_is_never_shown() -> None:
    key = new_round_key()
    material = key.to_bytes()
    assert len(material) == 16 and new_round_key() != key and RoundKey(material) == key
    for text in (repr(key), str(key), f"{key}", repr([key]), repr({"k": key})):
        assert material.hex() not in text and repr(material) not in text and "redacted" in text
    with pytest.raises(ValueError):
        RoundKey(b"short")
    with pytest.raises(TypeError):
        RoundKey("0123456789abcdef")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        hash(key)


def test_threshold_is_exact() -> None:
    assert threshold(0.0) == 0 and threshold(1.0) == 2**64 and threshold(0.5) == 2**63
    key = keys(1, 2)[0]
    for e in (f"PERSON:{i}" for i in range(200)):
        assert entity_sampled(key, e, 0.0) is False and entity_sampled(key, e, 1.0) is True
        assert entity_sampled(key, e, 0.37) == (h(key, "E", e) < 0.37)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError):
            entity_sampled(key, "x", bad)


@pytest.mark.parametrize("q", [0.02, 0.3, 0.5, 0.9])
def test_sampling_frequency_matches_q_over_keys(q: float) -> None:
    n = 20_000
    hits = sum(entity_sampled(k, "PERSON:david johnson", q) for k in keys(n, seed=int(q * 1000)))
    assert binomtest(hits, n, q).pvalue > P_MIN


@pytest.mark.parametrize("q", [0.1, 0.5])
def test_sampling_frequency_matches_q_over_entities_and_extended(q: float) -> None:
    key, n = keys(1, 7)[0], 20_000
    hits_e = sum(entity_sampled(key, f"ORG:company {i}", q) for i in range(n))
    hits_s = sum(extended_sampled(key, extended_entity(f"user{i % 50}", i), q) for i in range(n))
    assert binomtest(hits_e, n, q).pvalue > P_MIN and binomtest(hits_s, n, q).pvalue > P_MIN


def test_two_clients_agree_on_every_entity() -> None:
    material = keys(1, 3)[0].to_bytes()
    client_a, client_b = RoundKey(bytes(material)), RoundKey(bytes(material))  # separate objects
    entities = [f"GPE:city {i}" for i in range(3000)]
    a = [entity_sampled(client_a, e, 0.4) for e in entities]
    b = [entity_sampled(client_b, e, 0.4) for e in reversed(entities)][::-1]
    assert a == b and 0 < sum(a) < len(a)
    assert [permitted_slots(client_a, e, 3, 20) for e in entities[:300]] == [
        permitted_slots(client_b, e, 3, 20) for e in entities[:300]
    ]


def test_permitted_slots() -> None:
    key = keys(1, 4)[0]
    for i in range(300):
        slots = permitted_slots(key, f"PERSON:{i}", 3, 10)
        assert 1 <= len(slots) <= 3 and slots <= set(range(10))
    with pytest.raises(ValueError):
        permitted_slots(key, "x", 0, 10)
    with pytest.raises(ValueError):
        permitted_slots(key, "x", 2, None)  # type: ignore[arg-type]


# -- selection -------------------------------------------------------------------------------------
def random_user(rng: random.Random, user: str, n: int, pool: list[str]) -> tuple[list[int], list[list[str]]]:
    sids = [rng.randrange(10**9) for _ in range(n)]
    ents = [rng.sample(pool, rng.choice([0, 0, 1, 1, 2, 3, 5])) for _ in range(n)]
    return sids, ents


@pytest.mark.parametrize(
    "params",
    [
        SelectionParams(q_e=0.5, q_s=0.3),
        SelectionParams(q_e=0.8, q_s=0.0),  # the naive f_E: its spec's rates give q_s = 0
        SelectionParams(q_e=0.9, q_s=0.5, k_cap=2, m_max=6, slot=4),
        SelectionParams(q_e=1.0, q_s=1.0, k_cap=1, m_max=3, slot=0),
        SelectionParams(q_e=0.0, q_s=0.0),
    ],
)
def test_fast_selection_matches_reference(params: SelectionParams) -> None:
    rng = random.Random(5)
    pool = [f"PERSON:p{i}" for i in range(40)] + [f"ORG:o{i}" for i in range(20)]
    weights = {e: rng.random() for e in pool[::3]}
    for trial in range(15):
        key = RoundKey(rng.randbytes(16))
        sids, ents = random_user(rng, f"u{trial}", 60, pool)
        ext_w = {sid: rng.random() for sid in sids[::2]}
        kwargs = dict(user=f"u{trial}", sids=sids, entities=ents, params=params)
        fast = select_sentences(key, **kwargs, entity_weights=weights, extended_weights=ext_w)
        slow = select_sentences_reference(key, **kwargs, entity_weights=weights, extended_weights=ext_w)
        np.testing.assert_array_equal(fast.mask, slow.mask)
        # each weight a sum of a few entity weights, summed in another order: a few ulps, so rtol 1e-12
        np.testing.assert_allclose(fast.weights, slow.weights, rtol=1e-12)
        if params.q_s == 0.0:  # no extended entity: an entity-free sentence is never used
            assert not any(m for m, e in zip(fast.mask, ents) if not e)


def test_every_entity_must_be_sampled() -> None:
    key = keys(1, 6)[0]
    ents = [f"PERSON:{i}" for i in range(500)]
    sampled = [e for e in ents if entity_sampled(key, e, 0.5)]
    unsampled = [e for e in ents if not entity_sampled(key, e, 0.5)]
    sentences = [[sampled[0]], [sampled[0], unsampled[0]], [unsampled[1]], [sampled[1], sampled[2]], []]
    params = SelectionParams(q_e=0.5, q_s=0.0)
    sel = select_sentences(key, user="u", sids=list(range(5)), entities=sentences, params=params)
    assert sel.mask.tolist() == [True, False, False, True, False]
    assert sel.weights.tolist() == [1.0, 0.0, 0.0, 2.0, 0.0]  # omega = sum of w_e (default 1)


def test_round_key_and_weight_validation() -> None:
    with pytest.raises(ValueError, match="round key"):
        select_sentences(None, user="u", sids=[1], entities=[["PERSON:a"]], params=SelectionParams(q_e=1, q_s=1))
    key = keys(1, 8)[0]
    params = SelectionParams(q_e=1.0, q_s=1.0)
    with pytest.raises(ValueError, match="w_e"):
        select_sentences(key, user="u", sids=[1], entities=[["PERSON:a"]], params=params,
                         entity_weights={"PERSON:a": 1.5})  # fmt: skip
    with pytest.raises(ValueError, match="w_s"):
        select_sentences(key, user="u", sids=[1], entities=[[]], params=params, extended_weights=-0.1)
    with pytest.raises(ValueError, match="slot"):
        SelectionParams(q_e=0.5, q_s=0.5, k_cap=2, m_max=5, slot=None)
    with pytest.raises(ValueError, match="q_e"):
        SelectionParams(q_e=1.2, q_s=0.5)


def test_extended_selection_frequency() -> None:
    key, n = keys(1, 9)[0], 20_000
    sel = select_sentences(key, user="alice", sids=list(range(n)), entities=[[]] * n,
                           params=SelectionParams(q_e=0.5, q_s=0.2))  # fmt: skip
    assert binomtest(sel.count, n, 0.2).pvalue > P_MIN


def test_entity_cap_bounds_clients_per_entity() -> None:
    """One simulated round: m_max users in distinct slots, many sharing entities; with the cap, no entity
    is used by more than k_cap clients; without it, some is (so the check can fail)."""
    rng = random.Random(10)
    m_max, k_cap = 30, 2
    pool = [f"PERSON:shared {i}" for i in range(15)]
    users = {f"u{i}": random_user(rng, f"u{i}", 40, pool) for i in range(m_max)}
    slots = dict(zip(users, rng.sample(range(m_max), m_max)))

    def users_per_entity(k_cap_: int | None, key: RoundKey) -> dict[str, int]:
        count: dict[str, int] = {}
        for user, (sids, ents) in users.items():
            params = SelectionParams(q_e=1.0, q_s=0.0, k_cap=k_cap_, m_max=m_max,
                                     slot=slots[user] if k_cap_ else None)  # fmt: skip
            sel = select_sentences(key, user=user, sids=sids, entities=ents, params=params)
            for e in {e for used, es in zip(sel.mask, ents) if used for e in es}:
                count[e] = count.get(e, 0) + 1
        return count

    for key in keys(5, 11):
        capped = users_per_entity(k_cap, key)
        assert capped and max(capped.values()) <= k_cap
    assert max(users_per_entity(None, keys(1, 12)[0]).values()) > k_cap
