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
from dataclasses import replace
from pathlib import Path

import torch

from studies.benchmark import (
    bench_client,
    bench_rounds,
    rounds_tables,
    run_caches,
    run_calibration,
    run_lora,
    run_noise,
    save,
)
from uedp.config import RunConfig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="outputs/benchmark")
    ap.add_argument("--only", choices=["rounds", "calibration", "caches", "noise", "lora"],
                    help="run only this section (rounds: the client update and the rounds, sections 1-2)")
    ap.add_argument("--calibration-rounds", type=int, nargs="+", default=[30, 60, 100], metavar="T")
    args = ap.parse_args(argv)
    if args.only == "calibration":
        run_calibration(args.calibration_rounds, Path(args.out))
        return 0
    if args.only == "caches":
        run_caches(args.repeats, Path(args.out))
        return 0
    torch.set_num_threads(1)
    out = Path(args.out)
    base = RunConfig()
    # privacy.seed: both runners draw the same cohort sizes round by round (a like-for-like comparison; the run
    # is then reported not private, which does not change what a round does)
    cfg = replace(base, privacy=replace(base.privacy, target_epsilon=0.0, noise_multiplier=1.0, seed=0),
                  federation=replace(base.federation, rounds=args.rounds, eval_every=args.rounds,
                                     checkpoint_every=args.rounds))
    if args.only == "noise":
        run_noise(cfg, out)
        return 0
    if args.only == "lora":
        run_lora(cfg, out, args.repeats)
        return 0
    client = bench_client(cfg, args.repeats)
    rounds = bench_rounds(cfg, out)
    save(out, "benchmark", {"client": client, "rounds": rounds}, rounds_tables(client, rounds))
    if args.only == "rounds":
        return 0
    run_calibration(args.calibration_rounds, out)
    run_caches(args.repeats, out)
    run_noise(cfg, out)
    run_lora(cfg, out, args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
