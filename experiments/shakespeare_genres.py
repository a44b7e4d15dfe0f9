"""A bring-your-own JSONL classification corpus of real short texts: Shakespeare's speaking roles as data
owners, each labelled with the genre of its play (the JSONL corpus of docs/known-gaps.md, "What limits UeDP").

    python -m experiments.shakespeare_genres --out outputs/byo

What it does, and how to read its output: studies/shakespeare_genres.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments import command
from studies.shakespeare_genres import write_corpus


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("outputs/byo"))
    parser.add_argument("--min-sentences", type=int, default=5)


def run(options: argparse.Namespace) -> int:
    print(json.dumps(write_corpus(options.out, min_sentences=options.min_sentences)))
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
