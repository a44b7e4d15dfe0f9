"""Detector quality on hand-labelled real text: recall and precision per category, per gold set and split.

    python -m experiments.detectors [--split test] [--detectors spacy+rules,balanced,...] [--out docs/figures]
    python -m experiments.detectors --levers [--out docs/figures]   # each lever of the profiles, on `valid`

Gold sets: tests/assets/ner_gold/*.jsonl (BBC News sentences, Shakespeare lines, informal social-media
style messages; guidelines and provenance in docs/ner-gold.md), each with a `valid` half (used to develop
the detectors) and a `test` half (held out: the README reports it). Matching is strict (same span and class;
GPE and LOC one class) as in `uedp corpus-stats`; `lenient` counts overlaps. Writes OUT/detectors-SPLIT.md
and .json, and prints the table.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from uedp.data.corpus import Corpus
from uedp.data.jsonl import load_jsonl
from uedp.entities.detectors import DETECTORS
from uedp.entities.quality import detection_quality
from uedp.errors import ConfigError
from uedp.markdown import table as md_table

GOLD_DIR = Path(__file__).parents[1] / "tests" / "assets" / "ner_gold"
SETS = ("bbc_news", "shakespeare", "social", "informal")
CLASSES = ("PERSON", "GPE/LOC", "ORG", "NORP", "DATE", "MISC")


def gold_corpus(name: str, gold_dir: Path = GOLD_DIR) -> Corpus:
    """Both halves of gold set `name` (gold_dir/NAME.jsonl), one sentence per line."""
    path = Path(gold_dir) / f"{name}.jsonl"
    if not path.is_file():
        raise ConfigError(f"gold set {name!r}: {path} not found")
    corpus = load_jsonl(path=path, sentence_split=False)
    if not corpus.has_gold:
        raise ConfigError(f"gold set {name!r}: {path} has no `entities` field")
    return Corpus(f"ner_gold/{name}", corpus.table, has_gold=True, meta=corpus.meta)


def gold_split(name: str, split: str) -> Corpus:
    """One half (`valid` or `test`) of gold set `name`."""
    corpus = gold_corpus(name)
    table = corpus.table.filter(pc.equal(corpus.table.column("split"), split))
    return Corpus(f"ner_gold/{name}/{split}", table, has_gold=True, meta=corpus.meta)


def create(spec: str) -> Any:
    """A detector from `NAME` or `NAME:LEVER+LEVER` (a profile with those levers only; `NAME:` none)."""
    name, colon, levers = spec.partition(":")
    return DETECTORS.create(name, **({"levers": [x for x in levers.split("+") if x]} if colon else {}))


def evaluate(detectors: list[str], split: str) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name in SETS:
        corpus = gold_split(name, split)
        for detector in detectors:
            t0 = time.perf_counter()
            annotations = create(detector).annotate(corpus)
            q = detection_quality(annotations, corpus)
            results[f"{name}|{detector}"] = {
                "sentences": corpus.num_sentences, "seconds": round(time.perf_counter() - t0, 2),
                "overall": q["overall"], "lenient": q["lenient"]["overall"], "flags": q["flags"],
                "per_category": {c: v for c, v in q["per_category"].items()},
            }
    return results


def _ci(value: float, interval: list[float]) -> str:
    return f"{value:.2f} [{interval[0]:.2f}, {interval[1]:.2f}]"


def render(results: dict[str, Any], split: str) -> str:
    rows, per = [], []
    for key, r in results.items():
        corpus, detector = key.split("|")
        o, lo, f = r["overall"], r["lenient"], r["flags"]
        rows.append([corpus, detector, str(r["sentences"]), str(o["tp"] + o["fn"]),
                     _ci(o["recall"], o["ci95"]["recall"]), _ci(lo["recall"], lo["ci95"]["recall"]),
                     _ci(lo["precision"], lo["ci95"]["precision"]), f"{lo['any_class_recall']:.2f}",
                     f"{f['flag_rate']:.2f} / {f['gold_flag_rate']:.2f}",
                     f"{_ci(f['false_flag_rate'], f['ci95']['false_flag_rate'])} (of {f['gold_free']})"])
        cells = [corpus, detector]
        for c in CLASSES:
            q = r["per_category"].get(c)
            cells.append("-" if q is None or q["tp"] + q["fn"] == 0 else
                         f"{q['recall']:.2f} / {q['precision']:.2f} ({q['tp'] + q['fn']})")
        per.append(cells)
    head = ["gold set", "detector", "sentences", "gold entities", "strict recall", "class-matched overlap recall",
            "overlap precision", "any-class overlap recall", "flagged / gold flag rate",
            "false-flag rate (entity-free flagged)"]
    return (f"Detector quality on the `{split}` half of the hand-labelled gold sets, with Wilson 95% intervals "
            "(entities treated as independent). Strict: same span and class (GPE and LOC one class); class-matched "
            "overlap: a gold entity is found if a prediction of its class overlaps it (a wrong class is a miss); "
            "any-class overlap: of any class (the sentence is flagged, under another key). Flag rates count every "
            f"prediction (UeDP makes any sentence with a detected entity an entity sentence).\n\n{md_table(head, rows)}"
            "\n\nPer class, strict recall / precision (n = gold entities of the class):\n\n"
            + md_table(["gold set", "detector", *[f"{c}: R / P (n)" for c in CLASSES]], per))


def lever_specs() -> list[tuple[str, str]]:
    """(label, detector spec) of the lever study: no lever (the ensemble), each lever alone, the balanced
    profile, the balanced profile less each of its levers, and the recall profile."""
    from uedp.entities.profiles import LEVERS, PROFILES

    balanced = PROFILES["balanced"]
    rows = [("no lever (= ensemble)", "balanced:")]
    rows += [(f"+ {lever} alone", f"balanced:{lever}") for lever in LEVERS]
    rows.append(("balanced (" + ", ".join(balanced) + ")", "balanced"))
    rows += [(f"balanced - {lever}", "balanced:" + "+".join(x for x in balanced if x != lever)) for lever in balanced]
    rows.append(("recall (" + ", ".join(PROFILES["recall"]) + ")", "recall"))
    return rows


def render_levers(results: dict[str, Any], specs: list[tuple[str, str]], split: str) -> str:
    """One row per lever setting, per gold set class-matched overlap recall / overlap precision / false-flag
    rate, and their mean over the sets."""
    rows = []
    for label, spec in specs:
        cells, means = [label], [0.0, 0.0, 0.0]
        for name in SETS:
            r = results[f"{name}|{spec}"]
            values = (r["lenient"]["recall"], r["lenient"]["precision"], r["flags"]["false_flag_rate"])
            means = [m + v / len(SETS) for m, v in zip(means, values)]
            cells.append(" / ".join(f"{v:.2f}" for v in values))
        cells.append(" / ".join(f"{v:.2f}" for v in means))
        rows.append(cells)
    return (f"Each lever of the detector profiles (uedp/entities/profiles.py) on the `{split}` halves: per gold "
            "set, class-matched overlap recall / overlap precision / false-flag rate (entity-free sentences "
            "flagged). Chosen here; reported on the `test` halves.\n\n"
            + md_table(["levers", *SETS, "mean"], rows))


SECOND_ANNOTATOR = {"informal": "informal_annotator_b.jsonl"}  # gold set -> the blind second annotation of a sample


def _spans(entities: list[list[Any]]) -> list[tuple[int, int, str]]:
    return [(int(s), int(e), "GPE/LOC" if c in ("GPE", "LOC") else str(c)) for s, e, c in entities]


def agreement(name: str = "informal") -> dict[str, Any]:
    """Inter-annotator agreement of gold set `name` (annotator A, the gold) with its blind second annotation of a
    sample (annotator B; docs/ner-gold.md): span F1 strict (same span and class, GPE/LOC one class) and
    class-matched overlap (a span counts as matched if it overlaps a span of the same class of the other
    annotator), and the sentence-level "holds an entity" agreement with Cohen's kappa."""
    import json

    gold = [json.loads(line) for line in (GOLD_DIR / f"{name}.jsonl").read_text().splitlines() if line.strip()]
    second = [json.loads(line) for line in (GOLD_DIR / SECOND_ANNOTATOR[name]).read_text().splitlines()
              if line.strip()]
    strict = {"a_matched": 0, "b_matched": 0, "a": 0, "b": 0}
    overlap = dict(strict)
    flags = Counter()
    for row in second:
        a_row = gold[int(row["line"])]
        if a_row["text"] != row["text"]:
            raise ValueError(f"{SECOND_ANNOTATOR[name]} line {row['line']}: text differs from {name}.jsonl")
        a, b = _spans(a_row["entities"]), _spans(row["entities"])
        for tally, match in ((strict, lambda x, y: x == y),
                             (overlap, lambda x, y: x[2] == y[2] and x[0] < y[1] and y[0] < x[1])):
            tally["a"] += len(a)
            tally["b"] += len(b)
            tally["a_matched"] += sum(any(match(x, y) for y in b) for x in a)
            tally["b_matched"] += sum(any(match(y, x) for x in a) for y in b)
        flags[(bool(a), bool(b))] += 1

    def f1(t: dict[str, int]) -> dict[str, float]:
        recall = t["a_matched"] / t["a"] if t["a"] else 1.0  # of A's spans, the share B found
        precision = t["b_matched"] / t["b"] if t["b"] else 1.0
        return {"b_recall_of_a": recall, "b_precision_vs_a": precision,
                "f1": 2 * recall * precision / (recall + precision) if recall + precision else 0.0, **t}

    n = sum(flags.values())
    observed = (flags[(True, True)] + flags[(False, False)]) / n
    pa_, pb_ = (flags[(True, True)] + flags[(True, False)]) / n, (flags[(True, True)] + flags[(False, True)]) / n
    chance = pa_ * pb_ + (1 - pa_) * (1 - pb_)
    return {"set": name, "sentences": n, "strict": f1(strict), "overlap": f1(overlap),
            "flag_agreement": observed, "flag_kappa": (observed - chance) / (1 - chance) if chance < 1 else 1.0,
            "flags": {f"A {'entity' if k[0] else 'none'} / B {'entity' if k[1] else 'none'}": v
                      for k, v in sorted(flags.items())}}


