"""Scale and deployment overhead (docs/performance.md), measured side by side in one run.

    python -m experiments.scaling users [--users 100 1000 5000] [--rounds 4] [--out docs/figures/scaling]
    python -m experiments.scaling overhead [--nodes 3] [--rounds 4] [--out docs/figures/overhead]

What it does, and how to read its output: studies/scaling.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import command
from studies.scaling import scaling


def add_parser(ap: argparse.ArgumentParser) -> None:
    sub = ap.add_subparsers(dest="what", required=True, metavar="{users,overhead}")
    for name, text in (("users", "the simulation at each population size"),
                       ("overhead", "one workload in process, as a simulation and as real processes")):
        parser = sub.add_parser(name, help=text)
        parser.add_argument("--users", type=int, nargs="+", default=[100, 1000, 5000])
        parser.add_argument("--nodes", type=int, default=3)
        parser.add_argument("--rounds", type=int, default=4)
        parser.add_argument("--out", type=Path, default=None)
        parser.add_argument("--work", type=Path, default=None, help="run directories (default: a temporary one)")
        parser.add_argument("--baseline-rev", default=None, metavar="REV",
                            help="overhead: also run the real processes with the code at git revision REV (a "
                                 "worktree)")


def run(options: argparse.Namespace) -> int:
    text, ok = scaling(options.what, users=options.users, nodes=options.nodes, rounds=options.rounds,
                       out=options.out, work=options.work, baseline_rev=options.baseline_rev)
    print(text)
    return 0 if ok else 1


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
