"""A next-word model's loss split by token: the predicted tokens that fall on a protected entity, and the rest.

    split = evaluation_split(model, cfg)            # uedp.pipeline: the run's evaluation set, one forward pass
    split.record()                                  # summary.json's `final_tokens`
    excess_share(run.nll, fedavg.nll, run.entity)   # the share of a run's excess NLL that is on entity tokens

`evaluation_split` reads the run's configuration and calls `evaluation_tokens` on the run's evaluation sentences
(`corpus_evaluation_sentences`, `owner_evaluation_sentences`).

The parts, for other sets of sentences:

    spans = protected_spans(annotations, protected, public)       # per sentence, its protected (start, end)s
    marks = entity_targets(tokenizer, texts, spans, max_len=32)   # per sentence, a bool per predicted token
    split = split_tokens(model, encode_sentences(...), marks, spans="gold")

Which tokens are entity tokens. A sentence is framed [BOS] t_1 .. t_n [EOS] and cut at `max_len`
(uedp.tokenization.TextTokenizer.frame); its predicted (target) tokens are t_1 .. t_n and [EOS], as far as the
cut keeps them, exactly the tokens whose NLL the perplexity averages (uedp.tasks.NextWordTask). A target t_i is
an ENTITY token when its character span [s, e) overlaps the span [a, b) of a protected entity of the sentence
(s < b and a < e); [EOS] never is. The characters of a token are its offsets into the original sentence, which
every tokenizer of this project gives: each is a `tokenizers.Tokenizer` (TextTokenizer.backend: the trained
ones, a checkpoint's, GPT-2's), whose encodings keep the alignment through normalization, so no fallback
(re-encoding the span's text) is needed or implemented; a byte-level token of part of a character carries the
whole character's offsets. Byte-level BPE and Metaspace pieces carry the space BEFORE a word ("ĠParis",
"▁Paris"), so with half-open spans the word after an entity ("ĠBob" after "Paris") and a lone space piece
before one are not entity tokens, while a space piece inside a multi-word entity ("Gutierrez Inc") is.

Which spans. Protected entities are those `entity_sets` counts (uedp.entities.detectors): a category of
entities.protected whose key is not public under entities.public. The evaluation sentences take them from the
corpus's gold spans where it has them (the synthetic corpus, a JSONL file with entities: `spans` "gold"),
otherwise from the run's detector (its cached annotations: `spans` "detector").

Perplexity here is exp(mean NLL) over the chosen tokens, as uedp.tasks computes it (inf past exp(709)), and None
over no token. Like the run's `final`, it is a measurement on the evaluation sentences: in a simulation they are
the users' own held-out text, outside the guarantee (server/app.py OUTSIDE_GUARANTEE).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from uedp.data.corpus import SCHEMA, Corpus
from uedp.data.store import META
from uedp.devices import evaluation_model
from uedp.entities.annotations import annotate_cached, load_annotations, select_sids
from uedp.entities.detectors import DETECTORS
from uedp.entities.public import public_keys
from uedp.errors import ConfigError
from uedp.models.base import UedpModel
from uedp.owners import OwnerTask, read_owner_file
from uedp.prepare.corpus import read_split
from uedp.prepare.encoding import EncodedSentences, encode_sentences
from uedp.prepare.entities import EntityPolicy
from uedp.prepare.manifest import Manifest
from uedp.tasks import NEXT_WORD, NextWordTask
from uedp.tokenization import TextTokenizer
from uedp.training import batch_of

SPAN_SOURCES = ("gold", "detector")
Spans = list[tuple[int, int]]


@dataclass(frozen=True)
class TokenSplit:
    """Per predicted token of a set of sentences (sentence order, then token order): its NLL under one model,
    whether it is an entity token, its id and its sentence; per sentence, whether it holds a protected entity
    (even one the `max_len` cut dropped). `spans`: where the entity spans came from (SPAN_SOURCES)."""

    nll: np.ndarray  # float64 [T]
    entity: np.ndarray  # bool [T]
    targets: np.ndarray  # int64 [T]
    sentence: np.ndarray  # int64 [T]
    has_entity: np.ndarray  # bool [S]
    spans: str

    def perplexity(self, tokens: np.ndarray | None = None) -> float | None:
        """exp(mean NLL) over `tokens` (a bool mask over the tokens; None: all); None when it selects none."""
        return perplexity_of(self.nll if tokens is None else self.nll[tokens])

    def record(self) -> dict[str, Any]:
        """summary.json's `final_tokens` (uedp.summary.KEYS)."""
        return {"entity_tokens": self.perplexity(self.entity), "other_tokens": self.perplexity(~self.entity),
                "all_tokens": self.perplexity(), "entity_token_count": int(self.entity.sum()),
                "other_token_count": int((~self.entity).sum()), "spans": self.spans}


    def context(self) -> dict[str, Any]:
        """The other (non-entity) tokens split by their sentence: in entity-free sentences and in sentences that
        hold a protected entity (a model that never trains on the second kind loses their context too)."""
        in_entity = self.has_entity[self.sentence]
        return {"other_tokens_free_sentences": self.perplexity(~self.entity & ~in_entity),
                "other_tokens_entity_sentences": self.perplexity(~self.entity & in_entity),
                "other_token_count_entity_sentences": int((~self.entity & in_entity).sum())}


