"""Does a run on the GPU compute what it computes on the CPU? The same small job on federation.device = cpu
and = cuda, compared.

    python -m experiments.device_check [--rounds 3] [--users 8] [--seed 0] [--runner local|simulation]
                                       [--out outputs/device_check]

NOT run by CI: CI has no GPU (a test checks only the refusal below, on a CPU-only machine). First it checks
that the installed torch has CUDA and sees a GPU; if not, it says how to install a CUDA build of torch
(uedp.devices.cuda_missing) and exits with status 2, running nothing. Otherwise it runs the job twice, in
this process's in-process grid (`--runner local`, the default: the real ClientApp handlers and server loop,
runtime/local_grid.py) or as a Ray-backed Flower simulation (`--runner simulation`, with each client's GPU
share: runtime/simulate.py), and reports, as a small table: each run's seconds (the GPU's CUDA context is
started before its run is timed; the corpus and tokenizer are prepared before either), its metrics and
epsilons, and two verdicts:

- ledgers: ledger.json's round records (every round's mechanism parameters, hash chain included) must be
  IDENTICAL. They hold only public parameters, which no device changes; a difference is a bug.
- metrics: the untrained model's test metrics within relative INITIAL_RTOL, the trained model's within
  FINAL_RTOL (counts of tokens and sentences, and the epsilons, exactly equal). Why not equal: GPU kernels
  sum in other orders than the CPU's, and cuDNN's LSTM may use TF32 tensor cores (torch.backends.cudnn.
  allow_tf32, on by default), so the evaluation differs in the last bits of float32, and the local
  training's steps carry those differences on into the next round's model (the server, its noise from a
  fixed seed and the one clip of each update stay on the CPU, identical code on both runs).

The job: the embedded synthetic corpus (`--users` users of 20-30 sentences), a 16-dimensional LSTM with
every dropout off (its masks would be drawn from the GPU's random generator, not the CPU's: another
trajectory, not a rounding difference), UeDP for `--rounds` rounds with privacy.seed `--seed` (fixed noise
and sampling: a reproduction run, labelled not private). Exit status 0 when both verdicts hold, 1 when one
fails. Each run's files: OUT/cpu and OUT/cuda (replaced by each check).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uedp.config import RunConfig
from uedp.devices import cuda_missing
from uedp.markdown import table

INITIAL_RTOL = 1e-3  # the same weights evaluated on both devices: float32 sums in another order, TF32
FINAL_RTOL = 1e-2  # after training: those differences carried through every local step and round
DEVICES = ("cpu", "cuda")
RUNNERS = ("local", "simulation")
EXACT = ("tokens", "sentences")  # metric keys that are counts, equal on every device


def refusal() -> str | None:
    """Why this machine cannot run the check (no CUDA: how to install it), or None when it can."""
    why = cuda_missing()
    if why is None:
        return None
    return f"device_check needs a GPU, and {why}. Nothing was run."


def job_config(out: Path, *, device: str, rounds: int = 3, users: int = 8, seed: int = 0) -> RunConfig:
    """The small job (module docstring) on `device`, writing into `out`."""
    return RunConfig.from_nested({
        "dataset": {"options": {"num_users": users, "min_sentences": 20, "max_sentences": 30}},
        "tokenizer": {"vocab_size": 300},
        "task": {"max_len": 16},
        "model": {"options": {"emb_dim": 16, "hidden_dim": 16, "embed_dropout": 0.0, "input_dropout": 0.0,
                              "hidden_dropout": 0.0, "output_dropout": 0.0}},
        "privacy": {"q_u": 0.5, "q_e": 0.5, "q_s": 0.5, "m_max": users, "k_cap": 2, "beta": 0.5,
                    "noise_multiplier": 1.0, "target_epsilon": 0.0, "delta": 1e-3, "seed": seed},
        "train": {"lr": 0.5, "batch_size": 8},
        "federation": {"rounds": rounds, "eval_every": rounds, "checkpoint_every": rounds, "out_dir": str(out),
                       "wait_timeout": 120.0, "device": device},
    })


@dataclass(frozen=True)
class DeviceRun:
    device: str
    seconds: float
    summary: dict[str, Any]
    ledger: list[dict[str, Any]]  # ledger.json's round records


def run_on(cfg: RunConfig, *, runner: str = "local") -> DeviceRun:
    """Run `cfg` (its out_dir fresh) and time it."""
    import torch

    from runtime.local_grid import run_local

    shutil.rmtree(cfg.federation.out_dir, ignore_errors=True)  # a fresh run, not the last check's files
    if cfg.federation.device == "cuda":
        torch.zeros(1, device="cuda")  # start the CUDA context outside the timed run
    t0 = time.perf_counter()
    if runner == "simulation":
        from runtime.simulate import simulate

        summary = simulate(cfg)
    else:
        summary = run_local(cfg)
    seconds = time.perf_counter() - t0
    ledger = json.loads((Path(cfg.federation.out_dir) / "ledger.json").read_text())["rounds"]
    return DeviceRun(cfg.federation.device, seconds, summary, ledger)


def _rel(a: float, b: float) -> float:
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b)) if math.isfinite(a) and math.isfinite(b) else math.inf


def compare(cpu: DeviceRun, gpu: DeviceRun) -> dict[str, Any]:
    """The verdicts (module docstring): ledgers identical; metrics within tolerance; epsilons equal."""
    worst: dict[str, float] = {}
    counts_equal = within = True
    for when, rtol in (("initial", INITIAL_RTOL), ("final", FINAL_RTOL)):
        a, b = cpu.summary[when], gpu.summary[when]
        counts_equal &= set(a) == set(b) and all(a[k] == b[k] for k in EXACT if k in a)
        worst[when] = max((_rel(float(a[k]), float(b[k])) for k in a if k not in EXACT and k in b), default=0.0)
        within &= worst[when] <= rtol
    eps_keys = ("eps_uedp", "eps_user", "eps_undetected")
    eps_equal = all(cpu.summary[k] == gpu.summary[k] for k in eps_keys)
    metrics_ok = counts_equal and eps_equal and within
    return {"ledger_equal": cpu.ledger == gpu.ledger, "rounds": len(cpu.ledger), "metrics_ok": metrics_ok,
            "worst_initial": worst["initial"], "worst_final": worst["final"], "counts_equal": counts_equal,
            "eps_equal": eps_equal}


def report(cpu: DeviceRun, gpu: DeviceRun, verdict: dict[str, Any]) -> str:
    """The table of both runs and the verdicts' lines."""
    metric = cpu.summary["metric"]
    rows = [[r.device, r.summary.get("device"), round(r.seconds, 2), r.summary["initial"].get(metric),
             r.summary["final"].get(metric), r.summary["eps_uedp"], len(r.ledger)] for r in (cpu, gpu)]
    lines = [table(["federation.device", "server evaluated on", "seconds", f"initial {metric}", f"final {metric}",
                    "eps_uedp", "ledger rounds"], rows), ""]
    same = "identical" if verdict["ledger_equal"] else "DIFFERENT (a bug: the ledger holds public parameters only)"
    lines.append(f"ledger.json round records: {same} ({verdict['rounds']} rounds)")
    within = "within" if verdict["metrics_ok"] else "OUTSIDE"
    lines.append(f"metrics: largest relative difference {verdict['worst_initial']:.2e} before training (tolerance "
                 f"{INITIAL_RTOL:g}), {verdict['worst_final']:.2e} after (tolerance {FINAL_RTOL:g}); counts "
                 f"{'equal' if verdict['counts_equal'] else 'DIFFERENT'}, epsilons "
                 f"{'equal' if verdict['eps_equal'] else 'DIFFERENT'}: {within} tolerance")
    lines.append(f"speed-up of cuda over cpu: {cpu.seconds / gpu.seconds:.2f}x (a tiny model: the GPU's launch "
                 "overheads dominate; the check is about equality, not speed)")
    return "\n".join(lines)


def device_check(out: Path, *, rounds: int = 3, users: int = 8, seed: int = 0,
                 runner: str = "local") -> tuple[int, str]:
    """(exit status, text): 2 and the refusal without CUDA; else 0 when both verdicts hold, 1 when not."""
    if runner not in RUNNERS:
        raise ValueError(f"runner must be one of {', '.join(RUNNERS)}, got {runner!r}")
    why = refusal()
    if why is not None:
        return 2, why
    from uedp.pipeline import prepare

    configs = {d: job_config(out / d, device=d, rounds=rounds, users=users, seed=seed) for d in DEVICES}
    prepare(configs["cpu"])  # the corpus and tokenizer, shared by both runs: outside their times
    cpu, gpu = (run_on(configs[d], runner=runner) for d in DEVICES)
    verdict = compare(cpu, gpu)
    ok = verdict["ledger_equal"] and verdict["metrics_ok"]
    return (0 if ok else 1), report(cpu, gpu, verdict)
