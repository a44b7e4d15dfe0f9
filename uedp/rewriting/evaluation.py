"""How much of the original text a rewrite keeps: BLEU against the originals, and the fraction of the
originals' entity strings that survive (docs/dp-bart-system.md, "The downstream comparison").

    entity_survival(originals, rewrites, entities)   # entities[i]: the (start, end, category) spans of originals[i]

An entity survives when its surface string, case-folded with white space collapsed, occurs in the rewrite of
its sentence as whole words. Counted over entity occurrences (a sentence holding "Paris" twice counts 2).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_WS = re.compile(r"\s+")
_PUNCT = re.compile(r"[^\w\s@.-]")


def _norm(text: str) -> str:
    return _WS.sub(" ", text).strip().casefold()


def entity_survival(originals: Sequence[str], rewrites: Sequence[str],
                    entities: Sequence[Sequence[tuple[int, int, str]]]) -> dict[str, float | int]:
    """{"entities": occurrences, "survived": how many of them appear in their rewrite, "fraction"}."""
    if not len(originals) == len(rewrites) == len(entities):
        raise ValueError("entity_survival: originals, rewrites and entities must have the same length")
    total = kept = 0
    for text, rewrite, spans in zip(originals, rewrites, entities):
        target = " " + _norm(_PUNCT.sub(" ", rewrite)) + " "
        for start, end, _ in spans:
            surface = _norm(_PUNCT.sub(" ", text[start:end]))
            if not surface:
                continue
            total += 1
            kept += f" {surface} " in target
    return {"entities": total, "survived": kept, "fraction": kept / total if total else 0.0}


def corpus_bleu(rewrites: Sequence[str], originals: Sequence[str]) -> float:
    """sacrebleu corpus BLEU of the rewrites against the originals (one reference each)."""
    import sacrebleu

    return float(sacrebleu.corpus_bleu(list(rewrites), [list(originals)]).score)
