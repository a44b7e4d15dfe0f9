"""From a RunConfig to what the server and the clients train on.

`prepare(cfg)` runs once on the server side before round 1: it materializes the corpus (Parquet), detects
entities (cached annotations), builds the tokenizer (`run_tokenizer`: by default trained on a public
corpus, cached) and writes a small manifest naming these files. Clients then read only their own user's
rows and annotations (`load_user_data`), so no client ever loads other users' text. A client that finds no
manifest (a data owner on another machine) prepares its own copy from the same config.

Node `partition-id` i is user `users[i]` (users in storage order). With `federation.num_nodes` N > 0, only
the first N users take part.

The tokenizer: by default (`tokenizer.source = "public"`) it is trained on a public corpus independent of
the users' text (`tokenizer.public_corpus`, "auto" by default: the public corpus the dataset's loader
registered, uedp.data.loaders.DatasetFacts.public_corpus; uedp.public_corpora has the public corpora), so
the vocabulary reveals nothing about them. `tokenizer.source = "private_split"` trains it on the users'
training split, a non-private preprocessing step (its vocabulary is a function of every user's text): such
runs are reported not private. Pretrained models (`minilm`, `hf`, or `gpt2`/`bert` with `pretrained=<local
path>`) keep their own tokenizer (a Hugging Face checkpoint's with the special ids it declares, kept in the
manifest: `Manifest.special_ids`); `hf` with option tokenizer "project" uses the public one, for a checkpoint
that records its digest (uedp.models.checkpoints). `Manifest.tokenizer_info` says which was used (summary.json's
`tokenizer`).

`new_model` builds the run's model and checks that a checkpoint meets its own tokenizer (the digest of the
run's tokenizer, `tokenizer_digest` of the manifest or model shape), refuses model.options.allow_missing with
LoRA or frozen weights (`ALLOW_MISSING_FROZEN`) and task.max_len above the model's positions (`check_max_len`),
then with model.lora.r > 0 wraps it in LoRA adapters (uedp.models.lora). Every run tokenizer `run_tokenizer`
returns encodes a public sample text to at least two distinct ids (uedp.models.checkpoints.check_encodes).

`encode_sentences` keeps each sentence's framed length before the cut to task.max_len, so
`EncodedSentences.truncation()` counts the sentences the cut shortened without tokenizing them again (the
server prints it for its evaluation set, a node logs it for its own sentences: server/setup.py, client/update.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from tokenizers import Tokenizer

from uedp.categories import resolve_categories
from uedp.config import RunConfig
from uedp.data.corpus import Corpus
from uedp.data.loaders import materialize
from uedp.data.store import read_user_rows
from uedp.entities.annotations import annotate_cached, read_user_annotations, select_sids
from uedp.entities.deid import deidentify_many
from uedp.entities.detectors import entity_sets
from uedp.entities.public import public_keys
from uedp.errors import ConfigError
from uedp.files import atomic_write_json
from uedp.models.base import CLASSIFICATION, UedpModel
from uedp.models.checkpoints import check_encodes, check_tokenizer, checkpoint_of
from uedp.models.lora import with_lora
from uedp.models.registry import MODELS, build_model, build_tokenizer
from uedp.paths import cache_root
from uedp.privacy.selection import stable_sids
from uedp.public_corpora import independent_public_corpora, private_dataset, private_text_clash
from uedp.tasks import get_task
from uedp.tokenization import (
    PublicCorpus,
    TextTokenizer,
    TokenizerTraining,
    get_public_tokenizer,
    public_corpus,
    resolve_public_corpus,
    tokenizer_digest,
)


@dataclass(frozen=True)
class Manifest:
    """Files and facts of a prepared run (JSON-serializable, no private content)."""

    corpus_dir: str
    annotations: str
    tokenizer: str
    users: list[str]
    label_names: list[str] | None
    vocab_size: int
    pad_id: int
    num_entities: int = 0  # W_e: distinct protected entities in the participants' training sentences
    num_extended: int = 0  # W_s: their training sentences without a protected entity
    # what the tokenizer was trained on: {source, corpus, vocab_size, kind} (summary.json's `tokenizer`)
    tokenizer_info: dict[str, Any] | None = None
    # a checkpoint's tokenizer: the special ids it declares (TextTokenizer.special_ids; None: found by name)
    special_ids: dict[str, int | None] | None = None
    tokenizer_digest: str | None = None  # uedp.tokenization.tokenizer_digest of the tokenizer
    special_tokens: str = "frame"  # how the tokenizer frames a sentence (uedp.tokenization.TextTokenizer)

    @property
    def num_labels(self) -> int | None:
        return None if self.label_names is None else len(self.label_names)

    def text_tokenizer(self) -> TextTokenizer:
        """The run's tokenizer, read back from its file with its special ids."""
        return load_tokenizer(self.tokenizer, special_ids_key(self.special_ids), self.special_tokens)


