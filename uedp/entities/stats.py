"""Corpus statistics under a choice of protected categories (what the privacy analysis depends on).

    stats = corpus_stats(corpus, annotations, resolve_categories("pii"), public="places_calendar")
    json.dumps(stats)   # plain ints, floats, strings, lists and dicts only

Keys of the result:
- `users`, `sentences`, `dropped_users` (from `corpus.meta`, 0 if absent), `splits` ({split: sentences}).
- `detector` (from the annotations' metadata, or the argument), `protected` (sorted categories), `public`
  (the public-entity policy, uedp.entities.public: its keys are not protected, so, as in a run (the
  sentence entity sets of uedp.entities.detectors.entity_sets), they are left out of every count below: a
  sentence whose only protected entities are public is entity-free).
- `sensitive_sentences` (holding >= 1 protected entity), `sensitive_fraction`, `extended_entities`
  (sentences with none: each is one extended entity of the mechanism).
- `entities`: distinct protected entity keys; `entities_per_category`: {category: distinct keys}.
- `users_per_entity`: over the distinct keys, the number of distinct users whose sentences hold the key
  (the key's holders): {mean, median, p90, p99, max, share_2plus, histogram, per_category} with histogram
  bins "1", "2", "3-5", "6-10", "11-100", ">100". `median` is numpy's (the mean of the two middle values
  for an even count); `p90` and `p99` are `numpy.percentile(holders, q, method="higher")`, the holder count
  at sorted position ceil(q / 100 * (n - 1)) (0-based), so always an actual holder count (holders
  [1, 1, 2, 5]: median 1.5, p90 5, p99 5). `share_2plus` is the fraction of distinct keys with >= 2
  holders. `per_category`: {category: {entities, mean, median, p90, p99, max, share_2plus}} over the
  protected categories with at least one key (category of a key: uedp.categories.key_category).
  This is what an entity's removal touches: the users it spans bound how much one entity moves a round.
- `entities_per_sentence`: mean number of distinct protected keys per sentence (all sentences), and
  `entities_per_sensitive_sentence` (sensitive sentences only; 0.0 if there is none).
- Only with a `selection` setting ({q_e, q_s, k_cap, m_max}: the rates and cap a round's clients use):
  `trainable`, uedp.privacy.trainable.trainable_share over the training split's sentences (what clients
  train on), by the number of distinct protected keys per sentence: the expected share of its sentences
  a sampled client may train on in one round.
- Only when the corpus has gold spans and the detector is not `gold`: `precision`, `recall` (strict,
  overall, over the protected classes; see uedp.entities.quality) and `per_category` ({class: {tp, fp, fn,
  precision, recall, f1}}).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from uedp.categories import key_category
from uedp.data.corpus import SPLITS, Corpus
from uedp.entities.detectors import detector_identity, entity_sets
from uedp.entities.public import public_keys
from uedp.entities.quality import detection_quality
from uedp.errors import CorpusError
from uedp.privacy.trainable import trainable_share

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


def _holders(spans: np.ndarray) -> dict[str, Any]:
    """Summary of holder counts (one per distinct key): the numbers of `users_per_entity` (module docstring)."""
    if not len(spans):
        return {"mean": 0.0, "median": 0.0, "p90": 0, "p99": 0, "max": 0, "share_2plus": 0.0}
    return {
        "mean": float(spans.mean()),
        "median": float(np.median(spans)),
        "p90": int(np.percentile(spans, 90, method="higher")),
        "p99": int(np.percentile(spans, 99, method="higher")),
        "max": int(spans.max()),
        "share_2plus": float(np.count_nonzero(spans >= 2) / len(spans)),
    }


def corpus_stats(
    corpus: Corpus, annotations: pa.Table, protected: Iterable[str], *, detector: str | None = None,
    public: str = "none", selection: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Statistics of `corpus` with `annotations` (ANNOTATION_SCHEMA), the `protected` categories and the
    public-entity policy `public` (none | places_calendar: its keys are not protected); with `selection`
    (trainable_share's q_e, q_s, k_cap, m_max) also the expected trainable share (`trainable`)."""
    protected = frozenset(protected)
    rows = corpus.table.select(["sid", "user", "split"]).sort_by("sid")
    annotations = annotations.sort_by("sid")
    if rows.column("sid").to_pylist() != annotations.column("sid").to_pylist():
        raise CorpusError(
            f"the annotations do not cover the sentences of corpus {corpus.name!r} (sids differ)"
        )
    if detector is None:
        detector = (detector_identity(annotations) or {}).get("detector", "unknown")

    sets = entity_sets(annotations, protected, public_keys(public))  # as a run's (uedp.pipeline)
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
    categories = [key_category(k) for k in users_of]
    per_category = Counter(categories)
    holders_of: dict[str, list[int]] = {}
    for cat, span in zip(categories, spans.tolist()):
        holders_of.setdefault(cat, []).append(span)

    out: dict[str, Any] = {
        "users": len(pc.unique(rows.column("user"))),
        "sentences": n,
        "dropped_users": int(corpus.meta.get("dropped_users", 0)),
        "splits": {s: int(split_counts.get(s, 0)) for s in SPLITS},
        "detector": detector,
        "protected": sorted(protected),
        "public": public,
        "sensitive_sentences": sensitive,
        "sensitive_fraction": sensitive / n if n else 0.0,
        "extended_entities": n - sensitive,
        "entities": len(users_of),
        "entities_per_category": {c: per_category.get(c, 0) for c in sorted(protected)},
        "users_per_entity": {
            **_holders(spans),
            "histogram": _histogram(spans.tolist()),
            "per_category": {
                c: {"entities": len(h), **_holders(np.array(h, dtype=np.int64))}
                for c, h in sorted(holders_of.items())
            },
        },
        "entities_per_sentence": float(sizes.mean()) if n else 0.0,
        "entities_per_sensitive_sentence": float(sizes[sizes > 0].mean()) if sensitive else 0.0,
    }
    if selection is not None:
        train = [len(keys) for keys, split in zip(sets, rows.column("split").to_pylist()) if split == "train"]
        out["trainable"] = trainable_share(train, **selection)
    if corpus.has_gold and detector != "gold":
        q = detection_quality(annotations, corpus, categories=protected)
        out["precision"] = q["overall"]["precision"]
        out["recall"] = q["overall"]["recall"]
        out["ci95"] = q["overall"]["ci95"]
        out["overlap"] = q["lenient"]["overall"]  # class-matched overlap recall / precision, with ci95
        out["flags"] = q["flags"]  # sentence flag, false-flag and missed-flag rates, with ci95
        out["per_category"] = q["per_category"]
    return out
