"""What a public-entity policy frees (uedp.entities.public): per corpus, the share of training sentences
that hold a protected entity with and without the policy, and how many sentences it turns entity-free.

    python -m experiments.public_entities --out docs/figures [--dataset synthetic --dataset bbc_news ...]

Each corpus is annotated with the detector a run on it uses (`entities.detector = auto`: the generator's
exact spans on the synthetic corpus, the ensemble elsewhere). Writes public_entities.md and .json under --out.
The synthetic corpus draws its cities from ~170 famous ones: its number is an artefact of the generator.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc

from uedp.categories import resolve_categories
from uedp.config import EntityConfig
from uedp.data.loaders import materialize
from uedp.entities.annotations import annotate_cached, select_sids
from uedp.entities.detectors import entity_sets
from uedp.entities.public import policy_record, public_keys
from uedp.markdown import table as md_table

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


def public_entities(datasets: list[str], options: dict, policy: str, out: Path, *, command: str) -> str:
    """`freed` on each corpus of `datasets` (default DEFAULT_CORPORA) with loader `options`, as
    OUT/public_entities.json and OUT/public_entities.md (the report, citing `command`, the one that made it);
    returns the report."""
    rows = [freed(d, options, policy) for d in datasets or [d for d, _ in DEFAULT_CORPORA]]
    out.mkdir(parents=True, exist_ok=True)
    record = policy_record(policy)
    (out / "public_entities.json").write_text(json.dumps({"policy": record, "rows": rows}, indent=1))
    lines = [f"# What the public-entity policy `{policy}` frees", "",
             f"Command: `{command}`. Policy: {record['keys']} keys, "
             f"SHA-256 {record['sha256'][:16]}... (uedp.entities.public). Training sentences; detector = the one a "
             "run on the corpus uses.", "",
             md_table(["corpus", "detector", "sentences", "with a protected entity", "after the policy",
                       "freed (entity-free now)", "freed / entity sentences", "mixed sentences losing a key"],
                      [[r["dataset"], r["detector"], f"{r['train_sentences']:,}", f"{r['share_with_entity']:.1%}",
                        f"{r['share_with_entity_after']:.1%}", f"{r['freed']:,}",
                        f"{r['freed_share_of_entity_sentences']:.1%}", f"{r['mixed_sentences_losing_a_key']:,}"]
                       for r in rows]),
             "", "The synthetic corpus draws its cities from ~170 famous ones: its row is an artefact of the "
             "generator."]
    text = "\n".join(lines) + "\n"
    (out / "public_entities.md").write_text(text)
    return text
