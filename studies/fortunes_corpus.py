"""A bring-your-own JSONL corpus of REAL short texts from public data, for the DP-BART comparison
(docs/dp-bart-system.md): the BSD fortune cookie files of Debian's `fortunes` package (quotes, jokes and
sayings, by topic file).

    apt-get download fortunes && dpkg -x fortunes_*.deb outputs/fortunes/deb     # Debian bookworm 1:1.99.1-7.3
    python -m experiments.fortunes_jsonl --root outputs/fortunes/deb/usr/share/games/fortunes \
        --out outputs/fortunes/fortunes.jsonl

Each fortune of the chosen topic files (`TOPICS`) is one text, its file name the label; the attribution line
("-- Author") is dropped, whitespace folded, and texts of 20 to 400 characters kept. The source is disjoint from
every public text the rewriter of a JSONL corpus is trained on (the synthetic generator's public personas,
Shakespeare, BBC News: uedp.rewriting.public_text): fortunes that name Shakespeare or quote one of those
sentences exactly are dropped, and the count is reported. Owners are not part of the fortune files: each text
goes to one of `owners` pseudo-owners uniformly at random (seeded), and to train / valid / test with
probabilities 0.7 / 0.1 / 0.2. The file has no entity annotations (dataset=jsonl detects them).
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

from uedp.errors import ConfigError

TOPICS = ("computers", "politics", "science", "work", "men-women", "art", "law", "food")
MIN_CHARS, MAX_CHARS = 20, 400


def read_fortunes(path: Path) -> list[str]:
    """The fortunes of one strfile source file (entries separated by lines holding only '%'), attribution lines
    (starting with '--' after indentation) removed, whitespace folded."""
    try:
        raw = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read fortune file {path}: {exc}") from None
    out = []
    for entry in raw.split("\n%\n"):
        lines = [ln for ln in entry.strip("%\n").splitlines() if not ln.strip().startswith("--")]
        text = re.sub(r"\s+", " ", " ".join(lines)).strip()
        if text:
            out.append(text)
    return out


def build(root: Path, out: Path, *, owners: int = 300, seed: int = 0, topics: tuple[str, ...] = TOPICS,
          public: set[str] | None = None) -> dict[str, object]:
    """Write the JSONL corpus; return its statistics (texts per label, dropped overlaps). `public`: the
    rewriter's public training sentences (default: public_text_for("jsonl"), what a JSONL corpus's rewriter
    trains on)."""
    if public is None:
        from uedp.rewriting.public_text import public_text_for

        public = set(public_text_for("jsonl")[1])
    public_sentences = public
    rng = random.Random(seed)
    rows, dropped, short_long = [], Counter(), 0
    for topic in topics:
        path = root / topic
        if not path.is_file():
            raise ConfigError(f"--root {root}: no fortune file {topic!r} (extract Debian's fortunes package there)")
        for text in read_fortunes(path):
            if not MIN_CHARS <= len(text) <= MAX_CHARS:
                short_long += 1
                continue
            if "shakespeare" in text.lower():
                dropped["names Shakespeare"] += 1
                continue
            if text in public_sentences or any(s in public_sentences for s in re.split(r"(?<=[.!?])\s+", text)):
                dropped["quotes a rewriter training sentence"] += 1
                continue
            split = rng.choices(("train", "valid", "test"), weights=(0.7, 0.1, 0.2))[0]
            rows.append({"user": f"owner{rng.randrange(owners):03d}", "text": text, "label": topic, "split": split})
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return {"texts": len(rows), "labels": dict(Counter(r["label"] for r in rows)),
            "splits": dict(Counter(r["split"] for r in rows)), "owners": len({r["user"] for r in rows}),
            "dropped_length": short_long, "dropped_overlap": dict(dropped), "path": str(out)}