def data_key(cfg: RunConfig) -> str:
    """Digest of every option that changes the prepared data (not privacy or training options)."""
    payload = json.dumps(
        {
            "dataset": [cfg.dataset.name, cfg.dataset.option_dict()],
            "entities": cfg.detector(),
            "tokenizer": [cfg.tokenizer.kind, cfg.tokenizer.vocab_size, cfg.tokenizer.source,
                          cfg.tokenizer.public_corpus],
            "model": _model_key(cfg),
            "task": cfg.task.name,
        },
        sort_keys=True,
    )
    return hashlib.blake2b(payload.encode(), digest_size=8).hexdigest()


def _model_key(cfg: RunConfig) -> list[Any]:
    """What of the model decides the tokenizer: a pretrained directory, model hf's path and tokenizer choice."""
    options = cfg.model.option_dict()
    key = [cfg.model.name, options.get("pretrained")]
    if cfg.model.name != "hf":
        return key
    special = options.get("special_tokens", "frame")  # "frame" adds nothing: the keys of existing caches stay
    return key + [options.get("path"), options.get("tokenizer", "own")] + ([special] if special != "frame" else [])


def manifest_path(cfg: RunConfig) -> Path:
    return cache_root() / "manifests" / f"{data_key(cfg)}.json"


def prepare(cfg: RunConfig) -> Manifest:
    """Materialize corpus, annotations and tokenizer for `cfg` (all cached) and write the manifest."""
    corpus_dir, corpus = materialize(cfg.dataset.name, **cfg.loader_options())
    if cfg.task.name == CLASSIFICATION:
        corpus.require_labels()
    ann_path, annotations = annotate_cached(corpus, cfg.detector())
    tokenizer, tokenizer_info = run_tokenizer(cfg, corpus)
    tok_path = cache_root() / "tokenizers" / f"run-{data_key(cfg)}.json"
    tokenizer.save(tok_path)
    users = corpus.users()
    if cfg.federation.num_nodes > len(users):
        raise ConfigError(
            f"federation.num_nodes = {cfg.federation.num_nodes} but corpus {corpus.name!r} has only "
            f"{len(users)} users"
        )
    if cfg.federation.num_nodes:
        users = users[: cfg.federation.num_nodes]
    num_entities, num_extended = _entity_totals(corpus, annotations, users, cfg)
    manifest = Manifest(
        corpus_dir=str(corpus_dir), annotations=str(ann_path), tokenizer=str(tok_path), users=users,
        label_names=corpus.label_names if cfg.task.name == CLASSIFICATION else None,
        vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
        num_entities=num_entities, num_extended=num_extended, tokenizer_info=tokenizer_info,
        special_ids=tokenizer.special_ids, tokenizer_digest=tokenizer_digest(tokenizer),
        special_tokens=tokenizer.special_tokens,
    )
    atomic_write_json(manifest_path(cfg), manifest.__dict__, indent=1)
    return manifest