def perplexity_of(nll: np.ndarray) -> float | None:
    """exp(mean of `nll`), inf past exp(709) (a diverged model), None for no token."""
    if len(nll) == 0:
        return None
    mean = float(np.sum(nll, dtype=np.float64)) / len(nll)
    return math.exp(mean) if mean < 709.0 else math.inf


def excess_share(run_nll: np.ndarray, reference_nll: np.ndarray, entity: np.ndarray) -> float | None:
    """The share of the run's excess NLL over a reference (FedAvg) that falls on entity tokens:
    sum over entity tokens of (run - reference) / sum over all tokens of (run - reference), both models' NLL on
    the same tokens. None when the total excess is <= 0 or not finite: the run is no worse than the reference
    on these tokens, and there is no excess to share. Below 0 or above 1 when the run beats the reference on
    one kind of token and loses on the other (e.g. 1.2: the entity tokens carry all the excess and more, the
    other tokens are better than the reference's)."""
    run, ref, mask = (np.asarray(run_nll, dtype=np.float64), np.asarray(reference_nll, dtype=np.float64),
                      np.asarray(entity, dtype=bool))
    if not run.shape == ref.shape == mask.shape or run.ndim != 1:
        raise ValueError(f"excess_share: run_nll {run.shape}, reference_nll {ref.shape} and entity {mask.shape} "
                         "must be vectors over the same tokens")
    excess = run - ref
    total = float(excess.sum())
    if not math.isfinite(total) or total <= 0:
        return None
    return float(excess[mask].sum()) / total


def protected_spans(annotations: pa.Table, protected: Iterable[str], public: frozenset[str] = frozenset()
                    ) -> list[Spans]:
    """Per row of `annotations` (uedp.entities.detectors.ANNOTATION_SCHEMA), the (start, end) character spans
    of its protected entities: the rule of `entity_sets` (a category in `protected`, a key not in `public`)."""
    cats = frozenset(protected)
    return [[(e["start"], e["end"]) for e in ents or () if e["category"] in cats and e["key"] not in public]
            for ents in annotations.column("entities").to_pylist()]


def entity_targets(tokenizer: TextTokenizer, texts: Sequence[str], spans: Sequence[Spans], *, max_len: int
                   ) -> list[np.ndarray]:
    """Per sentence, one bool per predicted token of its next-word framing ([BOS] tokens [EOS] cut at `max_len`):
    True for an entity token (module docstring)."""
    if len(texts) != len(spans):
        raise ValueError(f"entity_targets: {len(texts)} sentences and {len(spans)} span lists")
    out = []
    for text, enc, sp in zip(texts, tokenizer.backend.encode_batch(list(texts), add_special_tokens=False), spans):
        if any(e > len(text) for _, e in enc.offsets):
            raise ValueError(f"tokenizer from {tokenizer.source}: token offsets beyond the sentence's end")
        flags = [any(a < e and s < b for a, b in sp) for s, e in enc.offsets] if sp else [False] * len(enc.ids)
        out.append(np.array([False, *flags, False][:max_len][1:], dtype=bool))  # the targets of frame(mode="lm")
    return out


