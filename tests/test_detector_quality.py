"""The ensemble detector for real, informal text: its gazetteers and rules, and its quality on the
hand-labelled gold sets (tests/assets/ner_gold, docs/ner-gold.md) against spacy+rules."""

from __future__ import annotations

import pytest

from studies.detectors import SETS, evaluate, gold_split
from uedp.entities.gazetteers import GAZETTEERS, common_phrases
from uedp.entities.informal import clean_span, date_spans, handle_spans


def _found(spans, text):
    return [(text[s:e], c) for s, e, c in spans]


def test_gazetteers_find_lower_cased_names_places_and_organizations():
    text = "omw to new york w sarah, lakers game tonight"
    assert _found(GAZETTEERS.spans(text), text) == [("new york", "GPE"), ("sarah", "PERSON"), ("lakers", "ORG")]
    text = "i told mary ann smith about medellin and the somali place near heathrow"
    assert _found(GAZETTEERS.spans(text), text) == [("mary ann smith", "PERSON"), ("medellin", "GPE"),
                                                    ("somali", "NORP"), ("heathrow", "LOC")]


def test_common_words_are_not_names():
    """Phrases seen lower-cased in public news text are ordinary words, however they are listed."""
    common = common_phrases()
    assert {"of", "to", "bill"} <= common and "sarah" not in common
    text = "Of all the bills, the will to pay them is what I lack."
    assert GAZETTEERS.spans(text) == []


def test_a_title_is_not_part_of_the_name():
    text = "Will you call Dr. Patel tomorrow?"
    assert _found(GAZETTEERS.spans(text), text) == [("Patel", "PERSON")]
    assert clean_span("ask prof adebayo's notes", (4, 18, "PERSON")) == (9, 16, "PERSON")
    assert clean_span("at trader joe's", (3, 15, "ORG")) == (3, 13, "ORG")


def test_handles_and_hashtags():
    text = "@tmobile no signal, @marcus.t help, #Lakers won #blessed"
    assert _found(handle_spans(text), text) == [("@tmobile", "ORG"), ("@marcus.t", "PERSON"), ("#Lakers", "ORG")]
    assert handle_spans("mail me at ann@example.com") == []


@pytest.mark.parametrize("text, dates", [
    ("mums 60th next saturday at the crown", ["next saturday"]),
    ("lebanese food this sat!!! come hungry", ["this sat"]),
    ("road trip aug 2-9 and back on friday", ["aug 2-9", "friday"]),
    ("see u tmrw, diwali at 6", ["tmrw", "diwali"]),
    ("the meeting is at 6 pm", []),
])
def test_informal_dates(text, dates):
    assert [text[s:e] for s, e, _ in date_spans(text)] == dates


def test_gold_sets_are_valid_and_split_in_halves():
    for name in SETS:
        valid, test = gold_split(name, "valid"), gold_split(name, "test")
        assert valid.num_sentences >= 60 and test.num_sentences >= 60, name
        assert abs(valid.num_sentences - test.num_sentences) <= 1, name


def test_ensemble_beats_spacy_rules_on_informal_text():
    """On the development half of the social-media gold set (the held-out half is the README's): recall at
    least 0.2 higher than spacy+rules, and precision not lower. Measured: 0.33 -> 0.67, 0.65 -> 0.82."""
    results = evaluate(["spacy+rules", "ensemble"], "valid")
    base, ours = results["social|spacy+rules"]["overall"], results["social|ensemble"]["overall"]
    assert ours["recall"] >= base["recall"] + 0.2 and ours["precision"] >= base["precision"]
    for name in SETS:  # and no worse recall anywhere
        assert results[f"{name}|ensemble"]["overall"]["recall"] >= results[f"{name}|spacy+rules"]["overall"]["recall"]
