"""The same small job on the CPU and on the GPU, compared (equal ledgers, metrics within a tolerance, times),
then a small GPT-2's LoRA and full fine-tuning rounds on the GPU (seconds per round, peak GPU memory, epsilons).

    python -m experiments.device_check [--rounds 3] [--users 8] [--seed 0] [--runner local|simulation]
                                       [--dtypes bfloat16] [--transformer-rounds 3] [--size small|tiny]
                                       [--out outputs/device_check] [--json FILE]
    python -m experiments.device_check --device cpu --size tiny --transformer-rounds 1 --dtypes float32

NOT run by CI (CI has no GPU). Without a CUDA build of torch it says how to install one and exits with
status 2; `--device cpu` rehearses the transformer jobs on the CPU instead (what the tests run, at
`--size tiny`). What it does, and how to read its output: studies/device_check.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments import UsageError, command
from studies.device_check import DEVICES, DTYPES, RUNNERS, TRANSFORMER_SIZES, device_check


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--rounds", type=int, default=3, help="the CPU-GPU comparison's rounds")
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0, help="privacy.seed: fixed noise and sampling (every run)")
    ap.add_argument("--runner", choices=RUNNERS, default="local", help="the comparison's runner")
    ap.add_argument("--device", choices=DEVICES, default="cuda",
                    help="cuda: the comparison and the transformer jobs; cpu: the transformer jobs on the CPU")
    ap.add_argument("--dtypes", default="bfloat16", help=f"comma-separated model.options.dtype values: {DTYPES}")
    ap.add_argument("--transformer-rounds", type=int, default=3)
    ap.add_argument("--size", choices=tuple(TRANSFORMER_SIZES), default="small", help="the GPT-2's size")
    ap.add_argument("--out", type=Path, default=Path("outputs/device_check"))
    ap.add_argument("--json", type=Path, help="every result as JSON (default OUT/device_check.json)")


def run(options: argparse.Namespace) -> int:
    dtypes = tuple(d.strip() for d in options.dtypes.split(",") if d.strip())
    if not dtypes or any(d not in DTYPES for d in dtypes):
        raise UsageError(f"--dtypes: choose from {', '.join(DTYPES)}, got {options.dtypes!r}")
    status, text = device_check(options.out, rounds=options.rounds, users=options.users, seed=options.seed,
                                runner=options.runner, device=options.device, dtypes=dtypes,
                                transformer_rounds=options.transformer_rounds, size=options.size,
                                json_path=options.json)
    print(text, file=sys.stderr if status == 2 else sys.stdout, flush=True)
    return status


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
