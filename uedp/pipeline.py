"""From a RunConfig to what the server and the clients train on: the edge where a run's configuration enters
the library's data and model steps. Each function here unpacks the RunConfig once and calls the steps of
uedp.prepare (corpus, entities, tokenizer, manifest, encoding, users), uedp.owners, uedp.server_data,
uedp.entity_tokens and uedp.models (build, export), or builds the small frozen values they take (an OwnerTask, a
ModelSpec, a PretrainRun), with the plain values they use. Below the apps no other module reads a RunConfig's
fields (uedp.config and its Hydra view aside, and the Flower component's own `UserEntityDP.from_run_config`).

`prepare(cfg)` runs once on the server side before round 1: it materializes the corpus (Parquet), detects
entities (cached annotations), builds the tokenizer (`run_tokenizer`: by default trained on a public corpus,
cached; uedp.prepare.tokenizer) and writes a small manifest naming these files (uedp.prepare.manifest). Clients
then read only their own user's rows and annotations (`load_user_data`), so no client ever loads other users'
text. A client that finds no manifest (a data owner on another machine) prepares its own copy from the same
config. Node `partition-id` i is user `users[i]` (users in storage order). With `federation.num_nodes` N > 0,
only the first N users take part (uedp.prepare.corpus.participants).

The rest, by what it is for: `load_split` (the server's evaluation set), `server_data` (what the server uses,
in either data mode: uedp.server_data), `owner_task` (what a data owner's own file is read and encoded for:
uedp.owners), `model_spec` and `new_model` (the run's model: uedp.models.build, with the checkpoint's tokenizer,
allow_missing and task.max_len refusals, LoRA) and `final_model` (a finished run's), `pretrain_run` (what a public
start is pretrained with: uedp.pretraining), `private_dataset` and `rewriter_corpus` (the dataset whose users'
text the run trains on, which a tokenizer, public start or rewriter may not have learnt from),
`evaluation_split` (the loss on entity tokens and on the rest: uedp.entity_tokens), `release_options` (what
uedp.models.export.export_release takes besides the model). `EncodedSentences.truncation()` counts the sentences
task.max_len cut (uedp.prepare.encoding).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from uedp.config import RunConfig
from uedp.data.corpus import Corpus
from uedp.entities.annotations import annotate_cached
from uedp.entity_tokens import TokenSplit, corpus_evaluation_sentences, evaluation_tokens, owner_evaluation_sentences
from uedp.models.base import CLASSIFICATION, NEXT_WORD, UedpModel, set_weights
from uedp.models.build import ALLOW_MISSING_FROZEN, ModelShape, ModelSpec, Shape
from uedp.models.checkpoints import checkpoint_of
from uedp.models.export import USER_FILE_DATASET, release_label_names
from uedp.owners import OwnerTask
from uedp.prepare.corpus import EVAL_SUBSET_SEED, load_corpus, participants, read_split
from uedp.prepare.encoding import EncodedSentences, Truncation, encode_rows, encode_sentences
from uedp.prepare.entities import EntityPolicy, entity_totals
from uedp.prepare.manifest import Manifest, manifest_file, read_manifest, write_manifest
from uedp.prepare.manifest import data_key as prepared_data_key
from uedp.prepare.tokenizer import (
    TokenizerSpec,
    load_tokenizer,
    make_run_tokenizer,
    save_run_tokenizer,
    special_ids_key,
)
from uedp.prepare.users import UserData, participant_rows, user_data
from uedp.server_data import ServerData, corpus_server_data, owners_server_data
from uedp.tasks import get_task
from uedp.tokenization import TextTokenizer, tokenizer_digest

if TYPE_CHECKING:
    from uedp.pretraining import PretrainRun

__all__ = [
    "ALLOW_MISSING_FROZEN", "EVAL_SUBSET_SEED", "EncodedSentences", "Manifest", "ModelShape", "Truncation",
    "UserData", "data_key", "encode_sentences", "entity_policy", "evaluation_split", "final_model", "load_manifest",
    "load_split", "load_tokenizer", "load_user_data", "manifest_path", "model_spec", "new_model", "owner_task",
    "prepare", "pretrain_run", "private_dataset", "release_labels", "release_options", "rewriter_corpus",
    "run_tokenizer", "server_data", "special_ids_key", "tokenizer_spec",
]


def tokenizer_spec(cfg: RunConfig) -> TokenizerSpec:
    """The tokenizer group's settings."""
    t = cfg.tokenizer
    return TokenizerSpec(kind=t.kind, vocab_size=t.vocab_size, source=t.source, public_corpus=t.public_corpus)


def entity_policy(cfg: RunConfig) -> EntityPolicy:
    """Which detected entities the run protects (entities.protected less entities.public)."""
    return EntityPolicy(protected=cfg.entities.protected, public=cfg.entities.public)


