"""Entity detection on plain strings, for an app that holds its own texts (no Corpus, no cache).

    found = detect(["Call David Johnson at +44 20 7946 0018.", "Nice weather."])   # balanced profile
    found[0]  -> [DetectedEntity(start=5, end=18, category="PERSON", key="PERSON:david johnson"), ...]
    keys = protected_keys(found, protected="all")     # per text: frozenset of protected entity keys

`protected_keys` is what a node's selection needs (uedp.flower.selection.select_rows): a text whose set is
empty has no protected entity (it is covered by its extended entity). The detectors are the registry's
(uedp.entities.detectors: `balanced` is the default on real text, `recall` flags the most, `spacy+rules`,
`ensemble`, `rules`, `spacy`); `gold` needs a corpus's own labels and is refused here.

`load_detector(name)` builds a detector once per process and runs it on a warm-up text, so that whatever it
loads (spaCy's model: seconds) is in memory; `detect` uses it. A ClientApp that calls it from its lifespan
pays that load in the first message its process handles, before the handler runs:

    @app.lifespan()
    def warm_detector(context: Context) -> Iterator[None]:
        load_detector(str(context.run_config["detector"]))
        yield
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import pyarrow as pa

from uedp.categories import resolve_categories
from uedp.entities.detectors import DETECTORS, Detector, build_annotations
from uedp.entities.public import public_keys
from uedp.errors import ConfigError

DEFAULT_DETECTOR = "balanced"
WARM_UP_TEXT = "Call David Johnson in London at +44 20 7946 0018 or write to david.johnson@example.com."


class DetectedEntity(NamedTuple):
    start: int
    end: int
    category: str
    key: str  # uedp.categories.entity_key: the entity's identity for sampling (category:normalized text)


@functools.lru_cache(maxsize=8)
def load_detector(detector: str = DEFAULT_DETECTOR) -> Detector:
    """The detector named `detector`, built and run once on WARM_UP_TEXT: once per process and name (cached),
    so that its first real call costs what a later one does. Unknown names and "gold" raise ConfigError."""
    if detector == "gold":
        raise ConfigError("detector 'gold' reads a corpus's own labels: detect() on plain strings needs a real "
                          "detector (balanced, recall, spacy+rules, ensemble, spacy, rules)")
    det = DETECTORS.create(detector)
    warm = pa.table({"sid": pa.array([0], pa.int64()), "text": pa.array([WARM_UP_TEXT], pa.string()),
                     "gold": pa.nulls(1)})
    build_annotations([0], [WARM_UP_TEXT], det._spans(warm), identity=det.identity(),  # noqa: SLF001
                      source=detector)
    return det


def _annotations(texts: Sequence[str], detector: str) -> pa.Table:
    det = load_detector(detector)
    if not all(isinstance(t, str) for t in texts):
        raise TypeError("detect() takes a sequence of str")
    rows = pa.table({"sid": pa.array(range(len(texts)), pa.int64()), "text": pa.array(list(texts), pa.string()),
                     "gold": pa.nulls(len(texts))})
    return build_annotations(list(range(len(texts))), list(texts), det._spans(rows),  # noqa: SLF001 - same package
                             identity=det.identity(), source=detector)


def detect(texts: Sequence[str], *, detector: str = DEFAULT_DETECTOR) -> list[list[DetectedEntity]]:
    """Per text, its entities of every category (start, end, category, key), sorted by position."""
    table = _annotations(texts, detector)
    return [[DetectedEntity(e["start"], e["end"], e["category"], e["key"]) for e in row]
            for row in table.column("entities").to_pylist()]


def protected_keys(found: Iterable[Sequence[DetectedEntity]], *, protected: str | Iterable[str] = "all",
                   public: str = "none") -> list[frozenset[str]]:
    """Per text, the keys of its entities in the `protected` categories (a group such as "all" or "pii", or
    category names), less those a public-entity policy frees (`public`: uedp.entities.public)."""
    cats = resolve_categories(protected)
    freed = public_keys(public)
    return [frozenset(e.key for e in row if e.category in cats) - freed for row in found]


__all__ = ["DEFAULT_DETECTOR", "DetectedEntity", "detect", "protected_keys"]
