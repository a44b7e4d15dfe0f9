"""Where a next-word model's perplexity comes from: the test perplexity of finished runs on the test sentences
WITH a protected entity and on those WITHOUT one, on the entity TOKENS and on the other tokens, and with a
reference run (FedAvg) the share of the run's excess NLL that falls on entity tokens (docs/results.md, "What
limits UeDP").

    python -m experiments.entity_perplexity RUN_DIR [RUN_DIR ...] [--reference FEDAVG_RUN_DIR] [--out FILE.md]
                                            [--limit 2000]

Each RUN_DIR is a finished job (config.json and model.pt). The test sentences are those of the run's central
evaluation (the same fixed subset: federation.eval_sentences, or --limit; in owners mode federation.eval_data).
Every number comes from one pass of the model over them (uedp.pipeline.evaluation_split, the function
summary.json's `final_tokens` comes from): its NLL on every predicted token. Entity spans are the corpus's gold
spans where it has them, else the run's detector's (the `spans` field says which), protected as the run
protected them (its categories; public entities, if the run had a policy, are not protected). A sentence is
"with an entity" when it holds a protected entity; a token is an entity token when its characters overlap one
(uedp.entity_tokens has the rule). The excess share (uedp.entity_tokens.excess_share) needs the reference to
have evaluated the same tokens (same data, tokenizer and max_len): refused otherwise; it is empty where the run
is not worse than the reference in total.
An operator diagnostic over the simulation's held-out text: it reads the users' test sentences and is not a
release of any private run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from uedp.config import RunConfig
from uedp.entity_tokens import TokenSplit, excess_share
from uedp.errors import ConfigError
from uedp.markdown import table
from uedp.models.base import UedpModel, set_weights
from uedp.pipeline import evaluation_split, load_manifest, new_model, owner_task, run_tokenizer
from uedp.tokenization import TextTokenizer


def load_run(run: Path) -> tuple[RunConfig, UedpModel, TextTokenizer]:
    """A finished run's config, final model (model.pt) and tokenizer."""
    cfg = RunConfig.from_nested(json.loads((run / "config.json").read_text()))
    if cfg.owners:
        from uedp.owners import model_shape

        tokenizer = run_tokenizer(cfg, None)[0]
        model = new_model(cfg, model_shape(tokenizer, owner_task(cfg)))
    else:
        manifest = load_manifest(cfg)
        tokenizer, model = manifest.text_tokenizer(), new_model(cfg, manifest)
    set_weights(model, torch.load(run / "model.pt", weights_only=False)["weights"])
    return cfg, model, tokenizer


def token_split(run: Path, limit: int | None = None) -> TokenSplit:
    """The run's final model on its evaluation set, per predicted token (a `limit`: that many test sentences;
    None: the run's own, federation.eval_sentences)."""
    cfg, model, tokenizer = load_run(run)
    split = evaluation_split(model, cfg, tokenizer=tokenizer, limit=limit)
    if split is None:
        raise ConfigError(f"{run}: not a next-word run with an evaluation set (task.name {cfg.task.name!r})")
    return split


def split_perplexity(run: Path, limit: int | None = None, *, reference: TokenSplit | None = None) -> dict[str, Any]:
    """The run's perplexities: all, with_entity / entity_free sentences (and their counts), entity_tokens /
    other_tokens (and their counts), spans; with `reference` (token_split of a FedAvg run on the same tokens)
    also excess_share, the share of the run's excess NLL over it on entity tokens (None: no excess)."""
    split = token_split(run, limit)
    cfg = RunConfig.from_nested(json.loads((run / "config.json").read_text()))
    with_entity = split.has_entity[split.sentence]
    out: dict[str, Any] = {"run": str(run), "strategy": cfg.strategy.name, "spans": split.spans,
                           "all": split.perplexity(), "with_entity": split.perplexity(with_entity),
                           "entity_free": split.perplexity(~with_entity),
                           "all_sentences": len(split.has_entity), "with_entity_sentences": int(split.has_entity.sum()),
                           "entity_free_sentences": int((~split.has_entity).sum())}
    out.update({k: v for k, v in split.record().items() if k not in ("all_tokens", "spans")})
    if reference is not None:
        if not np.array_equal(split.targets, reference.targets) or not np.array_equal(split.entity, reference.entity):
            raise ConfigError(f"--reference: it evaluated other tokens than {run} (another dataset, tokenizer, "
                              "task.max_len or evaluation subset): the excess NLL needs the same tokens")
        out["excess_share"] = excess_share(split.nll, reference.nll, split.entity)
    return out


def perplexity_table(runs: list[Path], *, reference: Path | None = None, limit: int | None = None,
                     out: Path | None = None) -> str:
    """The table of `split_perplexity` over `runs` (with `reference`, a FedAvg run: the share of each run's excess
    NLL on entity tokens); with `out`, also written to OUT and its rows to OUT with suffix .json."""
    if out:  # before the evaluations: a missing folder must not cost them
        out.parent.mkdir(parents=True, exist_ok=True)
    split = token_split(reference, limit) if reference else None
    rows = [split_perplexity(r, limit, reference=split) for r in runs]
    header = ["run", "strategy", "perplexity, all", "with an entity", "entity-free", "sentences (with / free)",
              "entity tokens", "other tokens", "tokens (entity / other)", "spans"]
    if reference is not None:
        header.append(f"share of excess NLL over {reference.name} on entity tokens")
    body = []
    for r in rows:
        line = [Path(str(r["run"])).name, r["strategy"], _ppl(r["all"]), _ppl(r["with_entity"]),
                _ppl(r["entity_free"]), f"{r['with_entity_sentences']} / {r['entity_free_sentences']}",
                _ppl(r["entity_tokens"]), _ppl(r["other_tokens"]),
                f"{r['entity_token_count']} / {r['other_token_count']}", r["spans"]]
        if reference is not None:
            share = r["excess_share"]
            line.append("- (no excess)" if share is None else f"{share:.3f}")
        body.append(line)
    text = table(header, body)
    if out:
        out.write_text(text + "\n")
        out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    return text


def _ppl(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
