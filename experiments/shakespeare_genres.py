"""A bring-your-own JSONL classification corpus of real short texts: Shakespeare's speaking roles as data
owners, each labelled with the genre of its play (the JSONL corpus of docs/known-gaps.md, "What limits UeDP").

    python -m experiments.shakespeare_genres --out outputs/byo

What it does, and how to read its output: studies/shakespeare_genres.py.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from studies.shakespeare_genres import SPLIT_SEED, owners, population


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.shakespeare_genres",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("outputs/byo"))
    parser.add_argument("--min-sentences", type=int, default=5)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SPLIT_SEED)
    files = {name: (args.out / f"shakespeare-genres-{name}.jsonl").open("w") for name in ("reported", "tuning")}
    counts = {name: {"owners": 0, "sentences": 0} for name in files}
    for owner, label, sentences in owners(args.min_sentences):
        name = population(owner)
        counts[name]["owners"] += 1
        for text in sentences:
            r = rng.random()
            split = "train" if r < 0.8 else "valid" if r < 0.9 else "test"
            files[name].write(json.dumps({"user": owner, "text": text, "split": split, "label": label}) + "\n")
            counts[name]["sentences"] += 1
    for f in files.values():
        f.close()
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
