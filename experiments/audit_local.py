"""Crafted-document audit of the local mechanisms (DP-BART-CLV, the ADePT mechanism on our model):
`python -m experiments.audit local [--claims 1 2 4] [--trials 200000] [--seed 0] [--out docs/figures]`.

What it does, and how to read its output: studies/audit_local.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from studies.audit_local import run_study


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.audit local", description=__doc__.split("\n")[0])
    parser.add_argument("--claims", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    parser.add_argument("--trials", type=int, default=200_000, help="releases per crafted document")
    parser.add_argument("--seed", type=int, default=0, help="the audit's noise seed (an audit: reproducible)")
    parser.add_argument("--out", type=Path, default=Path("outputs/audit_local"))
    args = parser.parse_args(argv)
    if args.trials < 4:
        parser.error(f"--trials must be >= 4, got {args.trials}")
    if any(not c > 0 for c in args.claims):
        parser.error(f"--claims must be positive, got {args.claims}")
    run_study(args.claims, trials=args.trials, out=args.out, seed=args.seed)
    print((args.out / "audit_local.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
