"""Collect a Hydra sweep directory into one table (Markdown and CSV).

    python -m experiments.collect multirun/2026-11-30_00-30-00 [--out table] [--plot-vs-epsilon SWEEP ...]

What it does, and how to read its output: studies/collect.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from studies.collect import write_table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="write OUT.md and OUT.csv (default: in the sweep)")
    ap.add_argument("--plot-vs-epsilon", nargs="*", type=Path, default=None, metavar="SWEEP",
                    help="also plot the metric against privacy.target_epsilon (OUT.png)")
    args = ap.parse_args(argv)
    refs = None if args.plot_vs_epsilon is None else args.plot_vs_epsilon
    text = write_table(args.sweep, out=args.out, references=refs)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
