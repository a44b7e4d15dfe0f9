"""Crafted-document audit of the local mechanisms (DP-BART-CLV, the ADePT mechanism on our model):
`python -m experiments.audit local [--claims 1 2 4] [--trials 200000] [--seed 0] [--out docs/figures]`.

What it does, and how to read its output: studies/audit_local.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import UsageError, command
from studies.audit_local import run_study


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--claims", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    parser.add_argument("--trials", type=int, default=200_000, help="releases per crafted document")
    parser.add_argument("--seed", type=int, default=0, help="the audit's noise seed (an audit: reproducible)")
    parser.add_argument("--out", type=Path, default=Path("outputs/audit_local"))


def run(options: argparse.Namespace) -> int:
    if options.trials < 4:
        raise UsageError(f"--trials must be >= 4, got {options.trials}")
    if any(not c > 0 for c in options.claims):
        raise UsageError(f"--claims must be positive, got {options.claims}")
    run_study(options.claims, trials=options.trials, out=options.out, seed=options.seed)
    print((options.out / "audit_local.md").read_text())
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
