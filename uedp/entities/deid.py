"""De-identification (the paper's baseline): every detected protected entity replaced by a category
placeholder, e.g. "Call David at 555-1234" -> "Call [PERSON] at [PHONE]". Done on the client before
training. It has NO formal guarantee (missed entities stay, context can re-identify); reports must say so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def placeholder(category: str) -> str:
    return f"[{category}]"


def deidentify(text: str, spans: Iterable[dict[str, Any]], protected: frozenset[str]) -> str:
    """`text` with each span (`start`, `end`, `category`) of a protected category replaced by its
    placeholder. Overlapping spans are merged into the first one that starts."""
    keep = sorted((s for s in spans if s["category"] in protected), key=lambda s: (s["start"], -s["end"]))
    out, pos = [], 0
    for s in keep:
        if s["start"] < pos:  # overlaps a span already replaced
            continue
        out.append(text[pos : s["start"]])
        out.append(placeholder(s["category"]))
        pos = s["end"]
    out.append(text[pos:])
    return "".join(out)


def deidentify_many(texts: Sequence[str], spans: Sequence[Iterable[dict[str, Any]]],
                    protected: frozenset[str]) -> list[str]:
    if len(texts) != len(spans):
        raise ValueError(f"{len(texts)} texts but {len(spans)} span lists")
    return [deidentify(t, s, protected) for t, s in zip(texts, spans)]
