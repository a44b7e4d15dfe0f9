"""Where a next-word model's perplexity comes from: the test perplexity of finished runs on the test sentences
WITH a protected entity and on those WITHOUT one, on entity tokens and on the other tokens, and with
--reference (a FedAvg run) the share of each run's excess NLL over it that falls on entity tokens
(docs/results.md, "What limits UeDP").

    python -m experiments.entity_perplexity RUN_DIR [RUN_DIR ...] [--reference FEDAVG_RUN_DIR] [--out FILE.md]
                                            [--limit 2000]

What it does, and how to read its output: studies/entity_perplexity.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import command
from studies.entity_perplexity import perplexity_table


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--reference", type=Path, default=None,
                        help="a FedAvg run on the same data: adds the share of each run's excess NLL on entity tokens")
    parser.add_argument("--limit", type=int, default=None, help="test sentences (default: the run's eval subset)")
    parser.add_argument("--out", type=Path, default=None)


def run(options: argparse.Namespace) -> int:
    print(perplexity_table(options.runs, reference=options.reference, limit=options.limit, out=options.out))
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
