"""What a public-entity policy frees (uedp.entities.public): per corpus, the share of training sentences
that hold a protected entity with and without the policy, and how many sentences it turns entity-free.

    python -m experiments.public_entities --out docs/figures [--dataset synthetic --dataset bbc_news ...]

Each corpus is annotated with the detector a run on it uses (`entities.detector = auto`: the generator's
exact spans on the synthetic corpus, the ensemble elsewhere). Writes public_entities.md and .json under --out.
The synthetic corpus draws its cities from ~170 famous ones: its number is an artefact of the generator.
"""

from __future__ import annotations

import pyarrow.compute as pc

from uedp.categories import resolve_categories
from uedp.config import EntityConfig
from uedp.data.loaders import materialize
from uedp.entities.annotations import annotate_cached, select_sids
from uedp.entities.detectors import entity_sets
from uedp.entities.public import public_keys

DEFAULT_CORPORA = (("synthetic", ()), ("bbc_news", ()), ("shakespeare", ()))


def freed(dataset: str, options: dict, policy: str) -> dict[str, object]:
    _, corpus = materialize(dataset, **options)
    detector = EntityConfig().detector_for(dataset)
    _, annotations = annotate_cached(corpus, detector)
    train = pc.equal(corpus.table.column("split"), "train")
    ann = select_sids(annotations, corpus.table.filter(train).column("sid").to_numpy())
    protected = resolve_categories("all")
    before = entity_sets(ann, protected)
    after = entity_sets(ann, protected, public_keys(policy))
    n = len(before)
    with_before = sum(1 for e in before if e)
    with_after = sum(1 for e in after if e)
    return {"dataset": dataset, "detector": detector, "policy": policy, "train_sentences": n,
            "with_entity": with_before, "with_entity_after": with_after,
            "share_with_entity": with_before / n, "share_with_entity_after": with_after / n,
            "freed": with_before - with_after,
            "freed_share_of_entity_sentences": (with_before - with_after) / with_before,
            "mixed_sentences_losing_a_key": sum(1 for b, a in zip(before, after) if a and a != b)}
