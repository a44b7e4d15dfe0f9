"""The detector profiles (uedp/entities/profiles.py, lexicon.py): each lever on sentences made for it, the
registry and identity of `balanced` and `recall`, and their quality on the gold sets' development halves."""

from __future__ import annotations

import pytest

from studies.detectors import SETS, evaluate
from uedp.entities import profiles as P
from uedp.entities.detectors import DETECTORS
from uedp.entities.lexicon import SLANG, extended_first_names, is_word
from uedp.errors import ConfigError


def _found(spans, text):
    return [(text[s:e], c) for s, e, c in spans]


def _balanced():
    return frozenset(P.PROFILES["balanced"])


@pytest.mark.parametrize("token, word", [
    ("Grandma", True), ("carries", True), ("Answering", True), ("Government's", True), ("Repair'd", True),
    ("o'er", True), ("Laertes", False), ("Bassianus", False), ("maddie", False), ("Hewitt", False),
])
def test_dictionary_words_and_names(token, word):
    assert is_word(token) is word


def test_extended_names_hold_nicknames_but_no_dictionary_word():
    names = extended_first_names()
    assert {"maddie", "kev", "dmitri", "elon"} <= names
    assert not names & {"noble", "mate", "duke", "you", "heaven"}
    assert {"omg", "lol", "tbh", "tis"} <= SLANG


@pytest.mark.parametrize("text, ner, kept", [
    ("Library Fines Are A Scam And I Will Die On This Hill", [(0, 13, "PERSON")], []),  # title-cased
    ("Knit night at mine, bring biscuits", [(0, 4, "PERSON")], []),  # sentence-initial ordinary word
    ("light just went off AGAIN, generator time", [(20, 25, "ORG")], []),  # shouted ordinary word
    ("slow cooked lamb, house smells unreal", [(18, 23, "ORG")], []),  # lower-case ordinary word
    ("OMG the skatepark is packed", [(0, 3, "ORG")], []),  # slang, anywhere
    ("Hewitt has now lifted the Sydney title", [(0, 6, "PERSON")], [(0, 6, "PERSON")]),  # not a word
    ("Shares in US phone company rose", [(10, 12, "GPE")], [(10, 12, "GPE")]),  # listed place
    ("I met Tom in Paris", [(6, 9, "PERSON")], [(6, 9, "PERSON")]),  # inside a sentence, listed name
])
def test_precision_filter(text, ner, kept):
    assert P.precision_filter(text, ner, P.gazetteers_for(_balanced())) == kept


def test_retype_by_name_lists_and_the_misc_list():
    g = P.gazetteers_for(_balanced())
    text = "Hewitt won, said Lionel Smith of Moody's, and Clarke bought an iPod"
    ner = [(0, 6, "GPE"), (17, 29, "ORG"), (33, 40, "ORG"), (46, 52, "ORG"), (63, 67, "ORG")]
    assert _found(P.retype(text, ner, g), text) == [
        ("Hewitt", "PERSON"), ("Lionel Smith", "PERSON"), ("Moody's", "ORG"), ("Clarke", "PERSON"), ("iPod", "MISC")]


def test_sports_language_and_dates():
    text = "Beattie scored in the 3-2 win at Liverpool"
    assert P.sports_teams(text, [(33, 42, "GPE")]) == [(33, 42, "ORG")]
    assert P.sports_teams("I moved to Liverpool", [(11, 20, "GPE")]) == [(11, 20, "GPE")]  # no sport: a city
    text = "my portuguese lessons and the portuguese food"
    assert _found(P.language_names(text, [(3, 13, "NORP"), (30, 40, "NORP")]), text) == [
        ("portuguese", "MISC"), ("portuguese", "NORP")]
    text = "cruise in may, back in the 90s, see u tonight, a 29-year-old, 7-10 business days"
    spans = P.more_dates(text, [(38, 45, "DATE"), (49, 60, "DATE")])
    assert _found(spans, text) == [("may", "DATE"), ("the 90s", "DATE"), ("7-10 business days", "DATE")]


def test_capitalized_and_rare_words():
    text = "Hark Tamora, this is the day of doom for Bassianus, Mr Reynolds"
    assert _found(P.capitalized_words(text, [(5, 11, "PERSON")]), text) == [("Bassianus", "PERSON"),
                                                                             ("Reynolds", "PERSON")]
    assert P.capitalized_words("Wig Brushing Is My Cardio Bassianus", []) == []  # title-cased: no information
    text = "flatmate wanted in peckham, must like plants"
    assert _found(P.rare_words(text, []), text) == [("peckham", "MISC")]


