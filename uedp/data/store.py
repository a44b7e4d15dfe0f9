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
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from uedp.data.corpus import SCHEMA, Corpus
from uedp.errors import CorpusError

ROW_GROUP_SIZE = 2048
SENTENCES = "sentences.parquet"
META = "meta.json"


def save_corpus(corpus: Corpus, directory: str | os.PathLike[str]) -> Path:
    """Write `corpus` into `directory` atomically (a half-written corpus is never picked up)."""
    directory = Path(directory)
    tmp = directory.with_name(directory.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    pq.write_table(corpus.table, tmp / SENTENCES, row_group_size=ROW_GROUP_SIZE, write_statistics=True)
    meta = {
        "name": corpus.name,
        "label_names": corpus.label_names,
        "has_gold": corpus.has_gold,
        "meta": corpus.meta,
        "fingerprint": corpus.fingerprint(),
    }
    (tmp / META).write_text(json.dumps(meta, indent=1, sort_keys=True))
    if directory.exists():
        for f in directory.iterdir():
            f.unlink()
        directory.rmdir()
    tmp.rename(directory)
    return directory


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


def corpus_fingerprint(directory: str | os.PathLike[str]) -> str:
    return _read_meta(Path(directory))["fingerprint"]


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
