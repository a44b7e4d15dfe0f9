"""Markdown tables, the one writer for every table the experiments print and save.

    table(["a", "b"], [[1, 0.5]])        ->  "| a | b |\\n|---|---|\\n| 1 | 0.5 |"
    dict_table([{"a": 1}, {"b": 2.0}])    ->  columns a, b; missing cells empty

Cells are formatted by `fmt` (default `cell`); the result has no trailing newline.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any


def cell(v: Any) -> str:
    """One table cell: floats to 4 significant digits (inf as "inf"), None as empty, anything else str()."""
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:.4g}"
    return "" if v is None else str(v)


def _row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], *, fmt: Callable[[Any], str] = cell) -> str:
    """A header row, the separator `|---|---|...` and one line per row (each value through `fmt`)."""
    lines = [_row(header), "|" + "---|" * len(header)]
    lines += [_row(fmt(v) for v in r) for r in rows]
    return "\n".join(lines)


def dict_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, *,
               fmt: Callable[[Any], str] = cell) -> str:
    """One line per mapping; `columns` defaults to every key of `rows` in first-seen order. A key a row lacks
    is passed to `fmt` as None (empty with `cell`)."""
    cols = list(dict.fromkeys(k for r in rows for k in r)) if columns is None else list(columns)
    return table(cols, ([r.get(c) for c in cols] for r in rows), fmt=fmt)
