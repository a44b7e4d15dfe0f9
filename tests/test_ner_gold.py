"""The informal gold set (tests/assets/ner_gold/informal.jsonl, docs/ner-gold.md) is well formed, has the
200+ entity-free messages in both halves, and its blind second annotation is of the same texts."""

from __future__ import annotations

import json

from studies.detectors import GOLD_DIR, agreement
from uedp.categories import CATEGORIES


def test_informal_gold_is_well_formed_with_enough_entity_free_messages():
    rows = [json.loads(line) for line in (GOLD_DIR / "informal.jsonl").read_text().splitlines()]
    assert len(rows) == 420
    for i, row in enumerate(rows):
        assert list(row) == ["user", "text", "split", "entities"] and row["text"].isascii()
        assert row["split"] == ("valid" if i % 2 == 0 else "test")
        last = 0
        for start, end, category in row["entities"]:
            assert last <= start < end <= len(row["text"]) and category in CATEGORIES, (i, start, end, category)
            span = row["text"][start:end]
            assert span == span.strip(), (i, span)
            last = end
    free = [r for r in rows if not r["entities"]]
    assert len(free) >= 200 and min(sum(r["split"] == h for r in free) for h in ("valid", "test")) >= 100


def test_agreement_is_computed_on_the_same_texts():
    result = agreement("informal")
    assert result["sentences"] == 120 and result["strict"]["a"] > 50
    assert 0.0 <= result["strict"]["f1"] <= result["overlap"]["f1"] <= 1.0 and -1.0 <= result["flag_kappa"] <= 1.0
