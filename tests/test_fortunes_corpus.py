"""The bring-your-own corpus of real short texts (studies/fortunes_corpus.py): strfile parsing, attribution lines
dropped, texts that name Shakespeare or quote a rewriter training sentence dropped, labels from the file names,
seeded owners and splits, and a missing file named in the error."""

from __future__ import annotations

import json

import pytest

from studies.fortunes_corpus import build, read_fortunes
from uedp.errors import ConfigError


def _write(root, name, entries):
    (root / name).write_text("\n%\n".join(entries) + "\n%\n")


def test_build_reads_labels_drops_overlaps_and_is_seeded(tmp_path):
    root = tmp_path / "fortunes"
    root.mkdir()
    _write(root, "food", ["An apple a day keeps the doctor away,\n\tif aimed well.\n\t\t-- Anonymous",
                          "Brevity is the soul of wit, said Shakespeare about lunch.", "Too short"])
    _write(root, "law", ["The law is an ass, and the ass is in charge of the law.",
                         "A public sentence the rewriter saw. And one more sentence here."])
    assert read_fortunes(root / "food")[0] == "An apple a day keeps the doctor away, if aimed well."
    public = {"A public sentence the rewriter saw."}
    stats = build(root, tmp_path / "a.jsonl", topics=("food", "law"), public=public, owners=5, seed=3)
    rows = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [r["label"] for r in rows] == ["food", "law"]
    assert stats["dropped_overlap"] == {"names Shakespeare": 1, "quotes a rewriter training sentence": 1}
    assert stats["dropped_length"] == 1 and not any("--" in r["text"] for r in rows)
    assert all(r["user"].startswith("owner") and r["split"] in ("train", "valid", "test") for r in rows)
    build(root, tmp_path / "b.jsonl", topics=("food", "law"), public=public, owners=5, seed=3)
    assert (tmp_path / "b.jsonl").read_text() == (tmp_path / "a.jsonl").read_text()
    with pytest.raises(ConfigError, match="no fortune file 'art'"):
        build(root, tmp_path / "c.jsonl", topics=("art",), public=public)
