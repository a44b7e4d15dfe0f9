"""Benchmarks, measured side by side in one run (timings on a shared machine are noisy: read the ratios).

    python -m experiments.benchmark [--rounds 6] [--repeats 5] [--out outputs/benchmark]
    python -m experiments.benchmark --only rounds [--rounds 6]   (sections 1 and 2)
    python -m experiments.benchmark --only calibration [--calibration-rounds 30 60 100]
    python -m experiments.benchmark --only caches [--repeats 5]
    python -m experiments.benchmark --only noise [--rounds 6]
    python -m experiments.benchmark --only lora [--repeats 5]      (the LoRA client update, docs/own-model.md)

What it does, and how to read its output: studies/benchmark.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import command
from studies.benchmark_suite import SECTIONS, run_benchmarks


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="outputs/benchmark")
    ap.add_argument("--only", choices=list(SECTIONS),
                    help="run only this section (rounds: the client update and the rounds, sections 1-2)")
    ap.add_argument("--calibration-rounds", type=int, nargs="+", default=[30, 60, 100], metavar="T")


def run(options: argparse.Namespace) -> int:
    run_benchmarks(Path(options.out), only=options.only, rounds=options.rounds, repeats=options.repeats,
                   calibration_rounds=options.calibration_rounds)
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
