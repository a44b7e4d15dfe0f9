"""The prepared data's cache key (`data_key`: every option that changes it) and its manifest (`Manifest`): a
small JSON file naming the corpus, annotation and tokenizer files with the facts a server and its clients need
(no private content), written once per key (`write_manifest`) and read back by every process of the run."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uedp.files import atomic_write_json
from uedp.paths import cache_root
from uedp.prepare.tokenizer import TokenizerSpec, load_tokenizer, special_ids_key
from uedp.tokenization import TextTokenizer


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


def model_key(model: str, options: dict[str, Any]) -> list[Any]:
    """What of model `model` (with `options`) decides the tokenizer: a pretrained directory, model hf's path and
    tokenizer choice."""
    key = [model, options.get("pretrained")]
    if model != "hf":
        return key
    special = options.get("special_tokens", "frame")  # "frame" adds nothing: the keys of existing caches stay
    return key + [options.get("path"), options.get("tokenizer", "own")] + ([special] if special != "frame" else [])


def data_key(*, dataset: str, dataset_options: dict[str, Any], detector: str, tokenizer: TokenizerSpec, model: str,
             model_options: dict[str, Any], task: str) -> str:
    """Digest of every option that changes the prepared data (not privacy or training options)."""
    payload = json.dumps(
        {
            "dataset": [dataset, dataset_options],
            "entities": detector,
            "tokenizer": [tokenizer.kind, tokenizer.vocab_size, tokenizer.source, tokenizer.public_corpus],
            "model": model_key(model, model_options),
            "task": task,
        },
        sort_keys=True,
    )
    return hashlib.blake2b(payload.encode(), digest_size=8).hexdigest()


def manifest_file(key: str) -> Path:
    """Where the manifest of the prepared data `key` lives (in the cache)."""
    return cache_root() / "manifests" / f"{key}.json"


def write_manifest(manifest: Manifest, key: str) -> None:
    atomic_write_json(manifest_file(key), manifest.__dict__, indent=1)


def read_manifest(path: Path) -> Manifest | None:
    """The manifest at `path`, or None where none was written yet."""
    return Manifest(**json.loads(path.read_text())) if path.is_file() else None
