"""Corpus statistics under a choice of protected categories (what the privacy analysis depends on).

    stats = corpus_stats(corpus, annotations, resolve_categories("pii"))
    json.dumps(stats)   # plain ints, floats, strings, lists and dicts only

Keys of the result:
- `users`, `sentences`, `dropped_users` (from `corpus.meta`, 0 if absent), `splits` ({split: sentences}).
- `detector` (from the annotations' metadata, or the argument), `protected` (sorted categories).
- `sensitive_sentences` (holding >= 1 protected entity), `sensitive_fraction`, `extended_entities`
  (sentences with none: each is one extended entity of the mechanism).
- `entities`: distinct protected entity keys; `entities_per_category`: {category: distinct keys}.
- `users_per_entity`: over the distinct keys, the number of distinct users whose sentences hold the key:
  {mean, median, max, histogram} with histogram bins "1", "2", "3-5", "6-10", "11-100", ">100".
  This is what an entity's removal touches: the users it spans bound how much one entity moves a round.
- `entities_per_sentence`: mean number of distinct protected keys per sentence (all sentences), and
  `entities_per_sensitive_sentence` (sensitive sentences only; 0.0 if there is none).
- Only when the corpus has gold spans and the detector is not `gold`: `precision`, `recall` (strict,
  overall, over the protected classes; see uedp.entities.quality) and `per_category` ({class: {tp, fp, fn,
  precision, recall, f1}}).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from uedp.categories import key_category
from uedp.data.corpus import SPLITS, Corpus
from uedp.entities.detectors import detector_identity, entity_sets
from uedp.entities.quality import detection_quality
from uedp.errors import CorpusError

HISTOGRAM_BINS: tuple[tuple[str, int, float], ...] = (
    ("1", 1, 1), ("2", 2, 2), ("3-5", 3, 5), ("6-10", 6, 10), ("11-100", 11, 100),
    (">100", 101, float("inf")),
)


def _histogram(counts: Iterable[int]) -> dict[str, int]:
    hist = dict.fromkeys((name for name, _, _ in HISTOGRAM_BINS), 0)
    for n in counts:
        for name, lo, hi in HISTOGRAM_BINS:
            if lo <= n <= hi:
                hist[name] += 1
                break
    return hist


def corpus_stats(
    corpus: Corpus, annotations: pa.Table, protected: Iterable[str], *, detector: str | None = None
) -> dict[str, Any]:
    """Statistics of `corpus` with `annotations` (ANNOTATION_SCHEMA) and the `protected` categories."""
    protected = frozenset(protected)
    rows = corpus.table.select(["sid", "user", "split"]).sort_by("sid")
    annotations = annotations.sort_by("sid")
    if rows.column("sid").to_pylist() != annotations.column("sid").to_pylist():
        raise CorpusError(
            f"the annotations do not cover the sentences of corpus {corpus.name!r} (sids differ)"
        )
    if detector is None:
        detector = (detector_identity(annotations) or {}).get("detector", "unknown")

    sets = entity_sets(annotations, protected)
    users = rows.column("user").to_pylist()
    users_of: dict[str, set[str]] = {}
    for user, keys in zip(users, sets):
        for key in keys:
            users_of.setdefault(key, set()).add(user)

    n = len(sets)
    sizes = np.array([len(s) for s in sets], dtype=np.int64)
    sensitive = int(np.count_nonzero(sizes))
    spans = np.array([len(u) for u in users_of.values()], dtype=np.int64)
    split_counts = Counter(rows.column("split").to_pylist())
    per_category = Counter(key_category(k) for k in users_of)

    out: dict[str, Any] = {
        "users": len(pc.unique(rows.column("user"))),
        "sentences": n,
        "dropped_users": int(corpus.meta.get("dropped_users", 0)),
        "splits": {s: int(split_counts.get(s, 0)) for s in SPLITS},
        "detector": detector,
        "protected": sorted(protected),
        "sensitive_sentences": sensitive,
        "sensitive_fraction": sensitive / n if n else 0.0,
        "extended_entities": n - sensitive,
        "entities": len(users_of),
        "entities_per_category": {c: per_category.get(c, 0) for c in sorted(protected)},
        "users_per_entity": {
            "mean": float(spans.mean()) if len(spans) else 0.0,
            "median": float(np.median(spans)) if len(spans) else 0.0,
            "max": int(spans.max()) if len(spans) else 0,
            "histogram": _histogram(spans.tolist()),
        },
        "entities_per_sentence": float(sizes.mean()) if n else 0.0,
        "entities_per_sensitive_sentence": float(sizes[sizes > 0].mean()) if sensitive else 0.0,
    }
    if corpus.has_gold and detector != "gold":
        q = detection_quality(annotations, corpus, categories=protected)
        out["precision"] = q["overall"]["precision"]
        out["recall"] = q["overall"]["recall"]
        out["ci95"] = q["overall"]["ci95"]
        out["overlap"] = q["lenient"]["overall"]  # class-matched overlap recall / precision, with ci95
        out["flags"] = q["flags"]  # sentence flag, false-flag and missed-flag rates, with ci95
        out["per_category"] = q["per_category"]
    return out
