"""A bring-your-own JSONL corpus of real short texts (Debian's fortune files):
`python -m experiments.fortunes_jsonl --root DIR --out FILE [--owners 300] [--seed 0]`.

What it does, where the files come from, and how it is kept disjoint from the rewriter's text:
studies/fortunes_corpus.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from studies.fortunes_corpus import build


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, required=True, help="the extracted usr/share/games/fortunes directory")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--owners", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.owners < 1:
        ap.error(f"--owners must be >= 1, got {args.owners}")
    stats = build(args.root, args.out, owners=args.owners, seed=args.seed)
    print(json.dumps(stats, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
