"""Detectors: a corpus in, an annotation table out; and the protected entity set of each sentence.

    det = DETECTORS.create("spacy+rules", model=None, batch_size=256, n_process=1)
    table = det.annotate(corpus)               # ANNOTATION_SCHEMA, one row per sentence, in sid order
    sets = entity_sets(table, frozenset({"PERSON", "EMAIL"}))   # sets[i]: keys of row i's entities

Detectors (registry `DETECTORS`, kind "detector"):
- `gold`: the corpus's ground-truth spans; only for a corpus with `has_gold` (else ConfigError).
- `rules`: the patterns of uedp.entities.rules alone (EMAIL, PHONE, ID, CARD, URL).
- `spacy`: spaCy NER (uedp.entities.spacy_ner); options `model`, `batch_size`, `n_process`.
- `spacy+rules`: both; where a rule span and a spaCy span overlap, the rule span wins (spaCy reads phone
  numbers as CARDINAL or DATE and e-mail addresses as PERSON or ORG).
- `ensemble`: spacy+rules plus case-insensitive gazetteers of names, places and organizations
  (uedp.entities.gazetteers), the union: a gazetteer span is added where no spaCy span overlaps it, and
  rule spans win over both. Made for text with unreliable capitalization
  (docs/corpora-and-detectors.md, "Detector quality on real text").
- `balanced` and `recall`: the profiles (uedp.entities.profiles): the ensemble with levers that correct it
  on real text; `balanced` is the default on real text, `recall` finds the most entities and flags more
  sentences. Option `levers` (a list) replaces a profile's levers, for measuring them one by one.

The table keeps the entities of ALL categories; which categories are protected is decided later, by
`entity_sets` / `sensitive_mask`, so one cached table serves every choice of protected categories.
Each entity carries its key (`uedp.categories.entity_key`). `Detector.identity()` is everything
that determines the output (detector name, model and version, rules version); options that only change
speed (`batch_size`, `n_process`) are not part of it. It is stored in the table's schema metadata under
`uedp.detector` and keys the annotation cache (uedp.entities.annotations).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from uedp.categories import CATEGORIES, LABEL_MAP, entity_key
from uedp.data.corpus import Corpus
from uedp.entities.gazetteers import GAZETTEER_VERSION, lists_identity
from uedp.entities.informal import INFORMAL_VERSION, ensemble_spans
from uedp.entities.lexicon import lexicon_identity
from uedp.entities.profiles import LEVERS, MISC_LABELS, PROFILE_VERSION, PROFILES, profile_spans
from uedp.entities.rules import RULES_VERSION, Span, find_rule_spans, merge_rule_spans
from uedp.entities.spacy_ner import SpacyNer
from uedp.errors import ConfigError, CorpusError, UedpError
from uedp.registry import Registry

ENTITY_TYPE = pa.struct(
    [("start", pa.int32()), ("end", pa.int32()), ("category", pa.string()), ("key", pa.string())]
)
ANNOTATION_SCHEMA = pa.schema([("sid", pa.int64()), ("entities", pa.list_(ENTITY_TYPE))])
META_KEY = b"uedp.detector"


class Detector:
    """Base class: subclasses yield, per sentence in sid order, its `(start, end, category)` spans."""

    name = "detector"

    def identity(self) -> dict[str, Any]:
        return {"detector": self.name}

    def _spans(self, rows: pa.Table) -> Iterable[list[Span]]:
        raise NotImplementedError

    def annotate(self, corpus: Corpus) -> pa.Table:
        rows = _rows_in_sid_order(corpus)
        return build_annotations(
            rows.column("sid").to_pylist(), rows.column("text").to_pylist(), self._spans(rows),
            identity=self.identity(), source=self.name,
        )


class GoldDetector(Detector):
    name = "gold"

    def annotate(self, corpus: Corpus) -> pa.Table:
        if not corpus.has_gold:
            raise ConfigError(
                f"detector 'gold' needs ground-truth entities, and corpus {corpus.name!r} has none; "
                "choose detector 'spacy+rules' (or 'spacy', 'rules')"
            )
        return super().annotate(corpus)

    def _spans(self, rows: pa.Table) -> Iterator[list[Span]]:
        for sid, gold in zip(rows.column("sid").to_pylist(), rows.column("gold").to_pylist()):
            spans = []
            for g in gold or []:
                category = g["category"] if g["category"] in CATEGORIES else LABEL_MAP.get(g["category"])
                if category is None:
                    raise CorpusError(
                        f"sid {sid}: gold category {g['category']!r} is not one of {', '.join(CATEGORIES)}"
                    )
                spans.append((g["start"], g["end"], category))
            yield spans


class RulesDetector(Detector):
    name = "rules"

    def identity(self) -> dict[str, Any]:
        return {"detector": self.name, "rules_version": RULES_VERSION}

    def _spans(self, rows: pa.Table) -> Iterator[list[Span]]:
        for text in rows.column("text").to_pylist():
            yield find_rule_spans(text)


class SpacyDetector(Detector):
    def __init__(self, *, model: str | None, batch_size: int, n_process: int, rules: bool,
                 gazetteers: bool = False) -> None:
        self.ner = SpacyNer(model=model, batch_size=batch_size, n_process=n_process)
        self.rules = rules
        self.gazetteers = gazetteers
        self.name = "ensemble" if gazetteers else "spacy+rules" if rules else "spacy"

    def identity(self) -> dict[str, Any]:
        out: dict[str, Any] = {"detector": self.name, **self.ner.identity()}
        if self.rules:
            out["rules_version"] = RULES_VERSION
        if self.gazetteers:
            out["gazetteer_version"] = GAZETTEER_VERSION
            out["informal_version"] = INFORMAL_VERSION
            out.update(lists_identity())
            out.update(lexicon_identity())  # the gazetteers read the dictionary too
        return out

    def _spans(self, rows: pa.Table) -> Iterator[list[Span]]:
        texts = rows.column("text").to_pylist()
        for text, spans in zip(texts, self.ner.spans(texts)):
            if self.gazetteers:
                spans = ensemble_spans(text, spans)
            yield merge_rule_spans(spans, find_rule_spans(text)) if self.rules else spans


class ProfileDetector(Detector):
    """spaCy NER (with MISC labels when the `misc` lever is on), then uedp.entities.profiles.profile_spans."""

    def __init__(self, name: str, levers: Sequence[str], *, model: str | None, batch_size: int,
                 n_process: int) -> None:
        unknown = sorted(set(levers) - set(LEVERS))
        if unknown or isinstance(levers, str):
            raise ConfigError(f"detector option 'levers' must be a list of {', '.join(LEVERS)}, got {levers!r}")
        self.name = name
        self.levers = tuple(lever for lever in LEVERS if lever in levers)
        self.ner = SpacyNer(model=model, batch_size=batch_size, n_process=n_process)

    def identity(self) -> dict[str, Any]:
        return {"detector": self.name, "levers": list(self.levers), **self.ner.identity(),
                "rules_version": RULES_VERSION, "gazetteer_version": GAZETTEER_VERSION,
                "informal_version": INFORMAL_VERSION, "profile_version": PROFILE_VERSION,
                **lists_identity(), **lexicon_identity()}

    def _spans(self, rows: pa.Table) -> Iterator[list[Span]]:
        texts = rows.column("text").to_pylist()
        labels = {**LABEL_MAP, **dict.fromkeys(MISC_LABELS, "MISC")} if "misc" in self.levers else LABEL_MAP
        for text, spans in zip(texts, self.ner.spans(texts, labels)):
            yield profile_spans(text, spans, self.levers)


DETECTORS: Registry[Detector] = Registry("detector")


@DETECTORS.register("gold")
def gold_detector() -> Detector:
    return GoldDetector()


@DETECTORS.register("rules")
def rules_detector() -> Detector:
    return RulesDetector()


@DETECTORS.register("spacy")
def spacy_detector(*, model: str | None = None, batch_size: int = 256, n_process: int = 1) -> Detector:
    return SpacyDetector(model=model, batch_size=batch_size, n_process=n_process, rules=False)


@DETECTORS.register("spacy+rules")
def spacy_rules_detector(*, model: str | None = None, batch_size: int = 256, n_process: int = 1) -> Detector:
    return SpacyDetector(model=model, batch_size=batch_size, n_process=n_process, rules=True)


@DETECTORS.register("ensemble")
def ensemble_detector(*, model: str | None = None, batch_size: int = 256, n_process: int = 1) -> Detector:
    return SpacyDetector(model=model, batch_size=batch_size, n_process=n_process, rules=True, gazetteers=True)


def _profile(name: str) -> Any:
    def create(*, levers: Sequence[str] | None = None, model: str | None = None, batch_size: int = 256,
               n_process: int = 1) -> Detector:
        return ProfileDetector(name, PROFILES[name] if levers is None else levers, model=model,
                               batch_size=batch_size, n_process=n_process)
    return create


for _name in PROFILES:
    DETECTORS.register(_name)(_profile(_name))


def _rows_in_sid_order(corpus: Corpus) -> pa.Table:
    rows = corpus.table.select(["sid", "text", "gold"])
    sids = rows.column("sid").to_numpy()
    if len(sids) > 1 and not np.all(sids[1:] > sids[:-1]):
        rows = rows.sort_by("sid")
        sids = rows.column("sid").to_numpy()
        if np.any(sids[1:] == sids[:-1]):
            dup = int(sids[1:][sids[1:] == sids[:-1]][0])
            raise CorpusError(f"corpus {corpus.name!r}: sid {dup} occurs more than once")
    return rows


def build_annotations(
    sids: Sequence[int],
    texts: Sequence[str],
    spans_per_row: Iterable[list[Span]],
    *,
    identity: dict[str, Any],
    source: str,
) -> pa.Table:
    """The annotation table of rows `sids` from their spans (validated; keys computed from `texts`).

    A span outside its sentence or of an unknown category raises UedpError naming the sid; a span of
    white space only is dropped (it has no key). Spans are stored sorted by (start, end)."""
    starts: list[int] = []
    ends: list[int] = []
    cats: list[str] = []
    keys: list[str] = []
    offsets = [0]
    rows = 0
    for sid, text, spans in zip(sids, texts, spans_per_row):
        rows += 1
        for start, end, category in sorted(spans):
            if not (0 <= start < end <= len(text)) or category not in CATEGORIES:
                raise UedpError(f"{source}: sid {sid}: bad entity span ({start}, {end}, {category!r})")
            surface = text[start:end]
            if not surface.strip():
                continue
            starts.append(start)
            ends.append(end)
            cats.append(category)
            keys.append(entity_key(category, surface))
        offsets.append(len(starts))
    if rows != len(sids):
        raise UedpError(f"{source}: produced spans for {rows} of {len(sids)} sentences")
    values = pa.StructArray.from_arrays(
        [pa.array(starts, pa.int32()), pa.array(ends, pa.int32()), pa.array(cats, pa.string()),
         pa.array(keys, pa.string())],
        fields=list(ENTITY_TYPE),
    )
    list_type = ANNOTATION_SCHEMA.field("entities").type
    entities = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values, type=list_type)
    schema = ANNOTATION_SCHEMA.with_metadata({META_KEY: json.dumps(identity, sort_keys=True).encode()})
    return pa.table([pa.array(sids, pa.int64()), entities], schema=schema)


def detector_identity(annotations: pa.Table) -> dict[str, Any] | None:
    """The identity of the detector that made `annotations` (from the schema metadata), if recorded."""
    raw = (annotations.schema.metadata or {}).get(META_KEY)
    return json.loads(raw) if raw else None


def _check_protected(protected: Iterable[str]) -> list[str]:
    cats = sorted(set(protected))
    unknown = [c for c in cats if c not in CATEGORIES]
    if unknown:
        raise ConfigError(
            f"protected categories {unknown} are unknown; use uedp.entities.resolve_categories "
            f"(categories: {', '.join(CATEGORIES)})"
        )
    return cats


def _protected_flat(annotations: pa.Table, protected: Iterable[str]) -> tuple[np.ndarray, pa.Array]:
    """Row index and key of every entity of a protected category, in row order."""
    cats = _check_protected(protected)
    lists = annotations.column("entities").combine_chunks()
    parents = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
    flat = lists.flatten()
    mask = pc.is_in(pc.struct_field(flat, "category"), value_set=pa.array(cats, pa.string()))
    mask_np = mask.to_numpy(zero_copy_only=False)
    return parents[mask_np], pc.struct_field(flat, "key").filter(mask)


_EMPTY: frozenset[str] = frozenset()


def entity_sets(annotations: pa.Table, protected: Iterable[str],
                public: frozenset[str] = _EMPTY) -> list[frozenset[str]]:
    """Per row of `annotations` (sid order), the set of keys of its entities in `protected` categories,
    less the keys of a public-entity policy (`public`, uedp.entities.public: not protected).

    An empty set marks a sentence with no protected entity (it is covered by its extended entity)."""
    parents, keys = _protected_flat(annotations, protected)
    key_list = keys.to_pylist()
    bounds = np.searchsorted(parents, np.arange(annotations.num_rows + 1))
    lo, hi = bounds[:-1].tolist(), bounds[1:].tolist()
    sets = [frozenset(key_list[a:b]) if b > a else _EMPTY for a, b in zip(lo, hi)]
    return [s - public if s and public else s for s in sets]


def sensitive_mask(annotations: pa.Table, protected: Iterable[str]) -> np.ndarray:
    """Boolean array over the rows of `annotations`: True where the sentence holds a protected entity."""
    parents, _ = _protected_flat(annotations, protected)
    mask = np.zeros(annotations.num_rows, dtype=bool)
    mask[parents] = True
    return mask