def run_tokenizer(cfg: RunConfig, corpus: Corpus | None) -> tuple[TextTokenizer, dict[str, Any]]:
    """The run's tokenizer and what it was trained on. Pretrained models keep their own; otherwise
    tokenizer.source "public" (default) trains on the public corpus tokenizer.public_corpus names (the
    private corpus is not read: only the dataset's name picks "auto"'s default), "private_split" on the
    users' training split (reported not private: uedp.server_data.ServerData.tokenizer_warning). `corpus`
    is None on a server that holds no private text (federation.data = owners), where only public and
    pretrained tokenizers exist."""
    options = cfg.model.option_dict()
    checkpoint = checkpoint_of(cfg.model.name, options)
    tok_cfg = TokenizerTraining(kind=cfg.tokenizer.kind, vocab_size=cfg.tokenizer.vocab_size)
    if cfg.model.name == "minilm" or (checkpoint is not None and checkpoint.tokenizer == "own"):
        tokenizer = build_tokenizer(cfg.model.name, corpus, options=options)
        info = {"source": "pretrained", "corpus": f"the pretrained {cfg.model.name} model's own tokenizer",
                "vocab_size": tokenizer.vocab_size, "kind": "pretrained"}
        if tokenizer.special_tokens == "own":
            info["special_tokens"] = ("own: the tokenizer's own template frames each sentence (model option "
                                      "special_tokens); perplexity counts the tokens the model predicts under it, so "
                                      "it is not comparable with a run that frames sentences with [BOS] .. [EOS]")
        if tokenizer.special_ids is not None and tokenizer.pad_id == tokenizer.eos_id:
            info["padding"] = (f"with its eos token (id {tokenizer.pad_id}): the tokenizer declares no other pad "
                               "token; the attention mask hides padding from the model and the loss")
        return tokenizer, info
    if cfg.tokenizer.source == "private_split":
        if corpus is None:
            raise ConfigError("tokenizer.source = private_split needs the users' text, which this server does not hold")
        tokenizer = build_tokenizer(cfg.model.name, corpus, config=tok_cfg)
        info = {"source": "private_split", "corpus": f"{cfg.dataset.name} training split (the users' text)"}
    else:
        name = resolve_public_corpus(cfg.tokenizer.public_corpus, cfg.dataset.name)
        source = public_corpus(name)
        _refuse_private_tokenizer_text(cfg, source)
        MODELS.get(cfg.model.name)  # an unknown model name fails here, as in build_tokenizer
        tokenizer = get_public_tokenizer(source, tok_cfg)
        check_encodes(tokenizer, f"the public tokenizer trained on {source.description}")
        info = {"source": "public", "corpus": source.description}
    if checkpoint is not None:  # hf with tokenizer "project": the checkpoint must record this tokenizer
        check_tokenizer(checkpoint, tokenizer_digest(tokenizer))
    return tokenizer, {**info, "vocab_size": tokenizer.vocab_size, "kind": cfg.tokenizer.kind}


def _refuse_private_tokenizer_text(cfg: RunConfig, source: PublicCorpus) -> None:
    """Refuse a "public" tokenizer corpus that is the run's private text (uedp.public_corpora.private_text_clash,
    the one rule): its vocabulary would be a function of the users' text, outside the guarantee. Refused rather
    than labelled, since the clash is known before anything is trained."""
    dataset, options = private_dataset(cfg)
    why = private_text_clash(source.name, dataset, options, role="tokenizer")  # a file ("file"): its origin unknown
    if why is not None:
        others = ", ".join(independent_public_corpora(dataset, options))
        raise ConfigError(f"tokenizer.public_corpus = {cfg.tokenizer.public_corpus}: {why}; a tokenizer trained on "
                          f"it is not public. Set tokenizer.public_corpus to a public corpus independent of it "
                          f"({others}) or to a public text file")


def _entity_totals(corpus, annotations: pa.Table, users: list[str], cfg: RunConfig) -> tuple[int, int]:
    """W_e and W_s of the paper's denominator (privacy.paper_z): distinct protected entities, and
    sentences without one, over the participants' training sentences (unit weights). These totals are
    computed from the data; the paper treats them as public constants."""
    table = corpus.table
    keep = pa.compute.and_(pa.compute.equal(table.column("split"), "train"),
                           pa.compute.is_in(table.column("user"), value_set=pa.array(users)))
    sids = table.filter(keep).column("sid").to_numpy()
    sets = entity_sets(annotations.take(pa.array(sids)), resolve_categories(cfg.entities.protected),
                       public_keys(cfg.entities.public))
    return len(set().union(*sets)) if sets else 0, sum(1 for e in sets if not e)