def test_profiles_are_registered_with_their_levers_in_the_identity():
    balanced, recall = DETECTORS.create("balanced"), DETECTORS.create("recall")
    assert balanced.identity()["levers"] == list(P.PROFILES["balanced"])
    assert "rare" in recall.identity()["levers"] and "filter" not in recall.identity()["levers"]
    for key in ("profile_version", "lexicon_version", "gazetteer_version", "rules_version", "model"):
        assert key in balanced.identity()
    assert DETECTORS.create("balanced", levers=[]).identity()["levers"] == []
    with pytest.raises(ConfigError, match="levers"):
        DETECTORS.create("balanced", levers=["filter", "magic"])
    with pytest.raises(ConfigError, match="levers"):
        DETECTORS.create("balanced", levers="filter")


def test_no_lever_is_the_ensemble():
    text = "omw to new york w sarah, Lakers game tonight @marcus.t"
    ner = [(25, 31, "ORG")]
    from uedp.entities.informal import ensemble_spans
    from uedp.entities.rules import find_rule_spans, merge_rule_spans

    assert P.profile_spans(text, ner, ()) == merge_rule_spans(ensemble_spans(text, ner), find_rule_spans(text))
    with pytest.raises(ValueError, match="unknown detector levers"):
        P.profile_spans(text, ner, ("magic",))


def test_balanced_beats_the_ensemble_on_every_development_half():
    """On the `valid` halves (where the levers were chosen; the README reports `test`): class-matched overlap
    recall at least the ensemble's on every set and 0.1 higher on the informal one, whose false-flag rate
    falls by 0.08 or more, and overlap precision not lower than the ensemble's less 0.02."""
    results = evaluate(["ensemble", "balanced"], "valid")
    for name in SETS:
        ours, base = results[f"{name}|balanced"], results[f"{name}|ensemble"]
        assert ours["lenient"]["recall"] >= base["lenient"]["recall"], name
        assert ours["lenient"]["precision"] >= base["lenient"]["precision"] - 0.02, name
    ours, base = results["informal|balanced"], results["informal|ensemble"]
    assert ours["lenient"]["recall"] >= base["lenient"]["recall"] + 0.1
    assert ours["flags"]["false_flag_rate"] <= base["flags"]["false_flag_rate"] - 0.08


def test_a_missing_word_list_package_is_named_with_its_install_command(monkeypatch):
    import importlib.util

    from uedp.entities import lexicon
    from uedp.errors import UedpError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nicknames" else real(name, *a))
    lexicon.extended_first_names.cache_clear()
    try:
        with pytest.raises(UedpError, match=r"'nicknames'.*pip install english-words==2.0.2 nicknames==1.0.1"):
            lexicon.extended_first_names()
    finally:
        lexicon.extended_first_names.cache_clear()


@pytest.mark.parametrize("text, expected", [
    ("This may be the best year ever, by may i mean it", []),  # the modal, not the month
    ("cruise to alaska in may, then home", [("alaska", "GPE"), ("may", "DATE")]),
    ("he was 90 years old and a 29-year-old came", []),  # ages are no dates
    ("#nice day #reading #us and #nyc #WorldCup", [("#nyc", "LOC"), ("#WorldCup", "MISC")]),  # words are no tags
    ("and vice versa, an indie band, off to uni", []),  # a name list's entry that is a word or slang
])
def test_reviewed_false_positives(text, expected):
    assert _found(P.profile_spans(text, [], P.PROFILES["balanced"]), text) == expected


def test_the_identity_follows_the_list_files_and_the_packages(tmp_path, monkeypatch):
    """Editing a list file changes every gazetteer detector's identity (the annotation cache key), without a
    version to bump by hand."""
    import shutil

    import uedp.entities.gazetteers as gz

    before = DETECTORS.create("balanced").identity()
    assert {"lists_digest", "faker", "english-words", "nicknames"} <= set(before)
    data = tmp_path / "data"
    shutil.copytree(gz._DATA, data)
    with (data / "misc.txt").open("a") as handle:
        handle.write("Some New Product\n")
    monkeypatch.setattr(gz, "_DATA", data)
    assert DETECTORS.create("balanced").identity()["lists_digest"] != before["lists_digest"]
    assert DETECTORS.create("ensemble").identity()["lists_digest"] != before["lists_digest"]


def test_package_versions_in_the_identity_are_the_installed_ones_or_missing():
    """The identity records each package's installed version, and "missing" for one that is not installed,
    so installing or upgrading a word list changes the cache key."""
    from importlib.metadata import version

    from uedp.versions import package_version

    identity = DETECTORS.create("balanced").identity()
    assert identity["faker"] == version("faker") == package_version("faker")
    assert identity["english-words"] == version("english-words")
    assert package_version("no-such-distribution-uedp") == "missing"
