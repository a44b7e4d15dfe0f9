"""One data owner's training sentences (`UserData`): read from the prepared corpus for one participant
(`participant_rows`: only that user's rows and annotations, so no client loads other users' text) or from an
owner's own corpus (`corpus_rows`), then encoded with their protected entity sets (`user_data`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from uedp.data.corpus import Corpus
from uedp.data.store import read_user_rows
from uedp.entities.annotations import annotate_cached, read_user_annotations, select_sids
from uedp.entities.deid import deidentify_many
from uedp.errors import ConfigError
from uedp.prepare.encoding import EncodedSentences, encode_sentences, row_labels
from uedp.prepare.entities import EntityPolicy
from uedp.prepare.manifest import Manifest
from uedp.privacy.selection import stable_sids
from uedp.tokenization import TextTokenizer


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


def participant_rows(manifest: Manifest, partition_id: int) -> tuple[str, pa.Table, pa.Table]:
    """(user, training rows, their annotations) of node `partition_id` of the prepared run `manifest`."""
    if not 0 <= partition_id < len(manifest.users):
        raise ConfigError(f"partition-id {partition_id} outside 0..{len(manifest.users) - 1}")
    user = manifest.users[partition_id]
    rows = read_user_rows(manifest.corpus_dir, user, split="train")
    return user, rows, read_user_annotations(manifest.annotations, rows.column("sid").to_numpy())


def corpus_rows(corpus: Corpus, detector: str, split: str) -> tuple[str, pa.Table, pa.Table]:
    """(user, rows, annotations) of all of `corpus`'s `split` sentences as ONE data owner's (a node reading its
    own file: uedp.owners), entities detected here with `detector` (annotations cached on this machine)."""
    _, annotations = annotate_cached(corpus, detector)
    rows = corpus.split(split)
    user = corpus.users()[0] if corpus.num_sentences else "owner"
    return user, rows, select_sids(annotations, rows.column("sid").to_numpy())


def user_data(user: str, rows: pa.Table, annotations: pa.Table, tokenizer: TextTokenizer, *, policy: EntityPolicy,
              task: str, max_len: int, deidentified: bool = False) -> UserData:
    """`user`'s `rows` encoded for `task` at `max_len`, with the entity sets `policy` protects; with
    `deidentified`, detected protected entities are replaced by category placeholders (the de-identification
    baseline) before encoding."""
    sids = rows.column("sid").to_numpy()
    ents = policy.entity_sets(annotations)
    texts = rows.column("text").to_pylist()
    stable = np.asarray(stable_sids(texts, ents), dtype=np.int64).reshape(-1)  # of the original text
    if deidentified:
        texts = deidentify_many(texts, annotations.column("entities").to_pylist(), policy.categories())
    enc = encode_sentences(tokenizer, texts, row_labels(rows, task), task=task, max_len=max_len)
    return UserData(user=user, sids=sids, entities=ents, encoded=enc, stable_ids=stable)
