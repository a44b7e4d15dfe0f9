"""Data owners who keep their own text (`federation.data = "owners"`): what each side of such a run reads.

The server holds no private text. It needs only public things: the tokenizer (trained on a public corpus,
uedp.pipeline.run_tokenizer, and shipped to the nodes with the training messages), the number N of invited
owners (`federation.num_nodes`), the label set of a classification task (`task.labels`), and optionally a
public or server-owned evaluation file (`federation.eval_data`, `eval_data`): uedp.server_data.

Each owner's node is started with node config `data-path` naming its own JSONL file (the project's format,
uedp.data.jsonl). `owner_data(path, tokenizer, task)` reads only that file, detects entities on the node
(`OwnerTask.detector`: entities.detector, cached on that machine), and encodes the training sentences with the
shipped tokenizer for the run's task (`OwnerTask`, uedp.pipeline.owner_task of the run's config). Everything
an owner prepares is cached on its own disk (`cache_root()/owners/`), keyed by the file's content, the tokenizer
and the options, so the fresh ClientApp process Flower starts for every message reads it back in milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from uedp.config_values import label_list
from uedp.data.corpus import Corpus
from uedp.errors import CorpusError
from uedp.files import PRIVATE, atomic_path, atomic_write_bytes
from uedp.models.base import CLASSIFICATION
from uedp.models.build import ModelShape
from uedp.paths import cache_root
from uedp.prepare.encoding import EncodedSentences, encode_rows
from uedp.prepare.entities import EntityPolicy
from uedp.prepare.users import UserData, corpus_rows, user_data
from uedp.tokenization import TextTokenizer, tokenizer_digest


@dataclass(frozen=True)
class OwnerTask:
    """What an owner's sentences are read and encoded for: `task` (uedp.tasks) at `max_len` tokens (task.max_len);
    entities detected with `detector` (entities.detector) and protected by `policy`; `labels`: task.labels as
    written (a classification task's public label set, comma-separated)."""

    task: str
    max_len: int
    detector: str
    labels: str = ""
    policy: EntityPolicy = field(default_factory=EntityPolicy)

    @property
    def label_names(self) -> list[str] | None:
        """The public label set of a classification task (None where empty), None for any other task."""
        if self.task != CLASSIFICATION:
            return None
        return label_list(self.labels)


def model_shape(tokenizer: TextTokenizer, task: OwnerTask) -> ModelShape:
    """The model's size in owners mode: the shipped `tokenizer`'s, with the task's public labels."""
    labels = task.label_names
    return ModelShape(tokenizer.vocab_size, tokenizer.pad_id, None if labels is None else len(labels),
                      tokenizer_digest(tokenizer))


# -- the tokenizer the server ships ---------------------------------------------------------------------
def tokenizer_payload(tokenizer: TextTokenizer) -> dict[str, Any]:
    """The tokenizer as message content: its JSON bytes and their SHA-256, and the special ids it was given
    (a checkpoint's tokenizer: a JSON object; "" when they are found by name)."""
    data = tokenizer.backend.to_str().encode()
    special = "" if tokenizer.special_ids is None else json.dumps(tokenizer.special_ids, sort_keys=True)
    return {"json": data, "sha256": hashlib.sha256(data).hexdigest(), "special_ids": special,
            "special_tokens": tokenizer.special_tokens}


def shipped_tokenizer(payload: dict[str, Any]) -> TextTokenizer:
    """The tokenizer a training message carries (checked against its digest), cached on this node's disk."""
    data, digest = bytes(payload["json"]), str(payload["sha256"])
    if hashlib.sha256(data).hexdigest() != digest:
        raise ValueError("the shipped tokenizer does not match its SHA-256")
    path = cache_root() / "owners" / f"tokenizer-{digest}.json"
    if not path.is_file():
        atomic_write_bytes(path, data, mode=PRIVATE)
    special = str(payload.get("special_ids", "") or "")
    return TextTokenizer(Tokenizer.from_str(data.decode()), source=f"shipped:{digest[:16]}",
                         special_ids=json.loads(special) if special else None,
                         special_tokens=str(payload.get("special_tokens", "frame")))


# -- an owner's file ------------------------------------------------------------------------------------
def read_owner_file(path: str | os.PathLike[str], task: OwnerTask) -> Corpus:
    """The owner's JSONL file as a corpus whose labels index `task.labels` (the public label set)."""
    from uedp.data.jsonl import load_jsonl
    from uedp.data.loaders import dataset_facts

    value = dataset_facts("jsonl").task_value("jsonl", task.task)  # the loader's value: "lm", "classification"
    corpus = load_jsonl(path=path, task=value)
    if task.task != CLASSIFICATION:
        return corpus
    public = task.label_names or []
    unknown = sorted(set(corpus.label_names or ()) - set(public))
    if unknown:
        raise CorpusError(f"{path}: label(s) {', '.join(map(repr, unknown))} are not in task.labels "
                          f"({', '.join(public)})")
    remap = np.array([public.index(n) for n in corpus.label_names or ()], dtype=np.int32)
    labels = corpus.table.column("label").to_numpy(zero_copy_only=False)
    table = corpus.table.set_column(corpus.table.schema.get_field_index("label"), "label",
                                    [remap[labels].astype(np.int32)])
    return Corpus(corpus.name, table.cast(corpus.table.schema), label_names=public, has_gold=False,
                  meta=corpus.meta)


def _owner_key(task: OwnerTask, path: Path, tokenizer: TextTokenizer, deidentified: bool) -> str:
    special = {} if tokenizer.special_ids is None else {"special_ids": tokenizer.special_ids}  # they frame sentences
    if tokenizer.special_tokens != "frame":  # so does the template choice (the default adds no key: caches stay)
        special["special_tokens"] = tokenizer.special_tokens
    payload = json.dumps({
        **special, "format": 2,  # 2: the cached data holds the sentences' stable ids (UserData.stable_ids)
        "file": hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest(),
        "tokenizer": hashlib.sha256(tokenizer.backend.to_str().encode()).hexdigest(),
        "detector": task.detector, "protected": task.policy.protected, "public": task.policy.public,
        "task": task.task,
        "max_len": task.max_len, "labels": task.labels, "deidentified": deidentified,
    }, sort_keys=True)
    return hashlib.blake2b(payload.encode(), digest_size=16).hexdigest()


def owner_data(path: str | os.PathLike[str], tokenizer: TextTokenizer, task: OwnerTask, *,
               deidentified: bool = False) -> UserData:
    """This owner's training sentences (uedp.prepare.users.UserData), from its own file only, encoded with
    `tokenizer` for `task`; cached on its disk."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"node config data-path {str(path)!r}: no such file")
    cached = cache_root() / "owners" / f"data-{_owner_key(task, path, tokenizer, deidentified)}.pt"
    if cached.is_file():
        raw = torch.load(cached, weights_only=False)
        return UserData(user=raw["user"], sids=raw["sids"], entities=[frozenset(e) for e in raw["entities"]],
                        encoded=EncodedSentences(**raw["encoded"]), stable_ids=raw["stable_ids"])
    user, rows, annotations = corpus_rows(read_owner_file(path, task), task.detector, "train")
    data = user_data(user, rows, annotations, tokenizer, policy=task.policy, task=task.task, max_len=task.max_len,
                     deidentified=deidentified)
    raw = {"user": data.user, "sids": data.sids, "entities": [sorted(e) for e in data.entities],
           "stable_ids": data.stable_ids,
           "encoded": {"ids": data.encoded.ids, "mask": data.encoded.mask, "labels": data.encoded.labels}}
    with atomic_path(cached, mode=PRIVATE) as tmp:  # the owner's own data: readable by its user only
        torch.save(raw, tmp)
    return data


def eval_data(path: str, tokenizer: TextTokenizer, task: OwnerTask) -> EncodedSentences | None:
    """The server's evaluation set: every sentence of file `path` (federation.eval_data: public or
    server-owned), or None when no file is named (`path` "")."""
    if not path:
        return None
    return encode_rows(tokenizer, read_owner_file(path, task).table, task=task.task, max_len=task.max_len)
