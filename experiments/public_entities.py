"""What a public-entity policy frees (uedp.entities.public): per corpus, the share of training sentences
that hold a protected entity with and without the policy, and how many sentences it turns entity-free.

    python -m experiments.public_entities --out docs/figures [--dataset synthetic --dataset bbc_news ...]

What it does, and how to read its output: studies/public_entities.py.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from experiments import command
from studies.public_entities import public_entities
from uedp.commands.options import parse_options
from uedp.entities.public import POLICIES


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", action="append", default=[], help="a corpus (repeatable; default: "
                        "synthetic, bbc_news, shakespeare)")
    parser.add_argument("-o", "--option", action="append", default=[], help="KEY=VALUE loader option (all corpora)")
    parser.add_argument("--policy", default="places_calendar", choices=[p for p in POLICIES if p != "none"])
    parser.add_argument("--out", type=Path, default=Path("outputs/public_entities"))


def run(options: argparse.Namespace) -> int:
    words = [*(w for d in options.dataset for w in ("--dataset", d)), *(w for o in options.option for w in ("-o", o)),
             "--policy", options.policy, "--out", str(options.out)]
    print(public_entities(options.dataset, parse_options(options.option), options.policy, options.out,
                          command=shlex.join(["python", "-m", "experiments.public_entities", *words])))
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
