"""Where a next-word model's perplexity comes from: the test perplexity of finished runs on the test sentences
WITH a protected entity and on those WITHOUT one (docs/results.md, "What limits UeDP").

    python -m experiments.entity_perplexity RUN_DIR [RUN_DIR ...] [--out FILE.md] [--limit 2000]

Each RUN_DIR is a finished job (config.json and model.pt). The test sentences are those of the run's central
evaluation (the same fixed subset: federation.eval_sentences, or --limit), split by the run's own entity sets
(its detector and protected categories; public entities, if the run had a policy, are not protected).
An operator diagnostic over the simulation's held-out text: it reads the users' test sentences and is not a
release of any private run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from uedp.categories import resolve_categories
from uedp.config import RunConfig
from uedp.entities.annotations import select_sids
from uedp.entities.detectors import entity_sets
from uedp.entities.public import public_keys
from uedp.models.base import set_weights
from uedp.pipeline import EVAL_SUBSET_SEED, encode_sentences, load_manifest, new_model
from uedp.training import evaluate_encoded


def split_perplexity(run: Path, limit: int) -> dict[str, object]:
    cfg = RunConfig.from_nested(json.loads((run / "config.json").read_text()))
    manifest = load_manifest(cfg)
    rows = pq.read_table(Path(manifest.corpus_dir) / "sentences.parquet", filters=[("split", "=", "test")])
    rows = rows.filter(pa.compute.is_in(rows.column("user"), value_set=pa.array(manifest.users)))
    limit = limit or cfg.federation.eval_sentences
    if 0 < limit < rows.num_rows:  # the run's own evaluation subset (uedp.pipeline.load_split)
        keep = np.sort(np.random.default_rng(EVAL_SUBSET_SEED).choice(rows.num_rows, size=limit, replace=False))
        rows = rows.take(pa.array(keep))
    ann = select_sids(pq.read_table(manifest.annotations), rows.column("sid").to_numpy())
    sets = entity_sets(ann, resolve_categories(cfg.entities.protected), public_keys(cfg.entities.public))
    has = np.array([bool(s) for s in sets])
    model = new_model(cfg, manifest)
    set_weights(model, torch.load(run / "model.pt", weights_only=False)["weights"])
    tok = manifest.text_tokenizer()
    texts = rows.column("text").to_pylist()
    out: dict[str, object] = {"run": str(run), "strategy": cfg.strategy.name}
    for name, mask in (("all", np.ones_like(has)), ("with_entity", has), ("entity_free", ~has)):
        chosen = [t for t, m in zip(texts, mask) if m]
        enc = encode_sentences(tok, chosen, None, task=cfg.task.name, max_len=cfg.task.max_len)
        out[name] = evaluate_encoded(model, enc)["perplexity"]
        out[f"{name}_sentences"] = len(chosen)
    return out
