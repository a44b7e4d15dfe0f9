"""Does a run on the GPU compute what it computes on the CPU, and what do a small transformer's rounds cost
there? The same small job on federation.device = cpu and = cuda, compared; then GPT-2's LoRA and full
fine-tuning rounds on cuda, timed and measured.

    python -m experiments.device_check [--rounds 3] [--users 8] [--seed 0] [--runner local|simulation]
                                       [--dtypes bfloat16] [--transformer-rounds 3] [--size small|tiny]
                                       [--device cuda|cpu] [--out outputs/device_check] [--json FILE]

NOT run by CI: CI has no GPU (a test checks only the refusal below, on a CPU-only machine, and rehearses the
transformer jobs with `--device cpu`). First it checks
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
and sampling: a reproduction run, labelled not private). Each run's files: OUT/cpu and OUT/cuda (replaced by
each check).

Then the transformer jobs, on cuda: a small GPT-2 built from scratch (model.name=gpt2, TRANSFORMER_SIZES
`--size`, dropout off) on the same corpus, trained for `--transformer-rounds` rounds by LoRA (model.lora.r =
LORA_R: the adapters are what trains and is sent) and by full fine-tuning (every weight), each in every dtype
of `--dtypes` (model.options.dtype; default bfloat16: mixed precision, uedp.models.precision), with Adam as
the local optimizer, in this process's in-process grid (its clients share the process, so the peak memory
counts them with the server's evaluation copy). Per job (`TransformerResult`): seconds per round (the mean of
metrics.jsonl's round times: the rounds' training and aggregation, not the evaluations), the peak GPU memory
(torch.cuda.max_memory_allocated, its counter reset before each job, and the models earlier jobs' clients kept
freed first), the noised dimension and the epsilons
of the run's summary.json; `transformer_table` prints them as a Markdown table, and every result (the
comparison's included) goes to OUT/device_check.json (`--json`). A job that fails (out of memory, say) is a
row with its error.

Exit status: 0 when both verdicts hold and every transformer job finished, 1 when not, 2 without CUDA.
`--device cpu` rehearses the transformer jobs on the CPU instead (no comparison, no GPU memory, no refusal):
how tests/test_device_memory.py runs the job list and the table at `--size tiny` on a machine without a GPU.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uedp.config import RunConfig
from uedp.devices import cuda_missing
from uedp.markdown import cell, table

# the transformer jobs (module docstring): the GPT-2 sizes from scratch, the adapters' rank, the dtypes
TRANSFORMER_SIZES = {
    "small": {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_positions": 64, "dropout": 0.0},
    "tiny": {"n_layer": 1, "n_embd": 16, "n_head": 2, "n_positions": 32, "dropout": 0.0},  # tests: seconds on a CPU
}
LORA_R = 8
DTYPES = ("float32", "bfloat16", "float16")  # model.options.dtype
JSON_NAME = "device_check.json"
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
                    "noise_multiplier": 1.0, "target_epsilon": None, "delta": 1e-3, "seed": seed},
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


@dataclass(frozen=True)
class TransformerJob:
    lora_r: int  # 0: full fine-tuning
    dtype: str  # model.options.dtype

    @property
    def name(self) -> str:
        return f"gpt2 {f'LoRA r={self.lora_r}' if self.lora_r else 'full'} {self.dtype}"

    @property
    def slug(self) -> str:  # its run directory under OUT/transformers
        return f"gpt2-{f'lora{self.lora_r}' if self.lora_r else 'full'}-{self.dtype}"


def transformer_jobs(dtypes: tuple[str, ...] = ("bfloat16",)) -> list[TransformerJob]:
    """LoRA and full fine-tuning in each of `dtypes` (ValueError for one outside DTYPES)."""
    bad = [d for d in dtypes if d not in DTYPES]
    if bad or not dtypes:
        raise ValueError(f"dtypes must be some of {', '.join(DTYPES)}, got {', '.join(dtypes) or 'none'}")
    return [TransformerJob(r, d) for d in dtypes for r in (LORA_R, 0)]


def transformer_config(out: Path, job: TransformerJob, *, device: str, rounds: int = 3, users: int = 8,
                       seed: int = 0, size: str = "small") -> RunConfig:
    """The transformer job `job` (module docstring) on `device`, writing into `out`: the comparison's corpus,
    tokenizer and mechanism, GPT-2 of TRANSFORMER_SIZES[size] from scratch, Adam."""
    base = job_config(out, device=device, rounds=rounds, users=users, seed=seed).to_nested()
    options = dict(TRANSFORMER_SIZES[size])
    if job.dtype != "float32":  # the option's default: a config that names it only where it changes something
        options["dtype"] = job.dtype
    base["model"] = {"name": "gpt2", "options": json.dumps(options), "lora": {"r": job.lora_r}}
    base["train"] = {**base["train"], "optimizer": "adam", "lr": 1e-3}
    return RunConfig.from_nested(base)


@dataclass(frozen=True)
class TransformerResult:
    job: str
    device: str
    dtype: str
    lora_r: int
    rounds: int
    seconds_per_round: float | None
    peak_gpu_bytes: int | None  # None on the CPU
    noised_dimension: int | None
    epsilons: dict[str, float]  # eps_uedp, eps_user, eps_undetected of summary.json
    final: float | None  # the final test metric (perplexity)
    error: str | None = None


EPSILONS = ("eps_uedp", "eps_user", "eps_undetected")


def round_seconds(out: Path) -> list[float]:
    """Each round's time from the run's metrics.jsonl (its `seconds`: the round, not the evaluation)."""
    path = out / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
    return [float(r["seconds"]) for r in rows if r.get("round", 0) >= 1 and "seconds" in r]


def run_transformer(cfg: RunConfig, job: TransformerJob) -> TransformerResult:
    """Run `cfg` (its out_dir fresh) in the in-process grid; the peak GPU memory on cuda (counter reset first)."""
    import torch

    from runtime.local_grid import run_local

    out = Path(cfg.federation.out_dir)
    shutil.rmtree(out, ignore_errors=True)
    device = cfg.federation.device
    cuda = device.startswith("cuda")
    if cuda:
        import gc

        import client.update

        client.update._model.cache_clear()  # the models an earlier job's in-process clients kept on the GPU
        gc.collect()
        torch.zeros(1, device=device)  # the CUDA context, outside the job
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    try:
        summary = run_local(cfg)
    except Exception as exc:  # noqa: BLE001 - one failed job (out of memory, say) is a row of the table
        return TransformerResult(job.name, device, job.dtype, job.lora_r, cfg.federation.rounds, None,
                                 torch.cuda.max_memory_allocated() if cuda else None, None, {}, None,
                                 f"{type(exc).__name__}: {exc}".split("\n")[0])
    peak = torch.cuda.max_memory_allocated() if cuda else None
    times = round_seconds(out)
    return TransformerResult(job.name, device, job.dtype, job.lora_r, int(summary["rounds"]),
                             sum(times) / len(times) if times else None, peak, summary.get("noised_dimension"),
                             {k: summary[k] for k in EPSILONS if k in summary},
                             summary["final"].get(summary["metric"]))


def transformer_table(results: list[TransformerResult]) -> str:
    """The transformer jobs as a Markdown table (module docstring)."""
    def show(v: float | None, how: str = "") -> str:
        return "-" if v is None else format(v, how) if how else cell(v)

    rows = [[r.job, r.device, r.rounds, show(r.seconds_per_round, ".3f"),
             show(None if r.peak_gpu_bytes is None else r.peak_gpu_bytes / 2**20, ",.0f"),
             show(r.noised_dimension, ","), *(show(r.epsilons.get(k)) for k in EPSILONS), show(r.final),
             r.error or "ok"] for r in results]
    return table(["job", "device", "rounds", "seconds per round", "peak GPU MiB", "noised dimension", *EPSILONS,
                  "final perplexity", "status"], rows)


def device_check(out: Path, *, rounds: int = 3, users: int = 8, seed: int = 0, runner: str = "local",
                 device: str = "cuda", dtypes: tuple[str, ...] = ("bfloat16",), transformer_rounds: int = 3,
                 size: str = "small", json_path: Path | None = None) -> tuple[int, str]:
    """(exit status, text): 2 and the refusal without CUDA; else 0 when both verdicts hold and every transformer
    job finished, 1 when not. `device` cpu: the transformer jobs only, on the CPU (module docstring). Writes
    every result to `json_path` (default OUT/JSON_NAME)."""
    if runner not in RUNNERS:
        raise ValueError(f"runner must be one of {', '.join(RUNNERS)}, got {runner!r}")
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if size not in TRANSFORMER_SIZES:
        raise ValueError(f"size must be one of {', '.join(TRANSFORMER_SIZES)}, got {size!r}")
    jobs = transformer_jobs(dtypes)
    if device == "cuda":
        why = refusal()
        if why is not None:
            return 2, why
    from uedp.pipeline import prepare

    ok, text, record = True, [], {"device": device, "size": size, "comparison": None}
    if device == "cuda":
        configs = {d: job_config(out / d, device=d, rounds=rounds, users=users, seed=seed) for d in DEVICES}
        prepare(configs["cpu"])  # the corpus and tokenizer, shared by both runs: outside their times
        cpu, gpu = (run_on(configs[d], runner=runner) for d in DEVICES)
        verdict = compare(cpu, gpu)
        ok = verdict["ledger_equal"] and verdict["metrics_ok"]
        text += [report(cpu, gpu, verdict), ""]
        record["comparison"] = {**verdict, "seconds": {"cpu": cpu.seconds, "cuda": gpu.seconds}}
    results = []
    for job in jobs:
        cfg = transformer_config(out / "transformers" / job.slug, job, device=device, rounds=transformer_rounds,
                                 users=users, seed=seed, size=size)
        results.append(run_transformer(cfg, job))
    ok = ok and all(r.error is None for r in results)
    text += [f"transformer jobs on {device} (GPT-2 {size} from scratch, {transformer_rounds} rounds, in-process "
             "grid):", "", transformer_table(results)]
    record["transformers"] = [dataclasses.asdict(r) for r in results]
    json_path = json_path or out / JSON_NAME
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(record, indent=1, default=str))
    text.append(f"\nwrote {json_path}")
    return (0 if ok else 1), "\n".join(text)
