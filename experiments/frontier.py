"""K* (user-level DP calibrated for an entity with K other holders against UeDP) with an interval, at 5,000
and 20,000 users, on the whole-text and the non-entity-token perplexity (docs/results.md section 9).

    python -m experiments.frontier [--reps 3] [--runs outputs/figures] [--out docs/figures] [--resamples 2000]

Reads the finished jobs of `python -m experiments.figures frontier-5000 frontier-20000 --reps 3`. What it
computes, and how to read it: studies/frontier.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import command
from studies.frontier import write


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--reps", type=int, default=3, help="the replicates the figures were run with (default 3)")
    ap.add_argument("--runs", type=Path, default=Path("outputs/figures"), help="the figures' job directory root")
    ap.add_argument("--out", type=Path, default=Path("docs/figures"), help="where frontier.md and .json go")
    ap.add_argument("--resamples", type=int, default=2000, help="bootstrap draws (default 2000)")


def run(options: argparse.Namespace) -> int:
    print(write(options.reps, options.runs, options.out, options.resamples))
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
