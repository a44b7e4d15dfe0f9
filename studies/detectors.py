"""Detector quality on hand-labelled real text: recall and precision per category, per gold set and split.

    python -m experiments.detectors [--split test] [--detectors spacy+rules,ensemble] [--out docs/figures]

Gold sets: tests/assets/ner_gold/*.jsonl (BBC News sentences, Shakespeare lines, informal social-media
style messages; guidelines and provenance in docs/ner-gold.md), each with a `valid` half (used to develop
the detectors) and a `test` half (held out: the README reports it). Matching is strict (same span and class;
GPE and LOC one class) as in `uedp corpus-stats`; `lenient` counts overlaps. Writes OUT/detectors-SPLIT.md
and .json, and prints the table.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from uedp.data.corpus import Corpus
from uedp.data.jsonl import load_jsonl
from uedp.entities.detectors import DETECTORS
from uedp.entities.quality import detection_quality
from uedp.markdown import table as md_table

GOLD_DIR = Path(__file__).parents[1] / "tests" / "assets" / "ner_gold"
SETS = ("bbc_news", "shakespeare", "social")
CLASSES = ("PERSON", "GPE/LOC", "ORG", "NORP", "DATE", "MISC")


def gold_split(name: str, split: str) -> Corpus:
    corpus = load_jsonl(path=GOLD_DIR / f"{name}.jsonl", sentence_split=False)
    table = corpus.table.filter(pc.equal(corpus.table.column("split"), split))
    return Corpus(f"ner_gold/{name}/{split}", table, has_gold=True, meta=corpus.meta)


def evaluate(detectors: list[str], split: str) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name in SETS:
        corpus = gold_split(name, split)
        for detector in detectors:
            t0 = time.perf_counter()
            annotations = DETECTORS.create(detector).annotate(corpus)
            q = detection_quality(annotations, corpus)
            results[f"{name}|{detector}"] = {
                "sentences": corpus.num_sentences, "seconds": round(time.perf_counter() - t0, 2),
                "overall": q["overall"], "lenient": q["lenient"]["overall"],
                "per_category": {c: v for c, v in q["per_category"].items()},
            }
    return results


def render(results: dict[str, Any], split: str) -> str:
    rows = []
    for key, r in results.items():
        corpus, detector = key.split("|")
        cells = [corpus, detector, str(r["sentences"]),
                 f"{r['overall']['recall']:.2f} / {r['overall']['precision']:.2f}",
                 f"{r['lenient']['recall']:.2f}"]
        for c in CLASSES:
            q = r["per_category"].get(c)
            cells.append("-" if q is None or q["tp"] + q["fn"] == 0 else
                         f"{q['recall']:.2f} / {q['precision']:.2f} ({q['tp'] + q['fn']})")
        rows.append(cells)
    head = ["gold set", "detector", "sentences", "all: recall / precision", "lenient recall",
            *[f"{c}: R / P (n)" for c in CLASSES]]
    return (f"Detector quality on the `{split}` half of the hand-labelled gold sets (strict matching; n = gold "
            f"entities of the class).\n\n" + md_table(head, rows))
