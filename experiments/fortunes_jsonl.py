"""A bring-your-own JSONL corpus of real short texts (Debian's fortune files):
`python -m experiments.fortunes_jsonl --root DIR --out FILE [--owners 300] [--seed 0]`.

What it does, where the files come from, and how it is kept disjoint from the rewriter's text:
studies/fortunes_corpus.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments import UsageError, command
from studies.fortunes_corpus import build


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--root", type=Path, required=True, help="the extracted usr/share/games/fortunes directory")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--owners", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)


def run(options: argparse.Namespace) -> int:
    if options.owners < 1:
        raise UsageError(f"--owners must be >= 1, got {options.owners}")
    print(json.dumps(build(options.root, options.out, owners=options.owners, seed=options.seed), indent=1))
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
