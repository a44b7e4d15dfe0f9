"""The federated corpus: users -> sentences (+ optional label, + optional gold entity spans).

A corpus is held as one Arrow table with the columns of `SCHEMA`, one row per sentence, sorted by user so
that the Parquet file written by `uedp.data.store` lets a client read only its own user's rows.

- `sid`: global sentence id, 0..n-1, stable for a given loader configuration. The extended entity of a
  sentence with no detected entity is identified by (user, sid).
- `user`: the data owner.
- `text`: the sentence.
- `label`: class index into `Corpus.label_names` (null when the corpus has no labels).
- `split`: "train", "valid" or "test".
- `gold`: ground-truth entity spans, `[{start, end, category}]` character offsets into `text`, or null
  when the corpus has no ground truth (then only a detector can find entities).
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from uedp.errors import ConfigError, CorpusError

SPLITS = ("train", "valid", "test")

SPAN_TYPE = pa.struct([("start", pa.int32()), ("end", pa.int32()), ("category", pa.string())])

SCHEMA = pa.schema(
    [
        ("sid", pa.int64()),
        ("user", pa.string()),
        ("text", pa.string()),
        ("label", pa.int32()),
        ("split", pa.string()),
        ("gold", pa.list_(SPAN_TYPE)),
    ]
)


@dataclass(frozen=True)
class GoldSpan:
    """A ground-truth entity: `text[start:end]` is the entity's surface form."""

    start: int
    end: int
    category: str


@dataclass
class Corpus:
    """A loaded corpus. `table` follows `SCHEMA`; `meta` is JSON-serializable bookkeeping.

    `meta` keys used across the project: `source` (loader name and options), `dropped_users` (users that
    had no sentence), `canaries` (synthetic corpus: planted secrets, for privacy audits).
    """

    name: str
    table: pa.Table
    label_names: list[str] | None = None
    has_gold: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    _fingerprint: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.table.schema.equals(SCHEMA):
            raise CorpusError(f"corpus {self.name!r}: table schema differs from uedp.data.corpus.SCHEMA")

    # -- views -------------------------------------------------------------------------------------
    @property
    def num_sentences(self) -> int:
        return self.table.num_rows

    def users(self) -> list[str]:
        """Users in storage order (sorted)."""
        return pc.unique(self.table.column("user")).to_pylist()

    @property
    def num_users(self) -> int:
        return len(self.users())

    def split(self, name: str) -> pa.Table:
        if name not in SPLITS:
            raise CorpusError(f"unknown split {name!r}; choose one of {SPLITS}")
        return self.table.filter(pc.equal(self.table.column("split"), name))

    def user_rows(self, user: str, split: str | None = None) -> pa.Table:
        mask = pc.equal(self.table.column("user"), user)
        if split is not None:
            mask = pc.and_(mask, pc.equal(self.table.column("split"), split))
        return self.table.filter(mask)

    @property
    def has_labels(self) -> bool:
        return self.label_names is not None

    def require_labels(self) -> None:
        """Raise a clear error when a classification task is asked of a corpus without labels."""
        if not self.has_labels:
            raise CorpusError(f"corpus {self.name!r} has no labels: it cannot be used for classification")
        nulls = self.table.column("label").null_count
        if nulls:
            first = self.table.filter(pc.is_null(self.table.column("label"))).column("sid")[0].as_py()
            raise CorpusError(
                f"corpus {self.name!r}: {nulls} sentence(s) have no label (first: sid {first}); "
                "classification needs a label on every sentence"
            )

    def fingerprint(self) -> str:
        """Content hash (sid, user, text, label, split, gold): keys caches of annotations and tokenizers.

        Computed from the values, not from Arrow buffers, so a corpus read back from Parquet (other chunk
        boundaries, other validity buffers) has the fingerprint of the corpus that was written."""
        if self._fingerprint is None:
            h = hashlib.blake2b(digest_size=16)
            h.update(json.dumps([self.name, self.label_names]).encode())
            for name in SCHEMA.names:
                h.update(json.dumps(self.table.column(name).to_pylist(), separators=(",", ":")).encode())
            self._fingerprint = h.hexdigest()
        return self._fingerprint


