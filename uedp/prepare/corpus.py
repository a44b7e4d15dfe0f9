"""The run's corpus: a dataset's sentences materialized as Parquet (`load_corpus`, cached by
uedp.data.loaders), its participating users (`participants`: node `partition-id` i is user `users[i]`, users in
storage order; with federation.num_nodes = N only the first N take part) and the rows of a split restricted to
them (`read_split`: the server's evaluation set)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from uedp.data.corpus import Corpus
from uedp.data.loaders import materialize
from uedp.errors import ConfigError
from uedp.models.base import CLASSIFICATION

EVAL_SUBSET_SEED = 20_261_201  # a constant: the evaluation subset is a public choice, the same in every run


def load_corpus(dataset: str, loader_options: dict[str, Any], *, task: str) -> tuple[Path, Corpus]:
    """(directory, corpus) of dataset `dataset` loaded with `loader_options` (RunConfig.loader_options), from
    the cache or written there; a classification `task` needs labelled sentences (refused otherwise)."""
    corpus_dir, corpus = materialize(dataset, **loader_options)
    if task == CLASSIFICATION:
        corpus.require_labels()
    return corpus_dir, corpus


def participants(corpus: Corpus, num_nodes: int | None) -> list[str]:
    """The corpus's users that take part: all of them (`num_nodes` None) or the first `num_nodes` (refused when
    the corpus has fewer: federation.num_nodes)."""
    users = corpus.users()
    if num_nodes is not None and num_nodes > len(users):
        raise ConfigError(f"federation.num_nodes = {num_nodes} but corpus {corpus.name!r} has only "
                          f"{len(users)} users")
    return users[:num_nodes] if num_nodes else users


def read_split(corpus_dir: str | Path, users: list[str], split: str, *, limit: int | None = None) -> pa.Table:
    """The rows (uedp.data.corpus.SCHEMA) of `split` in the corpus at `corpus_dir`, restricted to `users`; with
    a `limit` (None: all), at most `limit` of them, a fixed subset (EVAL_SUBSET_SEED) in corpus order."""
    table = pq.read_table(Path(corpus_dir) / "sentences.parquet", filters=[("split", "=", split)])
    table = table.filter(pa.compute.is_in(table.column("user"), value_set=pa.array(users)))
    if limit is not None and limit < table.num_rows:
        keep = np.sort(np.random.default_rng(EVAL_SUBSET_SEED).choice(table.num_rows, size=limit, replace=False))
        table = table.take(pa.array(keep))
    return table
