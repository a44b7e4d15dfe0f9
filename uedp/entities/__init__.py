"""Sensitive-entity detection: categories and keys, detectors (gold, rules, spaCy, spaCy + rules), the
on-disk annotation cache, detector quality against gold, and corpus statistics.

    from uedp.entities import annotate, entity_sets, resolve_categories
    table = annotate(corpus, "spacy+rules")
    sets = entity_sets(table, resolve_categories("pii"))
"""

from uedp.categories import (
    CATEGORIES,
    GROUPS,
    LABEL_MAP,
    entity_key,
    key_category,
    resolve_categories,
)
from uedp.entities.annotations import (
    annotate,
    annotate_cached,
    annotation_path,
    load_annotations,
    read_user_annotations,
    save_annotations,
    select_sids,
)
from uedp.entities.detectors import (
    ANNOTATION_SCHEMA,
    DETECTORS,
    Detector,
    detector_identity,
    entity_sets,
    sensitive_mask,
)
from uedp.entities.quality import detection_quality
from uedp.entities.rules import find_rule_spans, luhn_valid
from uedp.entities.stats import corpus_stats

__all__ = [
    "ANNOTATION_SCHEMA", "CATEGORIES", "DETECTORS", "GROUPS", "LABEL_MAP", "Detector", "annotate",
    "annotate_cached", "annotation_path", "corpus_stats", "detection_quality", "detector_identity",
    "entity_key", "entity_sets", "find_rule_spans", "key_category", "load_annotations", "luhn_valid",
    "read_user_annotations", "resolve_categories", "save_annotations", "select_sids", "sensitive_mask",
]
