"""Entity-level precision and recall of a detector's annotations against a corpus's gold spans.

    q = detection_quality(annotations, corpus)
    q["overall"]["precision"], q["per_category"]["PERSON"]["recall"], q["lenient"]["overall"]["recall"]

Matching (strict, CoNLL-style): a predicted entity is correct iff a gold entity of the same sentence has
the same `(start, end)` and the same class. Classes are categories after `ALIGN`: GPE and LOC are one
class, "GPE/LOC", because CoNLL's LOC covers what spaCy splits into GPE (countries, cities) and LOC
(mountains, rivers); every other category is its own class. Lenient matching counts a prediction as
correct iff it overlaps at least one gold entity of its class, and a gold entity as found iff at least
one prediction of its class overlaps it. `lenient.overall.any_class_recall`: the share of gold entities that
a prediction of ANY class overlaps (its sentence is flagged, but under another key than a class-matched
detection would give it).

Scored classes: those that occur in the gold spans of the corpus (so that e.g. spaCy's DATE entities
are not counted as false positives against CoNLL, whose gold has no DATE), restricted to `categories`
(aligned before use) when given. Predictions of other classes are counted in `unscored_predictions`.
Precision is 1.0 when nothing was predicted and recall is 1.0 when there is nothing to find (no
denominator: nothing got wrong). Every number in the result is a plain int or float, so the dict is
JSON-serializable.

Intervals (`ci95`): Wilson 95% score intervals of each overall rate, treating entities (or sentences) as
independent trials; entities of one sentence are not independent, so read them as a lower bound on the
uncertainty. `flags`: what the detector does to UeDP's sentence classes, over ALL of its predictions (of the
`categories` when given: the protected ones; a sentence with any detected entity is an entity sentence,
whatever the class, gold sentences by any gold entity): the share of sentences it
flags, the gold share, and the FALSE-flag rate (entity-free gold sentences flagged) and missed-flag rate
(gold entity sentences not flagged).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from uedp.categories import CATEGORIES, LABEL_MAP
from uedp.data.corpus import Corpus
from uedp.errors import ConfigError, CorpusError

ALIGN: dict[str, str] = {"GPE": "GPE/LOC", "LOC": "GPE/LOC"}


def _cls(category: str, align: Mapping[str, str]) -> str:
    category = category if category in CATEGORIES else LABEL_MAP.get(category, category)
    return align.get(category, category)


def _ratio(num: int, den: int) -> float:
    return num / den if den else 1.0


def wilson(k: int, n: int, z: float = 1.959963984540054) -> list[float]:
    """The Wilson score interval of k successes in n trials ([0, 1] when n = 0)."""
    if n <= 0:
        return [0.0, 1.0]
    phat = k / n
    centre = (phat + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def _scores(tp: int, fp: int, fn: int) -> dict[str, Any]:
    p, r = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return {"tp": tp, "fp": fp, "fn": fn, "precision": p, "recall": r, "f1": f1}


def _report(tp: Counter, fp: Counter, fn: Counter, classes: list[str]) -> dict[str, Any]:
    per = {c: _scores(tp[c], fp[c], fn[c]) for c in classes}
    overall = _scores(sum(tp.values()), sum(fp.values()), sum(fn.values()))
    return {"overall": overall, "per_category": per}


def detection_quality(
    annotations: pa.Table,
    corpus: Corpus,
    *,
    categories: Iterable[str] | None = None,
    align: Mapping[str, str] = ALIGN,
) -> dict[str, Any]:
    """Strict and lenient entity-level precision/recall of `annotations` against `corpus`'s gold spans."""
    if not corpus.has_gold:
        raise ConfigError(
            f"corpus {corpus.name!r} has no gold entities: detection quality cannot be measured"
        )
    gold_rows = corpus.table.select(["sid", "gold"]).sort_by("sid")
    pred_rows = annotations.select(["sid", "entities"]).sort_by("sid")
    if gold_rows.column("sid").to_pylist() != pred_rows.column("sid").to_pylist():
        raise CorpusError(
            f"the annotations do not cover the sentences of corpus {corpus.name!r} (sids differ)"
        )

    gold = [
        [(g["start"], g["end"], _cls(g["category"], align)) for g in row or []]
        for row in gold_rows.column("gold").to_pylist()
    ]
    pred = [
        [(e["start"], e["end"], _cls(e["category"], align)) for e in row or []]
        for row in pred_rows.column("entities").to_pylist()
    ]
    classes = sorted({c for row in gold for _, _, c in row})
    flag_pred = pred
    if categories is not None:
        wanted = {_cls(c, align) for c in categories}
        classes = [c for c in classes if c in wanted]
        flag_pred = [[p for p in row if p[2] in wanted] for row in pred]  # the protected categories only
    scored = set(classes)

    tp, fp, fn = Counter(), Counter(), Counter()
    ltp_pred, lfp, ltp_gold, lfn = Counter(), Counter(), Counter(), Counter()
    unscored = anyclass = 0
    for g_row, p_row, f_row in zip(gold, pred, flag_pred):
        g_set = {s for s in g_row if s[2] in scored}
        p_set = {s for s in p_row if s[2] in scored}
        unscored += len(p_row) - len([s for s in p_row if s[2] in scored])
        for s in p_set:
            (tp if s in g_set else fp)[s[2]] += 1
            hit = any(g[2] == s[2] and g[0] < s[1] and s[0] < g[1] for g in g_set)
            (ltp_pred if hit else lfp)[s[2]] += 1
        for g in g_set:
            if g not in p_set:
                fn[g[2]] += 1
            found = any(p[2] == g[2] and p[0] < g[1] and g[0] < p[1] for p in p_set)
            (ltp_gold if found else lfn)[g[2]] += 1
            anyclass += any(p[0] < g[1] and g[0] < p[1] for p in f_row)  # of the protected categories

    strict = _report(tp, fp, fn, classes)
    lenient_per = {}
    for c in classes:
        p, r = _ratio(ltp_pred[c], ltp_pred[c] + lfp[c]), _ratio(ltp_gold[c], ltp_gold[c] + lfn[c])
        lenient_per[c] = {"precision": p, "recall": r}
    hits, found = sum(ltp_pred.values()), sum(ltp_gold.values())
    predicted, total = hits + sum(lfp.values()), found + sum(lfn.values())
    lenient = {
        "overall": {
            "precision": _ratio(hits, predicted), "recall": _ratio(found, total),
            "ci95": {"precision": wilson(hits, predicted), "recall": wilson(found, total)},
            "hits": hits, "predicted": predicted, "found": found, "gold": total,
            "any_class_recall": _ratio(anyclass, total), "any_class_found": anyclass,
        },
        "per_category": lenient_per,
    }
    o = strict["overall"]
    o["ci95"] = {"precision": wilson(o["tp"], o["tp"] + o["fp"]), "recall": wilson(o["tp"], o["tp"] + o["fn"])}
    return {**strict, "lenient": lenient, "classes": classes, "unscored_predictions": unscored,
            "flags": sentence_flags(gold, flag_pred)}


def sentence_flags(gold: list[list[Any]], pred: list[list[Any]]) -> dict[str, Any]:
    """Sentence-level flags (see the module docstring) from each sentence's gold and predicted spans."""
    n = len(gold)
    gold_flagged = sum(1 for g in gold if g)
    flagged = sum(1 for p in pred if p)
    free = [p for g, p in zip(gold, pred) if not g]
    false = sum(1 for p in free if p)
    held = [p for g, p in zip(gold, pred) if g]
    missed = sum(1 for p in held if not p)
    return {"sentences": n, "flagged": flagged, "gold_flagged": gold_flagged, "gold_free": len(free),
            "false_flagged": false, "missed_flags": missed,
            "flag_rate": _ratio(flagged, n), "gold_flag_rate": _ratio(gold_flagged, n),
            "false_flag_rate": false / len(free) if free else 0.0,
            "missed_flag_rate": missed / len(held) if held else 0.0,
            "ci95": {"flag_rate": wilson(flagged, n), "false_flag_rate": wilson(false, len(free)),
                     "missed_flag_rate": wilson(missed, len(held))}}
