"""Trace one round through the project's code: modules entered, module switches, a node's reads of the data.

    python -m experiments.round_path [--round 2] [--users 8] [--out outputs/round_path]

Runs a small in-process run (studies/round_path.py round_config: seeded, not private) and writes the round's
table to OUT/round-path.md (and prints it). What is counted: studies/round_path.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import command
from studies.round_path import render, round_config, trace_round


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--round", type=int, default=2, help="the round traced (default 2: after the first)")
    ap.add_argument("--users", type=int, default=8, help="users of the synthetic corpus, each a node")
    ap.add_argument("--out", default="outputs/round_path")


def run(options: argparse.Namespace) -> int:
    out = Path(options.out)
    cfg = round_config(out / "run", users=options.users, rounds=max(3, options.round + 1))
    text = render(trace_round(cfg, round=options.round))
    out.mkdir(parents=True, exist_ok=True)
    (out / "round-path.md").write_text(text)
    print(text, end="")
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
