"""Extended-entity ids that no other sentence or user changes, and seeds drawn for every sampled place.

With the round key revealed (a colluding client), a user's S-coins h(k, "S", user, sid) are public
functions of its sids: they must not move when another user u' leaves the corpus (the corpus's own `sid`
column, a global row index, does), nor when another sentence of the same user is removed. And a fixed-seed
run's training seeds must not shift with which places are empty (uedp.flower.plan).
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from client.update import select
from tests.helpers import tiny_config
from uedp.flower.places import Assignment
from uedp.flower.plan import MechanismSettings, plan_round
from uedp.flower.selection import select_rows, stable_sids
from uedp.owner_files import write_one_file
from uedp.pipeline import load_user_data, prepare
from uedp.privacy import mechanisms
from uedp.privacy.sampling import TAG_EXTENDED, RoundKey, extended_entity, h_int
from uedp.protocol import RoundInstructions

KEY = RoundKey(bytes(range(16)))  # the revealed round key


def _ins(*, q_e: float = 0.5, q_s: float = 0.5, key: RoundKey = KEY) -> RoundInstructions:
    return RoundInstructions(round=1, mechanism="uedp", q_e=q_e, q_s=q_s, k_cap=0, m_max=4, slot=-1, beta=0.5,
                             w_u=1.0, private=True, key=key)


# -- the ids ------------------------------------------------------------------------------------------------------
TEXTS = ["the weather was fine", "I met Alice in Paris", "the weather was fine", "see you soon",
         "I met Alice in Paris", "the weather was fine"]
ENTS = [set(), {"PERSON:alice", "GPE:paris"}, set(), set(), {"PERSON:alice", "GPE:paris"}, set()]


def _by_row(texts, ents) -> dict[int, int]:
    return dict(enumerate(stable_sids(texts, ents)))


def test_ids_are_distinct_non_negative_63_bit_ints_the_hash_encodes():
    ids = stable_sids(TEXTS, ENTS)
    assert len(set(ids)) == len(ids)  # the three identical entity-free sentences too
    assert all(type(i) is int and 0 <= i < 2**63 for i in ids)
    assert stable_sids(TEXTS, ENTS) == ids  # a function of its input
    for i in ids:  # the keyed hash's encoding (signed big-endian ints) takes them
        h_int(KEY, TAG_EXTENDED, *extended_entity("node 1: alice", i))


@pytest.mark.parametrize("removed", range(len(TEXTS)))
def test_removing_a_sentence_changes_no_other_id_but_a_later_identical_copy(removed):
    """Every sentence keeps its id, except a LATER copy of the removed sentence (same text, same entities),
    which takes the removed one's: the two are indistinguishable, so removing one is removing the last."""
    before = _by_row(TEXTS, ENTS)
    kept = [i for i in range(len(TEXTS)) if i != removed]
    after = stable_sids([TEXTS[i] for i in kept], [ENTS[i] for i in kept])
    copies = [i for i in range(len(TEXTS)) if (TEXTS[i], ENTS[i]) == (TEXTS[removed], ENTS[removed])]
    moved = {i for i, new in zip(kept, after) if new != before[i]}
    assert moved == {i for i in copies if i > removed}  # each later copy moves down one occurrence
    assert set(after) == set(before.values()) - {before[copies[-1]]}  # the ids lose exactly the last copy's


def test_removing_a_sentence_holding_an_entity_leaves_an_identical_text_without_it_alone():
    """Annotations per row (gold spans) may give identical texts different entity sets: removing the copy
    that holds e' must not renumber the entity-free copy (the occurrence index counts same text AND set)."""
    texts = ["Paris is lovely", "Paris is lovely"]
    before = stable_sids(texts, [{"GPE:paris"}, set()])
    assert stable_sids(texts[1:], [set()]) == before[1:]


def test_refuses_mismatched_or_mistyped_inputs():
    with pytest.raises(ValueError, match="2 texts for 1 entity sets"):
        stable_sids(["a", "b"], [set()])
    with pytest.raises(TypeError, match=r"texts\[0\] must be str"):
        stable_sids([b"a"], [set()])
    with pytest.raises(TypeError, match=r"entities\[0\] must be a collection"):
        stable_sids(["a"], ["PERSON:alice"])


def test_select_rows_with_stable_ids_keeps_a_sentence_s_coin_when_another_is_removed():
    """The component's path: a node's coins with `sids=stable_sids(...)` survive removing an earlier sentence;
    with row numbers (0..n-1) they move, which is why a keyed mechanism refuses a call without sids."""
    texts = [f"entity free sentence number {i}" for i in range(60)]
    ents = [set() for _ in texts]
    ins = _ins()
    rows, _ = select_rows(ins, owner="o", entities=ents, sids=stable_sids(texts, ents))
    rows2, _ = select_rows(ins, owner="o", entities=ents[1:], sids=stable_sids(texts[1:], ents[1:]))
    assert [texts[i] for i in rows if i != 0] == [texts[1:][i] for i in rows2]
    plain, _ = select_rows(ins, owner="o", entities=ents, sids=list(range(60)))
    plain2, _ = select_rows(ins, owner="o", entities=ents[1:], sids=list(range(59)))
    assert [texts[i] for i in plain if i != 0] != [texts[1:][i] for i in plain2]
    with pytest.raises(ValueError, match=r"pass sids=stable_sids\(texts, entities\)"):
        select_rows(ins, owner="o", entities=ents)