def private_dataset(cfg: RunConfig) -> tuple[str, dict[str, Any]]:
    """(name, options) of the dataset whose users' text `cfg` trains on. Data owners who keep their own files
    (federation.data = owners) hold JSONL files of unknown origin: "jsonl", whatever `dataset` says (the
    server never loads it)."""
    return ("jsonl", {}) if cfg.owners else (cfg.dataset.name, cfg.dataset.option_dict())


def rewriter_corpus(cfg: RunConfig) -> str:
    """The corpus a run's rewriter must be independent of (uedp.rewriting.public_text): the run's dataset, or
    "jsonl" for owners' own files (federation.data = owners)."""
    return private_dataset(cfg)[0]


def owner_task(cfg: RunConfig) -> OwnerTask:
    """What a data owner's own file is read and encoded for (federation.data = owners: uedp.owners)."""
    return OwnerTask(task=cfg.task.name, max_len=cfg.task.max_len, detector=cfg.detector(), labels=cfg.task.labels,
                     policy=entity_policy(cfg))


def _data_key(cfg: RunConfig, detector: str) -> str:
    return prepared_data_key(dataset=cfg.dataset.name, dataset_options=cfg.dataset.option_dict(), detector=detector,
                             tokenizer=tokenizer_spec(cfg), model=cfg.model.name,
                             model_options=cfg.model.option_dict(), task=cfg.task.name)


def data_key(cfg: RunConfig) -> str:
    """Digest of every option that changes the prepared data (uedp.prepare.manifest.data_key)."""
    return _data_key(cfg, cfg.detector())


def manifest_path(cfg: RunConfig) -> Path:
    return manifest_file(data_key(cfg))


def prepare(cfg: RunConfig) -> Manifest:
    """Materialize corpus, annotations and tokenizer for `cfg` (all cached) and write the manifest."""
    task = cfg.task.name
    corpus_dir, corpus = load_corpus(cfg.dataset.name, cfg.loader_options(), task=task)
    detector = cfg.detector()
    ann_path, annotations = annotate_cached(corpus, detector)
    tokenizer, tokenizer_info = run_tokenizer(cfg, corpus)
    key = _data_key(cfg, detector)
    tok_path = save_run_tokenizer(tokenizer, key)
    users = participants(corpus, cfg.federation.num_nodes)
    num_entities, num_extended = entity_totals(corpus, annotations, users, entity_policy(cfg))
    manifest = Manifest(
        corpus_dir=str(corpus_dir), annotations=str(ann_path), tokenizer=str(tok_path), users=users,
        label_names=corpus.label_names if task == CLASSIFICATION else None,
        vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
        num_entities=num_entities, num_extended=num_extended, tokenizer_info=tokenizer_info,
        special_ids=tokenizer.special_ids, tokenizer_digest=tokenizer_digest(tokenizer),
        special_tokens=tokenizer.special_tokens,
    )
    write_manifest(manifest, key)
    return manifest


def run_tokenizer(cfg: RunConfig, corpus: Corpus | None) -> tuple[TextTokenizer, dict[str, Any]]:
    """The run's tokenizer and what it was trained on (uedp.prepare.tokenizer.make_run_tokenizer). `corpus` is
    None on a server that holds no private text (federation.data = owners), where only public and pretrained
    tokenizers exist."""
    return make_run_tokenizer(corpus, model=cfg.model.name, model_options=cfg.model.option_dict(),
                              spec=tokenizer_spec(cfg), dataset=cfg.dataset.name, private=private_dataset(cfg))


def load_manifest(cfg: RunConfig) -> Manifest:
    """The run's manifest, prepared first where none was written."""
    manifest = read_manifest(manifest_path(cfg))
    return prepare(cfg) if manifest is None else manifest


def load_user_data(cfg: RunConfig, partition_id: int, *, deidentified: bool = False) -> UserData:
    """Node `partition_id`'s training sentences; with `deidentified`, detected protected entities are replaced
    by category placeholders (the de-identification baseline) before encoding."""
    manifest = load_manifest(cfg)
    user, rows, annotations = participant_rows(manifest, partition_id)
    return user_data(user, rows, annotations, manifest.text_tokenizer(), policy=entity_policy(cfg),
                     task=cfg.task.name, max_len=cfg.task.max_len, deidentified=deidentified)


def load_split(cfg: RunConfig, split: str, *, limit: int | None = None) -> EncodedSentences:
    """A whole split (central evaluation on the server), restricted to the participating users; with
    a `limit`, at most `limit` of its sentences, a fixed subset (EVAL_SUBSET_SEED) in corpus order."""
    manifest = load_manifest(cfg)
    rows = read_split(manifest.corpus_dir, manifest.users, split, limit=limit)
    return encode_rows(manifest.text_tokenizer(), rows, task=cfg.task.name, max_len=cfg.task.max_len)


