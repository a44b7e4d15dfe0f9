"""The server of strategy=dp_bart (local DP, docs/dp-bart-system.md): no rounds of updates; one query.

1. Load the public rewriter (the same one the clients load).
2. Send every invited node one query message; each rewrites its own sentences once (client/rewrite.py) and
   replies with the rewrites only (plus labels, privatized when rewrite.label_epsilon is set). Then record the
   local guarantee in `local_dp.json` before anything is trained (the privacy record comes before any
   model): per document (rewrite.epsilon, rewrite.delta), per user by composition over
   rewrite.max_documents (a public cap; with None, over the largest owner's count, labelled data-dependent),
   per entity held by f documents.
3. Train the model centrally on the pooled rewrites (post-processing of LDP outputs) for rewrite.epochs
   epochs with the train.* optimizer, learning rate and batch size, evaluating on the ORIGINAL test split
   after each epoch, on the device federation.device resolves to here (uedp.devices); write metrics,
   summary.json and model.pt (and for a hf, gpt2 or bert model the release in Hugging Face format:
   uedp.models.export). The nodes' rewriting stays on their CPUs.

The summary has no central claim (eps_uedp = eps_user = inf): its local epsilons are `eps_local_document`,
`eps_local_user` and `eps_local_entity`, in other units than the central ones (`local.units`). Released
in the clear beside the rewrites: user ids (who replied), document counts, splits, and labels unless
rewrite.label_epsilon is set; a classification run with labels in the clear is reported `private: false`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from server.metrics import MetricsWriter
from strategies import run_places
from uedp.config import RunConfig
from uedp.devices import resolve_device
from uedp.files import atomic_path, atomic_write_json
from uedp.models.base import CLASSIFICATION, UedpModel, get_weights
from uedp.models.export import export_release
from uedp.pipeline import (
    EncodedSentences,
    encode_sentences,
    model_spec,
    private_dataset,
    release_options,
    rewriter_corpus,
    server_data,
)
from uedp.privacy.mechanisms import spec_for
from uedp.privacy.noise import FIXED_SEED_WARNING
from uedp.protocol import REWRITE_RECORD, REWRITES_RECORD
from uedp.rewriting.public_text import check_rewriter_sources
from uedp.rewriting.rewrite import (
    RewriteSettings,
    guarantee,
    mechanism_for,
    rewriter_digest,
    rewriter_for,
)
from uedp.server_data import ServerData
from uedp.summary import write_summary
from uedp.tasks import get_task
from uedp.training import LocalTraining, evaluate_encoded, local_train

LOCAL_DP = "local_dp.json"
LABELS_IN_CLEAR = "labels released in the clear (rewrite.label_epsilon None): not private"


def pooled_epochs(model: UedpModel, pooled: EncodedSentences, test: EncodedSentences | None, cfg: RunConfig
                  ) -> Iterator[tuple[int, float, int, dict[str, float]]]:
    """Central training on pooled sentences: rewrite.epochs epochs with the train.* optimizer, batch size and
    learning rate, every sentence weight 1; yields (epoch, train loss, steps, test metrics or {}) per epoch.
    The dp_bart server trains on the pooled rewrites with it, studies/dp_bart.py's reference on the
    original sentences."""
    t = cfg.train
    training = LocalTraining.from_config(dataclasses.replace(t, local_epochs=1, local_steps=None))
    rows, weights = torch.arange(len(pooled)), torch.ones(len(pooled))
    for epoch in range(1, cfg.rewrite.epochs + 1):
        loss, steps = local_train(model, pooled, rows, weights, training)
        yield epoch, loss, steps, (evaluate_encoded(model, test) if test is not None else {})


@contextmanager
def all_cores() -> Iterator[None]:
    """torch on up to 4 of this machine's cores for the central training on the pooled rewrites (the frozen
    encoder embeds every rewrite once: most of a job's time), restored after: an in-process run pins torch to one
    thread for its clients, which have all finished by then."""
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class Rewrites:
    """The owners' answers to the query: the pooled rewrites (and labels), the largest owner's count of documents,
    and the operator counts of metrics row 0 (outside the guarantee)."""

    texts: list[str]
    labels: list[int] | None
    most: int
    sampled: int
    replies: int
    failed: int
    seconds: float

    def row(self) -> dict[str, Any]:
        return {"round": 0, "seconds": round(self.seconds, 3), "sampled": self.sampled, "replies": self.replies,
                "failed": self.failed, "missing": self.sampled - self.replies - self.failed,
                "documents": len(self.texts)}


def run_local_dp(grid: Grid, cfg: RunConfig, *, stream: TextIO) -> dict[str, Any]:
    """The dp_bart run (module docstring): the guarantee checked, the query, local_dp.json, the central training,
    then summary.json, model.pt and a Hugging Face release."""
    t_start = time.monotonic()
    # the rewriter's public text is not the users' own (before anything is written)
    check_rewriter_sources(*private_dataset(cfg))
    out = Path(cfg.federation.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg.to_nested(), indent=1))
    settings = cfg.rewrite_settings()
    data = server_data(cfg)
    rewriter = rewriter_for(settings, rewriter_corpus(cfg), path=cfg.rewrite.rewriter)
    fixed = cfg.privacy.seed is not None
    warnings = local_warnings(cfg, settings, fixed=fixed, stream=stream)
    mechanism = mechanism_for(rewriter, settings)
    # The guarantee BEFORE any owner releases anything: bad settings fail here, and with the public cap it is the
    # final one (max_documents None: recomputed below from the largest owner's count).
    local = guarantee(mechanism, settings, documents_per_user=settings.max_documents or 1,
                      warning="; ".join(warnings) or None)
    digest = rewriter_digest(rewriter)  # sent with the query (a node with another rewriter refuses) and recorded
    rewrites = query_owners(grid, cfg, {**settings.wire(), "rewriter": digest}, population=data.population)
    metrics = MetricsWriter(out, stream=stream)
    metrics.write(rewrites.row())
    print(f"rewrites from {rewrites.replies} of {rewrites.sampled} owners: {len(rewrites.texts)} documents "
          f"({rewrites.seconds:.1f} s)", file=stream, flush=True)
    if not rewrites.texts:
        raise RuntimeError("dp_bart: no owner returned a rewrite; see the clients' errors")
    # The public cap, or (max_documents None) the largest owner's count: the per-user composition covers it.
    documents = settings.max_documents or rewrites.most
    if documents != local["documents_per_user"]:
        local = guarantee(mechanism, settings, documents_per_user=documents, warning="; ".join(warnings) or None)
    local["rewriter"], local["public_text"] = rewriter.identity(), rewriter.public
    local["rewriter_digest"], local["rewriter_path"] = digest, cfg.rewrite.rewriter or None
    atomic_write_json(out / LOCAL_DP, local, indent=1, default=str)  # before any model exists
    print(f"dp_bart ({local['mechanism']}): per document eps {settings.epsilon:g} delta "
          f"{settings.mechanism_delta:g} sigma {local['sigma']:.4g}; per user eps {local['epsilon_user']:.4g} over "
          f"{documents} documents; population={data.population}", file=stream, flush=True)
    metric = get_task(cfg.task.name).metric  # the task registry (uedp.tasks)
    model, device, initial, final = train_on_rewrites(cfg, data, rewrites, metrics, metric=metric,
                                                      seed=cfg.privacy.seed, stream=stream)
    spec = spec_for(cfg.strategy.name, cfg.strategy.estimator)  # local (dp_bart): summary method "local_dp"
    summary = {
        "strategy": spec.strategy, "method": spec.summary_method, "estimator": None, "rounds": cfg.rewrite.epochs,
        "noise_multiplier": None, "sigma": local["sigma"], "Z": None, "delta": settings.delta,
        "population": data.population, "stopped_by_budget": False,
        "eps_uedp": float("inf"), "eps_user": float("inf"), "eps_undetected": float("inf"),
        "eps_rdp_bound": float("inf"),
        "eps_local_document": settings.epsilon, "eps_local_user": local["epsilon_user"],
        "eps_local_entity": local["epsilon_entity"], "local": local,
        "metric": metric, "initial": initial, "final": final, "private": not warnings,
        "warning": "; ".join(warnings) or None, "tokenizer": data.tokenizer_info, "detector": None,
        "metrics_note": "per-round counts (owners replying, documents) are operator logs outside the guarantee",
        "device": str(device), "seconds": round(time.monotonic() - t_start, 1),
    }
    write_summary(out, summary, kind="local")
    with atomic_path(out / "model.pt") as tmp:
        torch.save({"weights": get_weights(model), "config": cfg.to_nested()}, tmp)
    for folder in export_release(out, model, tokenizer=data.tokenizer, summary=summary,  # after local_dp.json
                                 **release_options(cfg)):
        print(f"released in Hugging Face format: {folder}", file=stream, flush=True)
    return summary


def local_warnings(cfg: RunConfig, settings: RewriteSettings, *, fixed: bool, stream: TextIO) -> list[str]:
    """Why the run is not private or its per-user epsilon depends on the data, each printed: a fixed seed, labels
    in the clear (a classification run with rewrite.label_epsilon None), rewrite.max_documents None."""
    warnings = [FIXED_SEED_WARNING] if fixed else []
    if cfg.task.name == CLASSIFICATION and settings.label_epsilon is None:
        warnings.append(LABELS_IN_CLEAR)
    if settings.max_documents is None:
        warnings.append("rewrite.max_documents None (every document): the per-user epsilon is computed from the "
                        "data")
    for w in warnings:
        print(f"WARNING: {w}", file=stream, flush=True)
    return warnings


def query_owners(grid: Grid, cfg: RunConfig, query: dict[str, Any], *, population: int) -> Rewrites:
    """The one query, `query` (the rewrite settings and the rewriter's digest), to every node that stands in a
    place, and their rewrites pooled. The run's place map (strategies/build.py run_places): the invited owners'
    keys where federation.places names them; otherwise node order on any grid (dp_bart's guarantee is per
    document: which owners are asked does not change one document's rewrite, and who replied is released in the
    clear: module docstring)."""
    assignment = run_places(cfg, spec_for(cfg.strategy.name, cfg.strategy.estimator), population).assign(grid)
    nodes = [n for n in assignment.nodes if n is not None]
    ask = RecordDict({REWRITE_RECORD: ConfigRecord(query)})
    t0 = time.monotonic()
    replies = list(grid.send_and_receive([Message(ask, dst_node_id=n, message_type="query") for n in nodes],
                                         timeout=cfg.federation.round_timeout))
    texts: list[str] = []
    labels: list[int] | None = [] if cfg.task.name == CLASSIFICATION else None
    failed = most = 0
    for reply in replies:
        if reply.has_error():
            failed += 1
            continue
        record = reply.content[REWRITES_RECORD]
        got = list(record["texts"])
        texts.extend(got)
        most = max(most, len(got))
        if labels is not None:
            labels.extend(int(y) for y in record["labels"])
    return Rewrites(texts, labels, most, sampled=len(nodes), replies=len(replies) - failed, failed=failed,
                    seconds=time.monotonic() - t0)


def train_on_rewrites(cfg: RunConfig, data: ServerData, rewrites: Rewrites, metrics: MetricsWriter, *, metric: str,
                      seed: int | None, stream: TextIO) -> tuple[UedpModel, torch.device, dict[str, float],
                                                                 dict[str, float]]:
    """The central training on the pooled rewrites (`pooled_epochs`), on the device federation.device resolves to
    here, a metrics row and a progress line per epoch; returns the model, the device, the initial and the final
    evaluation on the original test split ({} without one)."""
    device = resolve_device(cfg.federation.device)
    print(f"device: {device} (federation.device = {cfg.federation.device}: the central training and evaluation)",
          file=stream, flush=True)
    with all_cores():  # every owner has replied: nothing else competes for the cores now
        model = data.new_model(model_spec(cfg), seed=seed)
        model = model if device.type == "cpu" else model.to(device)
        initial = evaluate_encoded(model, data.test) if data.test is not None else {}
        pooled = encode_sentences(data.tokenizer, rewrites.texts, rewrites.labels, task=cfg.task.name,
                                  max_len=cfg.task.max_len)
        final: dict[str, float] = initial
        t_epoch = time.monotonic()
        for epoch, loss, steps, final in pooled_epochs(model, pooled, data.test, cfg):
            metrics.write({"round": epoch, "seconds": round(time.monotonic() - t_epoch, 3), "train_loss": loss,
                           "steps": steps, **{f"test_{k}": v for k, v in final.items()}})
            t_epoch = time.monotonic()
            metrics.progress(round=epoch, rounds=cfg.rewrite.epochs, eps=None,
                             metric=(metric, final[metric]) if metric in final else None, extra=f"steps={steps}")
    return model, device, initial, final
