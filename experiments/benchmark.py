"""Benchmarks, measured side by side in one run (timings on a shared machine are noisy: read the ratios).

1. Client update for one user: `client.update.client_update` (selection, batched training on pre-encoded
   tensors, one whole-update clip) versus a plain PyTorch loop over the same sentences (tokenize, pad and
   train batch by batch, then clip), same model, same number of steps.
2. Flower round overhead: the same configuration run as a Ray-backed Flower simulation and on the
   in-process grid (runtime/local_grid.py, same server loop and client code, no Flower): seconds per
   round (median over rounds 2..T; round 1 includes Ray start-up), and the clients' own compute per round.
   Then the round broken down, both runners side by side: the server loop's pieces (timed in this process by
   `ServerClock`, which wraps the strategy's configure_train / aggregate_train and the grid), the clients'
   deserialization / compute / serialization (timed inside the ClientApp: make_client_app's benchmark-only
   `timings_dir`; in-process: LocalGrid.client_laps), Ray transfer / Flower overhead (what send_and_receive
   took beyond the busiest worker's time in the ClientApp), and CPU seconds per round of each process.
   Both runs use privacy.seed, so they draw the same cohort sizes round by round.
3. Noise calibration for the main job's setting (q_u 0.25, q_e 0.2, q_s 0.2, m_max 80, k_cap 1, target
   epsilon 8, delta 1e-5) at T = 30, 60, 100: `uedp.privacy.calibration.calibrate_noise_multiplier` versus
   the reference search it replaced (same guarantee), each from cold accounting caches; z of both and seconds.

4. Caches and the corpus generator (what the tests check by behaviour, measured here): the entity-detection
   cache (spacy+rules on the synthetic corpus: first run, detect and write, versus the cached run), the
   tokenizer cache (train and save versus load) and the synthetic generator's sentences per second; each
   the median of --repeats runs, the first runs each into a fresh cache directory.

    python -m experiments.benchmark [--rounds 6] [--repeats 5] [--out outputs/benchmark]
    python -m experiments.benchmark --only rounds [--rounds 6]   (sections 1 and 2)
    python -m experiments.benchmark --only calibration [--calibration-rounds 30 60 100]
    python -m experiments.benchmark --only caches [--repeats 5]
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import torch

from studies.benchmark import bench_client, bench_rounds, rounds_tables, run_caches, run_calibration, save
from uedp.config import RunConfig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="outputs/benchmark")
    ap.add_argument("--only", choices=["rounds", "calibration", "caches"],
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
    client = bench_client(cfg, args.repeats)
    rounds = bench_rounds(cfg, out)
    save(out, "benchmark", {"client": client, "rounds": rounds}, rounds_tables(client, rounds))
    if args.only == "rounds":
        return 0
    run_calibration(args.calibration_rounds, out)
    run_caches(args.repeats, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
