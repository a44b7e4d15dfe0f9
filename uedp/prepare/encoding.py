"""Sentences encoded as one right-padded id matrix (`encode_sentences`, `encode_rows`), with the count of the
sentences task.max_len cut (`EncodedSentences.truncation`: each sentence's framed length before the cut is kept,
so they are never tokenized again; the server prints it for its evaluation set, a node logs it for its own
sentences: server/setup.py, client/update.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from uedp.models.base import CLASSIFICATION
from uedp.tasks import get_task
from uedp.tokenization import TextTokenizer


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


def row_labels(rows: pa.Table, task: str) -> list[int] | None:
    """The rows' labels for a classification `task`, None for any other (their labels are not read)."""
    return rows.column("label").to_pylist() if task == CLASSIFICATION else None


def encode_rows(tokenizer: TextTokenizer, rows: pa.Table, *, task: str, max_len: int) -> EncodedSentences:
    """Corpus rows (uedp.data.corpus.SCHEMA: text, and label for classification) encoded for `task`."""
    return encode_sentences(tokenizer, rows.column("text").to_pylist(), row_labels(rows, task), task=task,
                            max_len=max_len)