@torch.no_grad()
def split_tokens(model: UedpModel, data: EncodedSentences, marks: Sequence[np.ndarray], *, spans: str,
                 has_entity: np.ndarray | None = None, batch_size: int = 256) -> TokenSplit:
    """Every predicted token's NLL under `model` (one pass over `data`, length-sorted batches on the model's
    device) with its entity mark (`marks`: `entity_targets` of the same sentences). `has_entity` (per sentence;
    None: a sentence with an entity token)."""
    if spans not in SPAN_SOURCES:
        raise ValueError(f"split_tokens: spans must be one of {', '.join(SPAN_SOURCES)}, got {spans!r}")
    if len(marks) != len(data):
        raise ValueError(f"split_tokens: {len(marks)} mark arrays for {len(data)} sentences")
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    rows_nll: list[np.ndarray] = [np.empty(0)] * len(data)
    was_training = model.training
    model.eval()
    try:
        for chunk in torch.argsort(data.mask.sum(dim=1)).split(batch_size):
            batch = batch_of(data, chunk)
            nll, mask = NextWordTask.token_nll(model, batch if device.type == "cpu" else batch.to(device))
            nll, counts = nll.double().cpu().numpy(), mask.sum(dim=1).long().cpu().numpy()
            for i, row in enumerate(chunk.tolist()):
                rows_nll[row] = nll[i, : counts[i]]
    finally:
        model.train(was_training)
    counts = np.array([len(n) for n in rows_nll], dtype=np.int64)
    wrong = [i for i, (m, n) in enumerate(zip(marks, counts)) if len(m) != n]
    if wrong:
        raise ValueError(f"split_tokens: sentence {wrong[0]} has {counts[wrong[0]]} predicted tokens and "
                         f"{len(marks[wrong[0]])} marks (marks of other sentences, tokenizer or max_len?)")
    has = (np.array([bool(m.any()) for m in marks], dtype=bool) if has_entity is None
           else np.asarray(has_entity, dtype=bool))
    if has.shape != (len(data),):
        raise ValueError(f"split_tokens: has_entity has shape {has.shape}, expected ({len(data)},)")
    if not len(data):
        return TokenSplit(np.zeros(0), np.zeros(0, bool), np.zeros(0, np.int64), np.zeros(0, np.int64), has, spans)
    lengths = data.mask.sum(dim=1)
    targets = np.concatenate([data.ids[i, 1: int(lengths[i])].numpy() for i in range(len(data))])
    return TokenSplit(nll=np.concatenate(rows_nll), entity=np.concatenate([np.asarray(m, dtype=bool) for m in marks]),
                      targets=targets.astype(np.int64), sentence=np.repeat(np.arange(len(data)), counts),
                      has_entity=has, spans=spans)


@dataclass(frozen=True)
class EvaluationSentences:
    """A run's central evaluation sentences: their corpus rows (sid order), the annotations of those rows, and
    whether the spans are the corpus's gold ones (`gold`) or its detector's."""

    rows: pa.Table
    annotations: pa.Table
    gold: bool


def owner_evaluation_sentences(path: str, task: OwnerTask) -> EvaluationSentences:
    """Every sentence of the evaluation file `path` (owners mode: federation.eval_data), with its gold spans
    where the file has them, else `task.detector`'s (cached)."""
    corpus = read_owner_file(path, task)
    rows = corpus.table.sort_by("sid")
    ann = (DETECTORS.create("gold").annotate(corpus) if corpus.has_gold
           else select_sids(annotate_cached(corpus, task.detector)[1], rows.column("sid").to_numpy()))
    return EvaluationSentences(rows, ann, corpus.has_gold)


def corpus_evaluation_sentences(manifest: Manifest, limit: int | None) -> EvaluationSentences:
    """The participants' test sentences of the prepared run `manifest` (a `limit`: that fixed subset of them,
    uedp.prepare.corpus.read_split), with the corpus's gold spans where it has them, else the run's annotations."""
    rows = read_split(manifest.corpus_dir, manifest.users, "test", limit=limit)
    rows = rows.select(SCHEMA.names).cast(SCHEMA).sort_by("sid")
    meta = json.loads((Path(manifest.corpus_dir) / META).read_text(encoding="utf-8"))
    gold = bool(meta["has_gold"])
    ann = (DETECTORS.create("gold").annotate(Corpus(meta["name"], rows, has_gold=True)) if gold
           else select_sids(load_annotations(manifest.annotations), rows.column("sid").to_numpy()))
    return EvaluationSentences(rows, ann, gold)


def evaluation_tokens(model: UedpModel, sentences: EvaluationSentences, tokenizer: TextTokenizer, *,
                      policy: EntityPolicy, max_len: int, device: str = "cpu") -> TokenSplit:
    """`split_tokens` of a next-word run's evaluation `sentences`, encoded with `tokenizer` at `max_len`, their
    entities protected as `policy` protects them (entities.protected less entities.public). `device`: where to
    evaluate (the model itself on the CPU, elsewhere its one device copy, refreshed in place:
    uedp.devices.evaluation_model). The run configuration's edge is uedp.pipeline.evaluation_split."""
    spans = protected_spans(sentences.annotations, policy.categories(), public_keys(policy.public))
    texts = sentences.rows.column("text").to_pylist()
    data = encode_sentences(tokenizer, texts, None, task=NEXT_WORD, max_len=max_len)
    if len(data) == 0:
        raise ConfigError("the run's evaluation set has no sentence (federation.eval_sentences / eval_data)")
    marks = entity_targets(tokenizer, texts, spans, max_len=max_len)
    return split_tokens(evaluation_model(model, device), data, marks,
                        spans="gold" if sentences.gold else "detector", has_entity=np.array([bool(s) for s in spans]))