def load_manifest(cfg: RunConfig) -> Manifest:
    path = manifest_path(cfg)
    if path.is_file():
        return Manifest(**json.loads(path.read_text()))
    return prepare(cfg)


SpecialIdsKey = tuple[tuple[str, int | None], ...] | None


def special_ids_key(special_ids: dict[str, int | None] | None) -> SpecialIdsKey:
    """TextTokenizer.special_ids as a hashable key (load_tokenizer is cached)."""
    return None if special_ids is None else tuple(sorted(special_ids.items()))


@functools.lru_cache(maxsize=4)
def load_tokenizer(path: str, special_ids: SpecialIdsKey = None, special_tokens: str = "frame") -> TextTokenizer:
    """The tokenizer file `path`; `special_ids` (special_ids_key of TextTokenizer.special_ids): the ids its
    special tokens were given (a checkpoint's tokenizer), None: found by name; `special_tokens`: how it frames."""
    return TextTokenizer(Tokenizer.from_file(path), source=path,
                         special_ids=None if special_ids is None else dict(special_ids), special_tokens=special_tokens)


@dataclass(frozen=True)
class ModelShape:
    """What building the model needs besides the config: a Manifest has these too (and `tokenizer_digest`, the
    run tokenizer's digest, which a checkpoint's tokenizer must have; None: not checked)."""

    vocab_size: int
    pad_id: int
    num_labels: int | None
    tokenizer_digest: str | None = None


def new_model(cfg: RunConfig, manifest: Manifest | ModelShape, *, seed: int | None = None) -> UedpModel:
    """The run's model, sized by `manifest` (anything with vocab_size, pad_id and num_labels); a checkpoint
    is refused unless the run's tokenizer is its own (manifest.tokenizer_digest, when it has one), or with
    allow_missing and LoRA or frozen weights; task.max_len above the model's positions is refused
    (`check_max_len`); model.lora.r > 0 puts LoRA adapters on it (only they, and a classifier's new head, are then
    trainable)."""
    options = cfg.model.option_dict()
    digest = getattr(manifest, "tokenizer_digest", None)
    checkpoint = checkpoint_of(cfg.model.name, options)
    if checkpoint is not None and checkpoint.allow_missing and cfg.model.lora.r:
        raise ConfigError(ALLOW_MISSING_FROZEN.format(what=f"model.lora.r = {cfg.model.lora.r}"))
    if checkpoint is not None and digest is not None:
        check_tokenizer(checkpoint, digest)
    if seed is not None:
        torch.manual_seed(seed)
    model = build_model(cfg.model.name, task=cfg.task.name, vocab_size=manifest.vocab_size,
                        pad_id=manifest.pad_id, num_labels=manifest.num_labels, **options)
    if checkpoint is not None and checkpoint.allow_missing and not all(p.requires_grad for p in model.parameters()):
        raise ConfigError(ALLOW_MISSING_FROZEN.format(what="frozen weights (the model option freeze_encoder)"))
    check_max_len(cfg, model)
    return with_lora(model, cfg.model.lora)


# a weight missing from the checkpoint starts at random on every build (server, each node, the user's own), and
# one that is frozen never trains towards a shared value: the builds would disagree for good
ALLOW_MISSING_FROZEN = ("model.options.allow_missing = true with {what}: the weights missing from the checkpoint "
                        "would start at random on every build (the server, each node, whoever loads the release) and "
                        "those frozen would never be trained or sent, so every build would hold different ones. Set "
                        "model.options.allow_missing to false (and use the checkpoint the weights belong to), or set "
                        "model.lora.r = 0 and leave freeze_encoder out so every weight trains")


