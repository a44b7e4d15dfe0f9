"""The same small job on the CPU and on the GPU, compared: equal ledgers, metrics within a tolerance, times.

NOT run by CI (CI has no GPU). Without a CUDA build of torch it says how to install one and exits with
status 2. What it does, and how to read its output: studies/device_check.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from studies.device_check import RUNNERS, device_check


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0, help="privacy.seed: fixed noise and sampling (both runs)")
    ap.add_argument("--runner", choices=RUNNERS, default="local")
    ap.add_argument("--out", type=Path, default=Path("outputs/device_check"))
    args = ap.parse_args(argv)
    status, text = device_check(args.out, rounds=args.rounds, users=args.users, seed=args.seed, runner=args.runner)
    print(text, file=sys.stderr if status == 2 else sys.stdout, flush=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
