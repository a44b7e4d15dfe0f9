"""What limits each method, per population (docs/results.md section 7): how much of a sampled client's text it
uses per round, how large the noise is against one clipped update, and what it reaches WITHOUT noise.

    python -m experiments.limits [--populations 200 1000 5000] [--users 400] [--keys 20]
                                 [--noise-free 5000] [--runs outputs/figures] [--out docs/figures]

What it does, and how to read its output: studies/limits.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import command
from studies.figure_settings import POPULATIONS
from studies.limits import limits


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--populations", type=int, nargs="+", default=list(POPULATIONS))
    ap.add_argument("--users", type=int, default=400)
    ap.add_argument("--keys", type=int, default=20)
    ap.add_argument("--noise-free", type=int, nargs="*", default=[5000], metavar="N",
                    help="populations at which to run user-level DP and UeDP without noise (slow: a full run each)")
    ap.add_argument("--runs", type=Path, default=Path("outputs/figures"))
    ap.add_argument("--out", type=Path, default=Path("docs/figures"))


def run(options: argparse.Namespace) -> int:
    print(limits(options.populations, users=options.users, keys=options.keys, noise_free_at=options.noise_free,
                 runs=options.runs, out=options.out))
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