class CorpusBuilder:
    """Accumulates sentences and builds a validated, user-sorted `Corpus`.

        b = CorpusBuilder("jsonl", source="data.jsonl")
        b.add("alice", "Hello Bob.", gold=[GoldSpan(6, 9, "PERSON")])
        corpus = b.build(seed=0)

    Users registered with `add_user` but given no sentence are dropped and counted in
    `meta["dropped_users"]`. Sentences without an explicit split get one at random (fixed by `seed`).
    """

    def __init__(self, name: str, *, source: str | None = None, has_gold: bool = False) -> None:
        self.name = name
        self.source = source or name
        self.has_gold = has_gold
        self._users: dict[str, int] = {}
        self._rows: list[tuple[str, str, int | None, str | None, list[dict[str, Any]] | None]] = []

    def add_user(self, user: str) -> None:
        self._users.setdefault(user, 0)

    def add(
        self,
        user: str,
        text: str,
        *,
        label: int | None = None,
        split: str | None = None,
        gold: Sequence[GoldSpan] | None = None,
        where: str = "",
    ) -> None:
        """Add one sentence. `where` (e.g. "data.jsonl line 12") is used in error messages."""
        at = f" ({where})" if where else ""
        if not isinstance(user, str) or not user:
            raise CorpusError(f"{self.source}{at}: field 'user' must be a non-empty string, got {user!r}")
        if split is not None and split not in SPLITS:
            raise CorpusError(f"{self.source}{at}: field 'split' must be one of {SPLITS}, got {split!r}")
        spans = None
        if gold is not None:
            spans = []
            for g in gold:
                if not (0 <= g.start < g.end <= len(text)):
                    raise CorpusError(f"{self.source}{at}: gold span {g} lies outside the sentence")
                spans.append({"start": g.start, "end": g.end, "category": g.category})
        elif self.has_gold:
            spans = []
        self._users[user] = self._users.get(user, 0) + 1
        self._rows.append((user, text, label, split, spans))

    def build(
        self,
        *,
        seed: int = 0,
        split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
        label_names: list[str] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Corpus:
        if not self._rows:
            raise CorpusError(f"{self.source}: the corpus is empty (no sentence was found)")
        split_fractions = check_split_fractions(self.source, split_fractions)
        if label_names is not None:
            for user, _, label, _, _ in self._rows:
                if label is not None and not 0 <= label < len(label_names):
                    raise CorpusError(f"{self.source}: label {label} of user {user!r} is out of range")
        order = sorted(range(len(self._rows)), key=lambda i: self._rows[i][0])  # stable: keeps sentence order
        rows = [self._rows[i] for i in order]
        # A sentence's split is a function of its own (user, text) and the public seed only, never of its
        # position: removing a sentence or a user must not move another sentence between train and test
        # (docs/proofs.md section 2; a positional draw did, as the adversarial read found).
        draws = [split_draw(seed, user, text) for user, text, _, _, _ in rows]
        cut1, cut2 = split_fractions[0], split_fractions[0] + split_fractions[1]
        splits = [
            s if s is not None else ("train" if d < cut1 else "valid" if d < cut2 else "test")
            for (_, _, _, s, _), d in zip(rows, draws)
        ]
        table = pa.table(
            {
                "sid": pa.array(np.arange(len(rows), dtype=np.int64)),
                "user": pa.array([r[0] for r in rows], pa.string()),
                "text": pa.array([r[1] for r in rows], pa.string()),
                "label": pa.array([r[2] for r in rows], pa.int32()),
                "split": pa.array(splits, pa.string()),
                "gold": pa.array([r[4] for r in rows], pa.list_(SPAN_TYPE)),
            },
            schema=SCHEMA,
        )
        dropped = sorted(u for u, n in self._users.items() if n == 0)
        full_meta = {"source": self.source, "dropped_users": len(dropped), **(meta or {})}
        return Corpus(self.name, table, label_names=label_names, has_gold=self.has_gold, meta=full_meta)


def check_split_fractions(owner: str, value: Any) -> tuple[float, float, float]:
    """`value` as (train, valid, test) fractions: 3 finite non-negative numbers summing to 1 (a NaN, which
    every comparison passes, is refused too); ConfigError naming `owner` (a loader or a corpus) otherwise."""
    try:
        fractions = tuple(value)
    except TypeError:
        fractions = ()
    ok = len(fractions) == 3 and all(
        isinstance(f, numbers.Real) and not isinstance(f, bool) and math.isfinite(f) and f >= 0 for f in fractions)
    if not ok or not abs(sum(fractions) - 1.0) <= 1e-9:
        raise ConfigError(f"{owner}: split_fractions must be 3 non-negative numbers summing to 1, got {value!r}")
    return tuple(float(f) for f in fractions)  # type: ignore[return-value]


SPLIT_RULE = "content-hash-1"  # how a sentence without a split gets one (part of the corpus cache key)


def split_draw(seed: int, user: str, text: str) -> float:
    """A uniform number in [0, 1) determined by (seed, user, text): BLAKE2b of their JSON encoding."""
    digest = hashlib.blake2b(json.dumps([int(seed), user, text]).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def gold_spans(row_gold: Iterable[dict[str, Any]] | None) -> list[GoldSpan]:
    """Turn a `gold` cell back into GoldSpan objects."""
    return [GoldSpan(g["start"], g["end"], g["category"]) for g in (row_gold or [])]