def detectors_report(detectors: list[str], split: str, out: Path | None, command: str) -> str:
    """`evaluate` of `detectors` on `split`, rendered; with `out`, OUT/detectors-SPLIT.md (ending with `command`)
    and OUT/detectors-SPLIT.json. Returns the table."""
    results = evaluate(detectors, split)
    text = publish(out, f"detectors-{split}.md", render(results, split), command)
    if out is not None:
        (out / f"detectors-{split}.json").write_text(json.dumps(results, indent=1))
    return text


def levers_report(out: Path | None, command: str) -> str:
    """Each lever of the profiles on the valid halves (`lever_specs`); with `out`, OUT/detectors-levers.md."""
    specs = lever_specs()
    return publish(out, "detectors-levers.md", render_levers(evaluate([spec for _, spec in specs], "valid"), specs,
                                                             "valid"), command)


def agreement_report(out: Path | None) -> str:
    """The informal gold set's inter-annotator agreement as JSON; with `out`, OUT/ner-agreement.json."""
    return publish(out, "ner-agreement.json", json.dumps(agreement("informal"), indent=1))


def publish(out: Path | None, name: str, text: str, command: str | None = None) -> str:
    """`text`, and with `out` written to out/name, a report ending with the command that made it."""
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text + (f"\n\nCommand: `{command}`\n" if command else "\n"))
    return text