# -- a corpus with and without one user, through the real pipeline ------------------------------------------------
@pytest.fixture(scope="module")
def two_corpora(tmp_path_factory) -> dict:
    """Corpus D (6 synthetic users) and D' = D without user_0001, each prepared as a run prepares it."""
    root = tmp_path_factory.mktemp("stable-sids")
    full = root / "full.jsonl"
    write_one_file(full, dataset="synthetic", options={"num_users": 6, "min_sentences": 20, "max_sentences": 30},
                   splits=("train", "valid", "test"))
    lines = full.read_text().splitlines()
    gone = "user_0001"
    without = root / "without.jsonl"
    without.write_text("\n".join(x for x in lines if json.loads(x)["user"] != gone) + "\n")
    cfgs = {}
    for name, path in (("D", full), ("D'", without)):
        options = {"path": str(path), "sentence_split": False}
        cfg = tiny_config(root / name, dataset={"name": "jsonl", "options": options}, entities={"detector": "gold"})
        cfgs[name] = (cfg, prepare(cfg).users)
    assert gone in cfgs["D"][1] and gone not in cfgs["D'"][1]
    return {"cfgs": cfgs, "gone": gone}


def test_removing_a_user_leaves_every_other_users_coins_and_selection(two_corpora):
    (cfg, users), (cfg2, users2) = two_corpora["cfgs"]["D"], two_corpora["cfgs"]["D'"]
    assert users2 == [u for u in users if u != two_corpora["gone"]]
    renumbered = 0
    keys = [KEY, RoundKey(bytes(16)), RoundKey(b"\xff" * 16)]
    for pid2, user in enumerate(users2):
        a, b = load_user_data(cfg, users.index(user)), load_user_data(cfg2, pid2)
        assert a.user == b.user == user and a.entities == b.entities
        assert a.stable_ids.tolist() == b.stable_ids.tolist()
        renumbered += int(not np.array_equal(a.sids, b.sids))  # the corpus's row ids do move
        free = np.array([not e for e in a.entities])
        assert free.any()
        for key in keys:
            ins = _ins(key=key)
            coins = [h_int(key, TAG_EXTENDED, *extended_entity(a.user, int(s))) for s in a.stable_ids[free]]
            assert coins == [h_int(key, TAG_EXTENDED, *extended_entity(b.user, int(s))) for s in b.stable_ids[free]]
            rows_a, w_a = select(a, ins)
            rows_b, w_b = select(b, ins)
            assert rows_a.tolist() == rows_b.tolist() and w_a.tolist() == w_b.tolist()
    assert renumbered >= 3  # every user after user_0001: the old rule (corpus row ids) would have moved their coins


def test_the_old_rule_would_have_shown_the_removed_user(two_corpora):
    """The control: with the corpus's row ids as the coins' ids (the rule before), some later user's
    selection differs between D and D' under a revealed key, which the test above would have caught."""
    (cfg, users), (cfg2, users2) = two_corpora["cfgs"]["D"], two_corpora["cfgs"]["D'"]
    differs = False
    for pid2, user in enumerate(users2):
        a, b = load_user_data(cfg, users.index(user)), load_user_data(cfg2, pid2)
        rows_a, _ = select_rows(_ins(), owner=a.user, entities=a.entities, sids=a.sids.tolist())
        rows_b, _ = select_rows(_ins(), owner=b.user, entities=b.entities, sids=b.sids.tolist())
        differs |= rows_a.tolist() != rows_b.tolist()
    assert differs


# -- plan_round: a training seed for every sampled place --------------------------------------------------------
def _settings(*, seeded: bool, places: int = 6) -> MechanismSettings:
    return MechanismSettings(spec=mechanisms.get("uedp"), places=places, q_u=1.0, q_e=0.5, q_s=0.5, m_max=8,
                             k_cap=None, m_max_sent=8, beta=0.5, w_max=1.0, gamma=0.0, z=1.0, denominator=6.0,
                             noise="philox_fixed_seed", seeded=seeded)


def _seeds(settings: MechanismSettings, nodes: tuple[int | None, ...], seed: int) -> tuple[list[int], dict[int, int]]:
    plan = plan_round(1, settings=settings, record=settings.record(1), assignment=Assignment(nodes),
                      rng=random.Random(seed))
    return list(plan.cohort.nodes), {a.place: a.instructions.seed for a in plan}


@pytest.mark.parametrize("empty", range(6))
def test_a_seeded_plan_gives_connected_places_the_same_seeds_whether_another_is_empty(empty):
    settings = _settings(seeded=True)
    full = tuple(range(10, 16))
    order, seeds = _seeds(settings, full, seed=5)
    order2, seeds2 = _seeds(settings, tuple(None if p == empty else n for p, n in enumerate(full)), seed=5)
    assert order == order2 and sorted(order) == list(range(6))  # q_u 1: every place sampled
    assert seeds2 == {p: s for p, s in seeds.items() if p != empty}
    assert all(0 <= s < 2**31 for s in seeds.values()) and len(set(seeds.values())) > 1


def test_a_seeded_plan_draws_the_same_after_it_whatever_is_empty():
    """The next draw on the run's rng (the next round's cohort) does not depend on which places are empty."""
    settings = _settings(seeded=True)
    rngs = []
    for nodes in (tuple(range(6)), (0, None, 2, None, 4, 5)):
        rng = random.Random(9)
        plan_round(1, settings=settings, record=settings.record(1), assignment=Assignment(nodes), rng=rng)
        rngs.append(rng.random())
    assert rngs[0] == rngs[1]


def test_an_unseeded_plan_draws_no_seed():
    settings = _settings(seeded=False)
    _, seeds = _seeds(settings, (0, None, 2, 3, 4, 5), seed=5)
    assert set(seeds.values()) == {-1} and len(seeds) == 5
