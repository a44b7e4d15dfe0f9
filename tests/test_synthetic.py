"""The synthetic corpus: determinism, shape, exact gold spans, Zipf-shared entities, canaries."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

import pytest

from uedp.categories import CATEGORIES, entity_key
from uedp.data.corpus import SPLITS, Corpus
from uedp.data.loaders import LOADERS, load_corpus
from uedp.data.synthetic import CANARY_SPACE, TEMPLATES, TOPICS, canary_candidates, load_synthetic
from uedp.errors import ConfigError

SHAPES = {
    "PERSON": re.compile(r"[A-Z][A-Za-z'-]+( [A-Z][A-Za-z'-]+)+"),
    "ORG": re.compile(r"[A-Z][^,]*"),
    "GPE": re.compile(r"[A-Z][A-Za-z]+([ -][A-Z][A-Za-z]+)*"),
    "DATE": re.compile(r"(January|February|March|April|May|June|July|August|September|October|November|"
                       r"December) [1-9]\d?, (19|20)\d\d"),
    "PHONE": re.compile(r"\([2-9]\d\d\) \d{3}-\d{4}"),
    "EMAIL": re.compile(r"[a-z.-]+@[a-z]+\.[a-z]+"),
    "ID": re.compile(r"\d{3}-\d{2}-\d{4}"),
    "CARD": re.compile(r"4\d{3}( \d{4}){3}"),
    "URL": re.compile(r"https://www\.[a-z-]+\.(com|net|org|io)"),
}
SECRET = re.compile(r"\d{4}-\d{4}")


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return load_synthetic(num_users=40, seed=3)


@pytest.fixture(scope="module")
def rows(corpus: Corpus) -> list[dict]:
    return corpus.table.to_pylist()


def test_same_seed_same_corpus_other_seed_differs() -> None:
    a, b = load_synthetic(num_users=8, seed=11), load_synthetic(num_users=8, seed=11)
    c = load_synthetic(num_users=8, seed=12)
    assert a.fingerprint() == b.fingerprint()
    assert a.meta == b.meta
    assert a.fingerprint() != c.fingerprint()
    assert a.table.column("text").to_pylist() != c.table.column("text").to_pylist()


def test_users_and_sentence_counts(corpus: Corpus, rows: list[dict]) -> None:
    assert corpus.users() == [f"user_{i:04d}" for i in range(40)]
    counts = Counter(r["user"] for r in rows)
    assert all(20 <= n <= 150 for n in counts.values())
    assert len(set(counts.values())) > 10  # sizes vary between users
    small = load_synthetic(num_users=12, min_sentences=3, max_sentences=5, seed=1)
    assert set(Counter(small.table.column("user").to_pylist()).values()) <= {3, 4, 5}
    assert small.users()[-1] == "user_0011"


def test_splits_follow_fractions(rows: list[dict]) -> None:
    share = Counter(r["split"] for r in rows)
    assert set(share) == set(SPLITS)
    assert abs(share["train"] / len(rows) - 0.8) < 0.03
    only_train = load_synthetic(num_users=5, seed=0, split_fractions=(1.0, 0.0, 0.0))
    assert set(only_train.table.column("split").to_pylist()) == {"train"}


def test_topics_labels_and_templates(corpus: Corpus, rows: list[dict]) -> None:
    assert corpus.label_names == TOPICS and len(TOPICS) == 4
    assert sum(len(t) for t in TEMPLATES.values()) >= 30
    assert all(len(TEMPLATES[t]) >= 8 for t in TOPICS)
    assert {r["label"] for r in rows} == {0, 1, 2, 3}
    corpus.require_labels()
    # Recover each sentence's template: replace its gold spans by a marker.
    skeletons = set()
    for r in rows:
        text, gold = r["text"], sorted(r["gold"], key=lambda g: g["start"])
        if gold:
            pieces, last = [], 0
            for g in gold:
                pieces += [text[last:g["start"]], "{}"]
                last = g["end"]
            skeletons.add("".join(pieces) + text[last:])
    assert len(skeletons) >= 30
    # Users differ in their topic mix (per-user Dirichlet): not every user writes evenly about all topics.
    per_user: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        per_user[r["user"]][r["label"]] += 1
    top_share = [max(c.values()) / sum(c.values()) for c in per_user.values()]
    assert max(top_share) > 0.5


def test_no_entity_sentences_are_frequent_and_varied(rows: list[dict]) -> None:
    free = [r["text"] for r in rows if not r["gold"]]
    assert len(free) / len(rows) >= 0.30
    assert abs(len(free) / len(rows) - 0.35) < 0.03
    assert len(set(free)) >= 0.6 * len(free)
    none = load_synthetic(num_users=5, seed=0, no_entity_fraction=0.0)
    assert all(r for r in none.table.column("gold").to_pylist())


def test_gold_spans_are_exact_and_well_shaped(corpus: Corpus, rows: list[dict]) -> None:
    assert corpus.has_gold
    seen = Counter()
    for r in rows:
        text, spans = r["text"], sorted(r["gold"], key=lambda g: g["start"])
        for g in spans:
            surface = text[g["start"]:g["end"]]
            assert surface and surface == surface.strip(), (text, g)
            assert g["category"] in CATEGORIES
            assert SHAPES[g["category"]].fullmatch(surface), (g["category"], surface)
            seen[g["category"]] += 1
        for a, b in zip(spans, spans[1:]):
            assert a["end"] <= b["start"], text
    assert {"PERSON", "ORG", "GPE", "DATE", "PHONE", "EMAIL", "ID", "CARD", "URL"} <= set(seen)
    assert "@" in next(r["text"] for r in rows if any(g["category"] == "EMAIL" for g in r["gold"]))


def _entity_users(rows: list[dict]) -> dict[str, set[str]]:
    users: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        for g in r["gold"]:
            if g["category"] in ("PERSON", "ORG", "GPE", "DATE"):
                users[entity_key(g["category"], r["text"][g["start"]:g["end"]])].add(r["user"])
    return users


def test_shared_entities_are_zipf_skewed(rows: list[dict]) -> None:
    spread = sorted(len(u) for u in _entity_users(rows).values())
    median = spread[len(spread) // 2]
    assert spread[-1] >= 20  # the most popular entity is in at least half of the 40 users
    assert spread[-1] >= 5 * median
    assert sum(n >= 2 for n in spread) >= 50
    assert sum(n == 1 for n in spread) >= 50  # and many entities are private to one user
    # A steeper Zipf exponent concentrates the mass on the head entities.
    flat = load_synthetic(num_users=40, seed=3, zipf_exponent=0.3).table.to_pylist()
    flat_spread = sorted(len(u) for u in _entity_users(flat).values())
    assert sum(n >= 2 for n in flat_spread) > sum(n >= 2 for n in spread)


def test_canaries_are_planted_in_the_requested_number_of_users() -> None:
    corpus = load_synthetic(num_users=20, seed=5, canary_users=(1, 2, 4, 8), canary_seed=9)
    canaries = corpus.meta["canaries"]
    json.dumps(corpus.meta)
    assert [c["frequency"] for c in canaries] == [1, 2, 4, 8]
    rows = corpus.table.to_pylist()
    secrets = {c["secret"] for c in canaries}
    assert len(secrets) == 4
    for c in canaries:
        assert c["space"] == CANARY_SPACE and SECRET.fullmatch(c["secret"])
        assert c["text"].startswith(c["prefix"]) and c["text"][len(c["prefix"]):].startswith(c["secret"])
        hits = [r for r in rows if c["secret"] in r["text"]]
        assert all(r["text"] == c["text"] and r["split"] == "train" for r in hits)
        assert sorted(r["user"] for r in hits) == sorted(c["users"])
        assert len(set(c["users"])) == c["frequency"]
        gold = {(c["text"][g["start"]:g["end"]], g["category"]) for g in hits[0]["gold"]}
        assert gold == {(c["prefix"].split("'s ")[0], "PERSON"), (c["secret"], "ID")}
    # Nothing else in the corpus has the secret's shape.
    others = [r["text"] for r in rows if r["text"] not in {c["text"] for c in canaries}]
    assert not any(re.search(r"(?<!\d)\d{4}-\d{4}(?!\d)", t) for t in others)


def test_canaries_leave_the_rest_of_the_corpus_unchanged() -> None:
    def body(c: Corpus) -> list[tuple]:
        texts = {k["text"] for k in c.meta["canaries"]}
        return [(r["user"], r["text"], r["label"], r["split"], r["gold"]) for r in c.table.to_pylist()
                if r["text"] not in texts]

    plain = load_synthetic(num_users=10, seed=2)
    a = load_synthetic(num_users=10, seed=2, canary_users=(3,), canary_seed=1)
    b = load_synthetic(num_users=10, seed=2, canary_users=(3,), canary_seed=2)
    assert body(a) == body(plain) == body(b)
    assert a.num_sentences == plain.num_sentences + 3
    assert a.meta["canaries"][0]["secret"] != b.meta["canaries"][0]["secret"]


def test_canary_candidates() -> None:
    cands = canary_candidates("dddd-dddd", 500, seed=1)
    assert len(cands) == len(set(cands)) == 500
    assert all(SECRET.fullmatch(x) for x in cands)
    assert cands == canary_candidates("dddd-dddd", 500, seed=1)
    assert cands != canary_candidates("dddd-dddd", 500, seed=2)
    assert set(canary_candidates("dd", 90, seed=0, exclude=[f"{i:02d}" for i in range(10)])) == {
        f"{i}" for i in range(10, 100)}
    first_digits = Counter(x[0] for x in cands)
    assert len(first_digits) == 10 and max(first_digits.values()) < 80  # uniform: ~50 each
    with pytest.raises(ValueError):
        canary_candidates("dd", 101, seed=0)


def test_registry_and_option_errors() -> None:
    corpus = load_corpus("synthetic", num_users=5)
    assert corpus.name == "synthetic" and corpus.num_users == 5
    assert LOADERS.create("synthetic", num_users=5).fingerprint() == corpus.fingerprint()
    with pytest.raises(ConfigError, match="num_user"):
        load_corpus("synthetic", num_user=5)
    bad = [{"num_users": 0}, {"min_sentences": 10, "max_sentences": 5}, {"no_entity_fraction": 1.5},
           {"canary_users": (6,), "num_users": 5}, {"canary_users": ("x",)}, {"zipf_exponent": 0},
           {"split_fractions": (0.5, 0.5)}, {"locale": "xx_XX"}]
    for options in bad:
        with pytest.raises(ConfigError, match="synthetic"):
            load_synthetic(**options)


@pytest.mark.slow
def test_generates_the_requested_size_at_scale() -> None:
    """1200 users give ~100k sentences, every user within the requested bounds, with the canaries planted
    (the generator's speed: python -m experiments.benchmark --only caches)."""
    corpus = load_synthetic(num_users=1200, seed=0, canary_users=(1, 2, 4, 8))
    counts = Counter(corpus.table.column("user").to_pylist())
    assert corpus.num_users == 1200 and sorted(counts) == corpus.users()
    assert all(20 <= n <= 150 for n in counts.values())
    assert corpus.num_sentences == sum(counts.values()) >= 95_000
    assert [c["frequency"] for c in corpus.meta["canaries"]] == [1, 2, 4, 8]