def model_spec(cfg: RunConfig) -> ModelSpec:
    """The run's model settings: the model and task groups' values (uedp.models.build.ModelSpec)."""
    return ModelSpec(cfg.model.name, cfg.model.option_dict(), cfg.model.lora, task=cfg.task.name,
                     max_len=cfg.task.max_len)


def new_model(cfg: RunConfig, shape: Shape, *, seed: int | None = None) -> UedpModel:
    """The run's model, sized by `shape` (a Manifest, a ModelShape, or anything with vocab_size, pad_id and
    num_labels): uedp.models.build.build_run_model with the model and task groups' values."""
    return model_spec(cfg).build(shape, seed=seed)


def server_data(cfg: RunConfig) -> ServerData:
    """The server's data for the run `cfg` (uedp.server_data): owners mode's public tokenizer, population
    (federation.num_nodes) and evaluation file, or the prepared corpus and its test split."""
    if cfg.owners:
        tokenizer, info = run_tokenizer(cfg, None)
        return owners_server_data(tokenizer, info, owner_task(cfg), population=cfg.federation.num_nodes,
                                  eval_path=cfg.federation.eval_data)
    return corpus_server_data(prepare(cfg), task=cfg.task.name, max_len=cfg.task.max_len,
                              eval_sentences=cfg.federation.eval_sentences)


def pretrain_run(cfg: RunConfig) -> PretrainRun:
    """What a public start of the run's model is pretrained with (uedp.pretraining.pretrain): the run's model,
    its tokenizer's settings and federation.device."""
    from uedp.pretraining import PretrainRun  # torch training code, for the one command that pretrains

    return PretrainRun(model=model_spec(cfg), tokenizer=tokenizer_spec(cfg), dataset=cfg.dataset.name,
                       private=private_dataset(cfg), device=cfg.federation.device)


def final_model(cfg: RunConfig) -> tuple[UedpModel, TextTokenizer]:
    """A finished corpus-mode run's final model (federation.out_dir/model.pt) and its tokenizer."""
    manifest = load_manifest(cfg)
    model = new_model(cfg, manifest)
    set_weights(model, torch.load(Path(cfg.federation.out_dir) / "model.pt", weights_only=False)["weights"])
    return model, manifest.text_tokenizer()


def evaluation_split(model: UedpModel, cfg: RunConfig, *, tokenizer: TextTokenizer | None = None,
                     limit: int | None = None, device: str = "cpu") -> TokenSplit | None:
    """`model`'s loss split by entity token (uedp.entity_tokens.evaluation_tokens) on the run's central evaluation
    set: in corpus mode the participants' test sentences (the fixed subset of federation.eval_sentences, or `limit`
    of them), in owners mode every sentence of federation.eval_data. `tokenizer`: the run's (None: read back
    as the run made it); `device`: where to evaluate. None for a classification run or an owners-mode run without
    federation.eval_data."""
    if get_task(cfg.task.name).name != NEXT_WORD:
        return None
    if cfg.owners:
        if not cfg.federation.eval_data:
            return None
        sentences = owner_evaluation_sentences(cfg.federation.eval_data, owner_task(cfg))
        tokenizer = tokenizer or run_tokenizer(cfg, None)[0]
    else:
        manifest = load_manifest(cfg)
        sentences = corpus_evaluation_sentences(manifest, cfg.federation.eval_sentences if limit is None else limit)
        tokenizer = tokenizer or manifest.text_tokenizer()
    return evaluation_tokens(model, sentences, tokenizer, policy=entity_policy(cfg), max_len=cfg.task.max_len,
                             device=device)


def release_labels(cfg: RunConfig) -> list[str] | None:
    """A classification run's label names for its release (uedp.models.export.release_label_names; the corpus's
    from the run's manifest); None for another task."""
    if cfg.task.name != CLASSIFICATION:
        return None
    corpus = None if cfg.owners else load_manifest(cfg).label_names
    return release_label_names(cfg.task.label_list(), corpus, owners=cfg.owners,
                               user_file=cfg.dataset.name == USER_FILE_DATASET)


def release_options(cfg: RunConfig) -> dict[str, Any]:
    """uedp.models.export.export_release's keyword options from a run's config: the base checkpoint,
    model.lora.export_merged, the task's label names (release_labels) and the card's model.card_datasets and
    model.card_base_model."""
    datasets, base_model = cfg.model.card_metadata()
    return {"checkpoint": checkpoint_of(cfg.model.name, cfg.model.option_dict()),
            "merged": cfg.model.lora.export_merged, "labels": release_labels(cfg), "datasets": datasets,
            "base_model": base_model}