def check_max_len(cfg: RunConfig, model: UedpModel) -> None:
    """Refuse task.max_len above the model's positions (`model.max_positions`: n_positions or
    max_position_embeddings; models without one, the LSTM, take any length). task.max_len is the framed length
    (uedp.tokenization.TextTokenizer.frame: the start and end tokens included), the longest row a batch has."""
    positions = getattr(model, "max_positions", None)
    if isinstance(positions, int) and cfg.task.max_len > positions:
        raise ConfigError(f"task.max_len = {cfg.task.max_len} is above the model's {positions} positions (model "
                          f"{cfg.model.name!r}: n_positions or max_position_embeddings of its config): a sentence "
                          f"framed with its start and end tokens may be {cfg.task.max_len} tokens long. Set "
                          f"task.max_len <= {positions}")


@dataclass(frozen=True)
class EncodedSentences:
    """Sentences as one right-padded id matrix, so a round's batches are tensor slices (no Python loop
    over sentences). `labels` is None for next-word prediction."""

    ids: torch.Tensor  # [n, L] int64
    mask: torch.Tensor  # [n, L] int64
    labels: torch.Tensor | None  # [n] int64
    # each sentence's framed length before the cut to max_len (its start and end tokens included), and that
    # max_len: for the truncation count (`truncation`); None where unknown (read back from an owner's cache)
    full_lengths: np.ndarray | None = None
    max_len: int | None = None

    def __len__(self) -> int:
        return self.ids.shape[0]

    def truncation(self) -> Truncation | None:
        """How many sentences max_len cut, or None where the full lengths are unknown."""
        if self.full_lengths is None or self.max_len is None:
            return None
        full = np.asarray(self.full_lengths)
        return Truncation(max_len=self.max_len, sentences=int(full.size), cut=int((full > self.max_len).sum()),
                          longest=int(full.max()) if full.size else 0)


@dataclass(frozen=True)
class Truncation:
    """Of `sentences` encoded at task.max_len `max_len`, `cut` were longer (framed: start and end tokens
    included) and lost their ends; `longest` is the longest framed length. Counts only."""

    max_len: int
    sentences: int
    cut: int
    longest: int

    def line(self, what: str, *, longest: bool = True) -> str:
        """E.g. "task.max_len 32: 3.1% of the 2,000 evaluation sentences are cut (62; the longest is 57 tokens with
        its start and end tokens)". `longest=False` leaves out the longest length: one sentence's statistic, said
        only in a node's own log, never on the server (in corpus mode its evaluation set is the users' test split)."""
        share = self.cut / self.sentences if self.sentences else 0.0
        tail = f"; the longest is {self.longest:,} tokens with its start and end tokens" if longest else ""
        return (f"task.max_len {self.max_len}: {share:.1%} of the {self.sentences:,} {what} sentences are cut "
                f"({self.cut:,}{tail})")


def encode_sentences(
    tokenizer: TextTokenizer, texts: list[str], labels: list[int] | None, *, task: str, max_len: int
) -> EncodedSentences:
    mode = get_task(task).mode
    unframed = tokenizer.encode_many(texts)
    full = np.fromiter((len(u) + 2 for u in unframed), dtype=np.int64, count=len(unframed))  # + start and end
    seqs = [tokenizer.frame(ids, mode=mode, max_len=max_len) for ids in unframed]
    width = max((len(s) for s in seqs), default=1)
    ids = np.full((len(seqs), width), tokenizer.pad_id, dtype=np.int64)
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    if seqs:
        ids[np.arange(width)[None, :] < lengths[:, None]] = np.concatenate(seqs)
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
    lab = None if labels is None else torch.as_tensor(labels, dtype=torch.int64)
    return EncodedSentences(torch.from_numpy(ids), torch.from_numpy(mask), lab, full_lengths=full, max_len=max_len)


@dataclass(frozen=True)
class UserData:
    """One data owner's training sentences, encoded, with their protected entity sets. `sids` are their corpus
    row ids (annotations are keyed by them); `stable_ids` their ids in the extended entities' identities
    (uedp.privacy.selection.stable_sids of the original texts and entity sets: independent of every other
    sentence and user, docs/proofs.md section 2)."""

    user: str
    sids: np.ndarray
    entities: list[frozenset[str]]
    encoded: EncodedSentences
    stable_ids: np.ndarray  # int64, in [0, 2**63)


