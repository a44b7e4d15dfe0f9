"""On-disk corpora: one Parquet file sorted by user (+ meta.json), so a client reads only its own rows.

Layout of a corpus directory:
    sentences.parquet   rows of uedp.data.corpus.SCHEMA, sorted by user, small row groups
    meta.json           name, label_names, has_gold, meta, fingerprint

`read_user_rows(path, user)` pushes the user filter down to Parquet row-group statistics: a client opens
the file but decodes only the row groups that can hold its user.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from uedp.data.corpus import SCHEMA, Corpus
from uedp.errors import CorpusError

ROW_GROUP_SIZE = 2048
SENTENCES = "sentences.parquet"
META = "meta.json"


def save_corpus(corpus: Corpus, directory: str | os.PathLike[str], *, overwrite: bool = True) -> Path:
    """Write `corpus` into `directory` atomically: a half-written corpus is never picked up, and processes
    writing the same directory at once (parallel sweep jobs filling one cache) do not collide. With
    `overwrite=False` a complete corpus already there (written by another process) is kept as is."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.", suffix=".tmp"))
    try:
        pq.write_table(corpus.table, tmp / SENTENCES, row_group_size=ROW_GROUP_SIZE, write_statistics=True)
        meta = {
            "name": corpus.name,
            "label_names": corpus.label_names,
            "has_gold": corpus.has_gold,
            "meta": corpus.meta,
            "fingerprint": corpus.fingerprint(),
        }
        (tmp / META).write_text(json.dumps(meta, indent=1, sort_keys=True))
        while True:
            try:
                tmp.rename(directory)  # atomic; fails while a non-empty directory is there
                return directory
            except OSError:
                if not directory.exists():
                    continue
                if not overwrite and (directory / META).is_file():
                    shutil.rmtree(tmp, ignore_errors=True)
                    return directory
                aside = directory.with_name(f".{directory.name}.{uuid.uuid4().hex}.old")
                try:
                    directory.rename(aside)
                except FileNotFoundError:
                    continue
                shutil.rmtree(aside, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _read_meta(directory: Path) -> dict:
    path = directory / META
    if not path.is_file():
        raise CorpusError(f"{path}: missing corpus metadata (not a corpus directory?)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{path}: unreadable corpus metadata: {exc}") from exc


def load_corpus_dir(directory: str | os.PathLike[str]) -> Corpus:
    directory = Path(directory)
    meta = _read_meta(directory)
    table = pq.read_table(directory / SENTENCES, schema=SCHEMA)
    return Corpus(
        meta["name"], table, label_names=meta["label_names"], has_gold=meta["has_gold"], meta=meta["meta"]
    )


def read_user_rows(
    directory: str | os.PathLike[str], user: str, split: str | None = None, columns: list[str] | None = None
) -> pa.Table:
    """Only `user`'s rows (optionally one split), read with row-group pruning."""
    filters = [("user", "=", user)]
    if split is not None:
        filters.append(("split", "=", split))
    return pq.read_table(Path(directory) / SENTENCES, columns=columns, filters=filters, schema=SCHEMA)


def read_users(directory: str | os.PathLike[str]) -> list[str]:
    """The corpus's users, in storage (sorted) order: node `partition-id` i is user `read_users(d)[i]`."""
    col = pq.read_table(Path(directory) / SENTENCES, columns=["user"]).column("user")
    return pa.compute.unique(col).to_pylist()
