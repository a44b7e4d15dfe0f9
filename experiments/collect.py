"""Collect a Hydra sweep directory into one table (Markdown and CSV).

    python -m experiments.collect multirun/2026-11-30_00-30-00 [--out table] [--plot-vs-epsilon SWEEP ...]

What it does, and how to read its output: studies/collect.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import command
from studies.collect import write_table


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="write OUT.md and OUT.csv (default: in the sweep)")
    ap.add_argument("--plot-vs-epsilon", nargs="*", type=Path, default=None, metavar="SWEEP",
                    help="also plot the metric against privacy.target_epsilon (OUT.png)")


def run(options: argparse.Namespace) -> int:
    print(write_table(options.sweep, out=options.out, references=options.plot_vs_epsilon))
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