def load_user_data(cfg: RunConfig, partition_id: int, *, deidentified: bool = False) -> UserData:
    """The user's training sentences; with `deidentified`, detected protected entities are replaced by
    category placeholders (the de-identification baseline) before encoding."""
    manifest = load_manifest(cfg)
    if not 0 <= partition_id < len(manifest.users):
        raise ConfigError(f"partition-id {partition_id} outside 0..{len(manifest.users) - 1}")
    user = manifest.users[partition_id]
    rows = read_user_rows(manifest.corpus_dir, user, split="train")
    ann = read_user_annotations(manifest.annotations, rows.column("sid").to_numpy())
    return _user_data(cfg, user, rows, ann, manifest.text_tokenizer(), deidentified)


def user_data_from(cfg: RunConfig, corpus: Corpus, tokenizer: TextTokenizer, *, split: str = "train",
                   deidentified: bool = False) -> UserData:
    """All of `corpus`'s `split` sentences as ONE data owner's data (a node reading its own file:
    uedp.owners), entities detected here with entities.detector (annotations cached on this machine)."""
    _, annotations = annotate_cached(corpus, cfg.detector())
    rows = corpus.split(split)
    ann = select_sids(annotations, rows.column("sid").to_numpy())
    user = corpus.users()[0] if corpus.num_sentences else "owner"
    return _user_data(cfg, user, rows, ann, tokenizer, deidentified)


def _user_data(cfg: RunConfig, user: str, rows: pa.Table, ann: pa.Table, tokenizer: TextTokenizer,
               deidentified: bool) -> UserData:
    sids = rows.column("sid").to_numpy()
    protected = resolve_categories(cfg.entities.protected)
    ents = entity_sets(ann, protected, public_keys(cfg.entities.public))
    labels = rows.column("label").to_pylist() if cfg.task.name == CLASSIFICATION else None
    texts = rows.column("text").to_pylist()
    stable = np.asarray(stable_sids(texts, ents), dtype=np.int64).reshape(-1)  # of the original text
    if deidentified:
        texts = deidentify_many(texts, ann.column("entities").to_pylist(), protected)
    enc = encode_sentences(tokenizer, texts, labels, task=cfg.task.name, max_len=cfg.task.max_len)
    return UserData(user=user, sids=sids, entities=ents, encoded=enc, stable_ids=stable)


EVAL_SUBSET_SEED = 20_261_201  # a constant: the evaluation subset is a public choice, the same in every run


def split_rows(cfg: RunConfig, split: str, *, limit: int = 0) -> pa.Table:
    """The corpus rows (uedp.data.corpus.SCHEMA) of a split, restricted to the participating users; with
    `limit` > 0, at most `limit` of them, a fixed subset (EVAL_SUBSET_SEED) in corpus order."""
    manifest = load_manifest(cfg)
    import pyarrow.parquet as pq

    table = pq.read_table(Path(manifest.corpus_dir) / "sentences.parquet",
                          filters=[("split", "=", split)])
    table = table.filter(pa.compute.is_in(table.column("user"), value_set=pa.array(manifest.users)))
    if 0 < limit < table.num_rows:
        keep = np.sort(np.random.default_rng(EVAL_SUBSET_SEED).choice(table.num_rows, size=limit, replace=False))
        table = table.take(pa.array(keep))
    return table


def load_split(cfg: RunConfig, split: str, *, limit: int = 0) -> EncodedSentences:
    """A whole split (central evaluation on the server), restricted to the participating users; with
    `limit` > 0, at most `limit` of its sentences, a fixed subset (EVAL_SUBSET_SEED) in corpus order
    (`split_rows`)."""
    manifest = load_manifest(cfg)
    table = split_rows(cfg, split, limit=limit)
    labels = table.column("label").to_pylist() if cfg.task.name == CLASSIFICATION else None
    return encode_sentences(manifest.text_tokenizer(), table.column("text").to_pylist(), labels,
                            task=cfg.task.name, max_len=cfg.task.max_len)
