"""Which benchmarks of studies/benchmark.py one call of `python -m experiments.benchmark` runs, and on what:
every section in turn, or the one `--only` names; sections 1-2, 5 and 6 on the main job's RunConfig with
`rounds` rounds and a fixed privacy seed, each section's JSON and Markdown written to OUT.
"""

from __future__ import annotations

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

SECTIONS = ("rounds", "calibration", "caches", "noise", "lora")  # rounds: sections 1 and 2


def suite_config(rounds: int) -> RunConfig:
    """The main job's configuration for `rounds` rounds, evaluated and checkpointed at the end only. privacy.seed:
    both runners draw the same cohort sizes round by round (a like-for-like comparison; the run is then
    reported not private, which does not change what a round does)."""
    base = RunConfig()
    return replace(base, privacy=replace(base.privacy, target_epsilon=None, noise_multiplier=1.0, seed=0),
                   federation=replace(base.federation, rounds=rounds, eval_every=rounds, checkpoint_every=rounds))


def run_benchmarks(out: Path, *, only: str | None = None, rounds: int = 6, repeats: int = 5,
                   calibration_rounds: list[int] | None = None) -> None:
    """Every section (or `only` that one, of SECTIONS), results in OUT; the calibration at `calibration_rounds`
    (default 30, 60, 100 rounds)."""
    calibration_rounds = calibration_rounds or [30, 60, 100]
    if only == "calibration":
        run_calibration(calibration_rounds, out)
        return
    if only == "caches":
        run_caches(repeats, out)
        return
    torch.set_num_threads(1)
    cfg = suite_config(rounds)
    if only == "noise":
        run_noise(cfg, out)
        return
    if only == "lora":
        run_lora(cfg, out, repeats)
        return
    client = bench_client(cfg, repeats)
    rounds_result = bench_rounds(cfg, out)
    save(out, "benchmark", {"client": client, "rounds": rounds_result}, rounds_tables(client, rounds_result))
    if only == "rounds":
        return
    run_calibration(calibration_rounds, out)
    run_caches(repeats, out)
    run_noise(cfg, out)
    run_lora(cfg, out, repeats)
