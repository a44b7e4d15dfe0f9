"""The main job (README command 1): UeDP f_E+ calibrated to the default target epsilon, and the noiseless
FedAvg reference, on the embedded synthetic corpus, both as Ray-backed Flower simulations; then a table.

    python -m experiments.main_job [--out outputs/main] [--rounds N] [--local]

What it does, and how to read its output: studies/main_job.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import command
from studies.main_job import main_job


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", default="outputs/main")
    ap.add_argument("--rounds", type=int, default=None, help="override federation.rounds")
    ap.add_argument("--local", action="store_true", help="in-process loop instead of a Flower simulation")


def run(options: argparse.Namespace) -> int:
    print("\n" + main_job(Path(options.out), rounds=options.rounds, local=options.local))
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
