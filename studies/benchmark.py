"""Benchmarks, measured side by side in one run (timings on a shared machine are noisy: read the ratios).

1. Client update for one user: `client.update.client_update` (selection, batched training on pre-encoded
   tensors, one whole-update clip) versus a plain PyTorch loop over the same sentences (tokenize, pad and
   train batch by batch, then clip), same model, same number of steps.
2. Flower round overhead: the same configuration run as a Ray-backed Flower simulation and on the
   in-process grid (runtime/local_grid.py, same server loop and client code, no Flower): seconds per
   round (median over rounds 2..T; round 1 includes Ray start-up), and the clients' own compute per round.
   Then the round broken down, both runners side by side: the server loop's pieces (timed in this process by
   `ServerClock`, which wraps the strategy's configure_train / aggregate_train and the grid), the clients'
   deserialization / compute / serialization (timed inside the ClientApp by the timing mod the benchmark mounts
   beside uedp_mod: studies/timing_mod.py; one file per client process in a simulation, a list in process),
   Ray transfer / Flower overhead (what send_and_receive
   took beyond the busiest worker's time in the ClientApp), and CPU seconds per round of each process.
   Both runs use privacy.seed, so they draw the same cohort sizes round by round.
3. Noise calibration for the main job's setting (q_u 0.25, q_e 0.2, q_s 0.2, k_cap 1, N = 200 places, m_max
   automatic as privacy.m_max = "auto" picks it: safe_m_max, 89 at T = 30; target epsilon 8, delta 1e-5) at T = 30,
   60, 100: `uedp.privacy.calibration.calibrate` on eps_uedp, from cold accounting caches (`clear_caches`;
   calibrate keeps no disk cache); z, seconds, and eps_uedp at z and at z - tol (the guarantee).

4. Caches and the corpus generator (what the tests check by behaviour, measured here): the entity-detection
   cache (spacy+rules on the synthetic corpus: first run, detect and write, versus the cached run), the
   tokenizer cache (train and save versus load) and the synthetic generator's sentences per second; each
   the median of --repeats runs, the first runs each into a fresh cache directory.
5. Noise: the secure noise source (uedp.privacy.noise.SecureGaussianNoise: CSPRNG, sum of 4 draws)
   against CSPRNG-seeded Philox, in-process runs of the main job's configuration side by side (privacy.seed:
   the same cohorts; each source injected), alternating philox, secure, philox, secure: the noise's own
   seconds per round (timed around every draw), the median round, and their ratios.
6. LoRA (docs/own-model.md): section 1's comparison on the LoRA path: model hf on a small GPT-2 checkpoint
   (random weights, saved with the run's public tokenizer: `lora_config`) with rank-8 adapters; the plain loop
   trains the same adapters (the frozen base has no gradient) and clips them.

    python -m experiments.benchmark [--rounds 6] [--repeats 5] [--out outputs/benchmark]
    python -m experiments.benchmark --only rounds [--rounds 6]   (sections 1 and 2)
    python -m experiments.benchmark --only calibration [--calibration-rounds 30 60 100]
    python -m experiments.benchmark --only caches [--repeats 5]
    python -m experiments.benchmark --only noise [--rounds 6]
    python -m experiments.benchmark --only lora [--repeats 5]
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch
from flwr.app import ArrayRecord

from client.update import client_update
from runtime.local_grid import LocalGrid, set_local_task_identity
from uedp.config import ClientTrainConfig, RunConfig
from uedp.flower.mod import bound_update, model_update
from uedp.markdown import table
from uedp.models.base import get_weights, set_weights
from uedp.pipeline import load_manifest, new_model, prepare
from uedp.privacy.clipping import clip_update
from uedp.protocol import RoundInstructions, is_probe
from uedp.tasks import per_sentence_loss
from uedp.tokenization import pad_sequences
from uedp.training import LocalTraining


def plain_pytorch_update(cfg: RunConfig, model: torch.nn.Module, texts: list[str], weights: list[np.ndarray], *,
                         steps_per_epoch: int) -> None:
    """A straightforward implementation: tokenize and pad each batch as it comes, mean loss, SGD."""
    tok = load_manifest(cfg).text_tokenizer()
    set_weights(model, weights)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.train.lr)
    model.train()
    order = np.random.permutation(len(texts))
    bs = cfg.train.batch_size
    for start in range(0, steps_per_epoch * bs, bs):
        chunk = [texts[i] for i in order[start : start + bs]]
        seqs = [tok.frame(tok.encode(t), mode="lm", max_len=cfg.task.max_len) for t in chunk]
        batch = pad_sequences(seqs, pad_id=tok.pad_id)
        loss = per_sentence_loss(model, batch).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    delta = [n - o for n, o in zip(get_weights(model), weights)]
    clip_update(delta, cfg.privacy.beta)


def bench_client(cfg: RunConfig, repeats: int) -> dict:
    from uedp.data.store import read_user_rows

    manifest = prepare(cfg)
    user = 0
    texts = read_user_rows(manifest.corpus_dir, manifest.users[user], split="train").column("text").to_pylist()
    weights = get_weights(new_model(cfg, manifest, seed=0))
    ins = RoundInstructions(round=1, mechanism="user_dp", q_e=1.0, q_s=1.0, k_cap=0, m_max=1, slot=-1,
                            beta=cfg.privacy.beta, w_u=1.0, private=True)
    training = LocalTraining.from_config(ClientTrainConfig(lr=cfg.train.lr, batch_size=cfg.train.batch_size))

    def ours_update() -> None:  # the client round, then what the client mod does: the update, clipped once
        new, _ = client_update(cfg, user, weights, ins, training)
        bound_update(model_update(new, weights), ins)

    steps = -(-len(texts) // cfg.train.batch_size)
    ours_update()  # warm-up (loads and encodes the user's data once)
    plain_model = new_model(cfg, manifest)
    plain_pytorch_update(cfg, plain_model, texts, weights, steps_per_epoch=steps)
    ours, plain = [], []
    for _ in range(repeats):  # interleaved, so both see the same machine load
        t = time.perf_counter()
        ours_update()
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        plain_pytorch_update(cfg, plain_model, texts, weights, steps_per_epoch=steps)
        plain.append(time.perf_counter() - t)
    return {"sentences": len(texts), "steps": steps, "client_update_s": statistics.median(ours),
            "plain_pytorch_s": statistics.median(plain),
            "ratio": statistics.median(ours) / statistics.median(plain)}


# The LoRA client update (docs/own-model.md): a small GPT-2 of random weights, saved as a Hugging Face checkpoint
# with the run's public tokenizer, then trained as model hf with adapters; the plain loop trains the same adapters.
LORA_BASE = '{"n_layer": 2, "n_embd": 128, "n_head": 2}'


def lora_config(cfg: RunConfig, work: Path, *, rank: int = 8, base: str = LORA_BASE) -> RunConfig:
    """`cfg` with model hf: a GPT-2 (`base` options, random weights, cfg's tokenizer) saved under `work` as a
    checkpoint, and LoRA adapters of rank `rank` on it."""
    from uedp.config import LoraConfig, ModelConfig
    from uedp.models.export import MODEL_DIR, export_release

    gpt2 = replace(cfg, model=ModelConfig(name="gpt2", options=base))
    manifest = prepare(gpt2)
    export_release(work, new_model(gpt2, manifest, seed=0), tokenizer=manifest.text_tokenizer(), checkpoint=None,
                   summary={"private": False, "warning": "random weights for the benchmark: no training, no data"})
    options = json.dumps({"path": str(work / MODEL_DIR)})
    return replace(cfg, model=ModelConfig(name="hf", options=options, lora=LoraConfig(r=rank)))


def bench_lora(cfg: RunConfig, work: Path, repeats: int, **model: Any) -> dict:
    """bench_client on the LoRA path (lora_config, given `model`'s rank and base): ours against a plain PyTorch
    loop over the same adapters."""
    return bench_client(lora_config(cfg, work, **model), repeats)


def lora_table(c: dict) -> str:
    return table(["measurement", "seconds", "ratio"], [
        [f"LoRA client update (GPT-2 {LORA_BASE}, rank 8), one user ({c['sentences']} sentences, {c['steps']} "
         "steps): ours", f"{c['client_update_s']:.3f}", f"{c['ratio']:.2f}x plain"],
        ["same sentences and adapters, plain PyTorch loop", f"{c['plain_pytorch_s']:.3f}", "1.00"]])


def _round_seconds(out: Path) -> list[float]:
    return [json.loads(x)["seconds"] for x in (out / "metrics.jsonl").read_text().splitlines()]


class ServerClock:
    """Benchmark-only instrumentation of the server's rounds (Flower's start around uedp.flower.UserEntityDP),
    in this process: seconds per round in configure_train, send_and_receive and aggregate_train. `patched()`
    wraps UserEntityDP's two methods for its duration (the ServerApp of a simulation runs in this process too);
    `grid(g)` wraps a grid (the round's training send_and_receive; the empty evaluation one is not timed)."""

    def __init__(self) -> None:
        self.rounds: dict[int, dict[str, float]] = {}
        self._round = 0

    def _add(self, piece: str, seconds: float) -> None:
        self.rounds.setdefault(self._round, {})[piece] = seconds

    @contextlib.contextmanager
    def patched(self):
        from uedp.flower.strategy import UserEntityDP

        configure, aggregate = UserEntityDP.configure_train, UserEntityDP.aggregate_train
        clock = self

        def timed_configure(self, server_round, *args, **kwargs):
            clock._round = server_round
            clock._add("process_cpu", time.process_time())  # this process's CPU seconds at the round's start
            t = time.perf_counter()
            out = configure(self, server_round, *args, **kwargs)
            clock._add("configure", time.perf_counter() - t)
            return out

        def timed_aggregate(self, server_round, *args, **kwargs):
            t = time.perf_counter()
            out = aggregate(self, server_round, *args, **kwargs)
            clock._add("aggregate", time.perf_counter() - t)
            return out

        with mock.patch.object(UserEntityDP, "configure_train", timed_configure), \
                mock.patch.object(UserEntityDP, "aggregate_train", timed_aggregate):
            yield self

    def grid(self, grid):
        clock = self

        class TimedGrid:
            """The grid, timed; it holds the grid it wraps as `grid` (uedp.flower.places.grid_kind reads it)."""

            def __init__(self, inner) -> None:
                self.grid = inner

            def __getattr__(self, name):
                return getattr(self.grid, name)

            def send_and_receive(self, messages, *, timeout=None):
                messages = list(messages)
                t = time.perf_counter()
                out = self.grid.send_and_receive(messages, timeout=timeout)
                if messages and not all(is_probe(m) for m in messages):  # a round's (not the probe, nor the
                    clock._add("send_and_receive", time.perf_counter() - t)  # empty evaluation step)
                return out

        return TimedGrid(grid)


def _breakdown(metrics_dir: Path, clock: ServerClock, laps: list[dict], *, serialize_s: float) -> dict:
    """Per round (median over rounds 2..T) seconds of each piece; `laps`: one {round, decode, compute, encode,
    [worker]} per client message. Transfer = send_and_receive wall time minus the busiest worker's in-app time."""
    rows = [json.loads(x) for x in (metrics_dir / "metrics.jsonl").read_text().splitlines()]
    per_round: list[dict[str, float]] = []
    last_cpu: dict[Any, float] = {}  # worker -> its process CPU seconds after its last message so far
    for row in rows:
        rnd, server = row["round"], clock.rounds.get(row["round"], {})
        mine = [lap for lap in laps if lap["round"] == rnd]
        sums = {k: sum(lap[k] for lap in mine) for k in ("decode", "compute", "encode")}
        busy: dict[Any, float] = {}
        worker_cpu = 0.0
        for lap in mine:
            busy[lap.get("worker")] = busy.get(lap.get("worker"), 0.0) + lap["decode"] + lap["compute"] + lap["encode"]
        for worker in busy:
            if "process_cpu" in mine[0]:
                now = max(lap["process_cpu"] for lap in mine if lap.get("worker") == worker)
                worker_cpu += now - last_cpu.get(worker, now)
                last_cpu[worker] = now
        if rnd == rows[0]["round"]:
            continue  # round 1: start-up
        wall = server.get("send_and_receive", 0.0)
        piece = {"round": row["seconds"], "configure": server.get("configure", 0.0), "send_and_receive": wall,
                 **sums, "transfer": wall - max(busy.values(), default=0.0),
                 "aggregate": server.get("aggregate", 0.0), "serialize": serialize_s, "clients": float(len(mine)),
                 "client_cpu": sum(lap.get("cpu", 0.0) for lap in mine), "worker_process_cpu": worker_cpu}
        following = clock.rounds.get(rnd + 1, {})
        if "process_cpu" in following and "process_cpu" in server:  # rounds 2..T-1
            piece["server_process_cpu"] = following["process_cpu"] - server["process_cpu"]
        piece["rest"] = (piece["round"] - piece["configure"] - wall - piece["aggregate"] - serialize_s)
        per_round.append(piece)
    keys = {k for p in per_round for k in p}
    return {k: statistics.median(p[k] for p in per_round if k in p) for k in sorted(keys)}


def _payload_seconds(cfg: RunConfig, repeats: int = 20) -> dict[str, float]:
    """Per message, on this run's model: model -> ArrayRecord (what the server sends, the clients reply),
    and ArrayRecord -> ndarrays (what each client and the server's aggregation decode)."""

    weights = get_weights(new_model(cfg, load_manifest(cfg), seed=0))
    record = ArrayRecord(list(weights))
    return {"to_record_s": _median_seconds(lambda: ArrayRecord(list(weights)), repeats),
            "to_numpy_s": _median_seconds(record.to_numpy_ndarrays, repeats),
            "payload_bytes": float(record.count_bytes())}


def _flower_laps(directory: Path) -> list[dict]:
    laps = []
    for path in sorted(directory.glob("client-*.jsonl")):
        laps += [{**json.loads(x), "worker": path.stem} for x in path.read_text().splitlines()]
    return laps


def bench_rounds(cfg: RunConfig, out: Path) -> dict:
    import shutil

    from runtime.simulate import make_simulation_server_app, simulate
    from server.app import run_server
    from studies.timing_mod import timed_client_app

    for runner in ("flower", "local"):  # metrics.jsonl is appended to: a previous benchmark's rows would count
        shutil.rmtree(out / runner, ignore_errors=True)
    cfg_flower = replace(cfg, federation=replace(cfg.federation, out_dir=str(out / "flower")))
    cfg_local = replace(cfg, federation=replace(cfg.federation, out_dir=str(out / "local")))
    manifest = prepare(cfg)
    payload = _payload_seconds(cfg)
    set_local_task_identity()
    local_laps: list[dict[str, float]] = []
    grid = LocalGrid(cfg_local, len(manifest.users), app=timed_client_app(cfg_local, sink=local_laps.append))
    local_clock = ServerClock()
    with local_clock.patched():
        run_server(local_clock.grid(grid), cfg_local)
    local = _round_seconds(out / "local")
    timings = out / "flower" / "client-timings"
    timings.mkdir(parents=True)
    flower_clock = ServerClock()
    with flower_clock.patched():
        simulate(cfg_flower, server_app=make_simulation_server_app(cfg_flower, wrap_grid=flower_clock.grid),
                 client_app=timed_client_app(cfg_flower, directory=str(timings.resolve())))
    flower = _round_seconds(out / "flower")
    compute = sum(grid.client_seconds) / len(local)
    return {"rounds": len(flower), "flower_round_s": statistics.median(flower[1:]),
            "flower_first_round_s": flower[0], "local_round_s": statistics.median(local[1:]),
            "client_compute_per_round_s": compute,
            "clients_per_round": len(grid.client_seconds) / len(local), "payload": payload,
            "flower_breakdown": _breakdown(out / "flower", flower_clock, _flower_laps(timings),
                                           serialize_s=payload["to_record_s"]),
            "local_breakdown": _breakdown(out / "local", local_clock, local_laps,
                                          serialize_s=payload["to_record_s"])}


CALIBRATION_SETTING = dict(q_u=0.25, q_e=0.2, q_s=0.2, k_cap=1, num_users=200)  # the main job's (m_max: auto)
CALIBRATION_TARGET = 8.0
CALIBRATION_TOL = 1e-3


def bench_calibration(rounds: list[int]) -> list[dict]:
    """For each T: the calibration timed from cold accounting caches (uedp.privacy.calibration.clear_caches:
    every in-memory cache; `calibrate` uses no disk cache), and the guarantee eps(z) <= target < eps(z - tol)."""
    from uedp.privacy.accounting import DEFAULT_DELTA, epsilon_of, mechanism, safe_m_max
    from uedp.privacy.calibration import calibrate, clear_caches

    setting = {k: v for k, v in CALIBRATION_SETTING.items() if k != "num_users"}
    n = CALIBRATION_SETTING["num_users"]
    rows = []
    for t in rounds:
        # privacy.m_max = "auto" (the main job's): the cap server/setup.py picks for these N, q_u, T and delta
        m_max = safe_m_max(n, CALIBRATION_SETTING["q_u"], t, DEFAULT_DELTA)

        def runs(z: float, t: int = t, m_max: int = m_max) -> list:
            return [(mechanism("uedp", z=z, m_max=m_max, **setting), t)]

        clear_caches()
        start = time.perf_counter()
        z = calibrate(runs, CALIBRATION_TARGET, "uedp", delta=DEFAULT_DELTA, num_users=n, tol=CALIBRATION_TOL)
        seconds = time.perf_counter() - start
        eps = [epsilon_of(runs(x), "uedp", delta=DEFAULT_DELTA, num_users=n) for x in (z, z - CALIBRATION_TOL)]
        rows.append({"rounds": t, "m_max": m_max, "z": z, "seconds": seconds, "eps_at_z": eps[0],
                     "eps_below": eps[1]})
    return rows


def calibration_table(rows: list[dict]) -> str:
    return table(["T", "m_max", "z", "eps_uedp(z)", f"eps_uedp(z - {CALIBRATION_TOL:g})", "seconds"],
                 [[r["rounds"], r["m_max"], f"{r['z']:.6f}", f"{r['eps_at_z']:.5f}", f"{r['eps_below']:.5f}",
                   f"{r['seconds']:.2f}"] for r in rows], fmt=str)


def save(out: Path, name: str, result: Any, text: str) -> None:
    """OUT/NAME.json (the measurements) and OUT/NAME.md (the table, also printed)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))
    (out / f"{name}.md").write_text(text + "\n")
    print(text)


def run_calibration(rounds: list[int], out: Path) -> list[dict]:
    rows = bench_calibration(rounds)
    save(out, "calibration", rows, calibration_table(rows))
    return rows


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


PROFILED = {"ensemble": "+ gazetteers, informal rules", "balanced": "the default profile",
            "recall": "the paranoid profile"}


def bench_caches(repeats: int, *, num_users: int = 200, generator_users: int = 1200) -> dict:
    """Seconds (medians over `repeats`) of: detection first run and cache hit, tokenizer training and load,
    and generating the synthetic corpus of `generator_users` users."""
    import os
    import tempfile

    from uedp.data.synthetic import load_synthetic
    from uedp.entities import annotate
    from uedp.errors import UedpError
    from uedp.tokenization import TokenizerTraining, get_tokenizer

    corpus = load_synthetic(num_users=num_users, seed=0)
    result: dict = {"users": num_users, "sentences": corpus.num_sentences}
    with tempfile.TemporaryDirectory(prefix="uedp-bench-caches-") as tmp:
        fresh = iter(range(10**6))
        try:
            annotate(load_synthetic(num_users=2, seed=1), "spacy+rules", cache=False)  # warm-up: loads spaCy
            result["detect_first_s"] = _median_seconds(
                lambda: annotate(corpus, "spacy+rules", cache_dir=Path(tmp, f"ann-{next(fresh)}")), repeats)
            result["detect_cached_s"] = _median_seconds(
                lambda: annotate(corpus, "spacy+rules", cache_dir=Path(tmp, "ann-0")), repeats)
            for detector in PROFILED:  # the other detectors' first runs, side by side with spacy+rules
                annotate(load_synthetic(num_users=2, seed=1), detector, cache=False)  # warm-up: builds the lists
                result[f"{detector}_first_s"] = _median_seconds(
                    lambda d=detector: annotate(corpus, d, cache_dir=Path(tmp, f"ann-{next(fresh)}")), repeats)
        except UedpError as exc:  # no spaCy model installed
            result["detect_skipped"] = str(exc).splitlines()[0]
        main_job = RunConfig().tokenizer
        cfg = TokenizerTraining(kind=main_job.kind, vocab_size=main_job.vocab_size)  # as uedp.pipeline builds it
        result["tokenizer"] = f"{cfg.kind}, vocabulary {cfg.vocab_size}"
        result["train_sentences"] = corpus.split("train").num_rows
        previous = os.environ.get("UEDP_CACHE_DIR")
        try:
            def train() -> None:
                os.environ["UEDP_CACHE_DIR"] = str(Path(tmp, f"tok-{next(fresh)}"))
                assert get_tokenizer(corpus, cfg).source == "trained"

            result["tokenizer_train_s"] = _median_seconds(train, repeats)
            result["tokenizer_load_s"] = _median_seconds(lambda: get_tokenizer(corpus, cfg), repeats)
        finally:
            if previous is None:
                os.environ.pop("UEDP_CACHE_DIR", None)
            else:
                os.environ["UEDP_CACHE_DIR"] = previous
    sizes = []

    def generate() -> None:
        sizes.append(load_synthetic(num_users=generator_users, seed=0, canary_users=(1, 2, 4, 8)).num_sentences)

    result["generator_users"] = generator_users
    result["generator_s"] = _median_seconds(generate, repeats)
    result["generator_sentences"] = sizes[0]
    return result


def caches_table(r: dict) -> str:

    rows = []
    if "detect_skipped" in r:
        rows.append([f"entity detection cache: skipped ({r['detect_skipped']})", "-", "-"])
    else:
        rows += [[f"entity detection, spacy+rules, synthetic corpus ({r['users']} users, {r['sentences']} sentences):"
                  " first run (detect + write cache)", f"{r['detect_first_s']:.3f}",
                  f"{r['sentences'] / r['detect_first_s']:.0f} sentences/s"],
                 ["same, cached run (read the cache)", f"{r['detect_cached_s']:.4f}",
                  f"{r['detect_first_s'] / r['detect_cached_s']:.0f}x faster"]]
        for detector, what in PROFILED.items():
            if f"{detector}_first_s" in r:
                rows.append([f"same with the {detector} detector ({what}): first run",
                             f"{r[f'{detector}_first_s']:.3f}",
                             f"{r['sentences'] / r[f'{detector}_first_s']:.0f} sentences/s"])
    rows += [[f"tokenizer ({r['tokenizer']}) on {r['train_sentences']} train sentences: train + save",
              f"{r['tokenizer_train_s']:.3f}", "-"],
             ["same, load from the cache", f"{r['tokenizer_load_s']:.4f}",
              f"{r['tokenizer_train_s'] / r['tokenizer_load_s']:.0f}x faster"],
             [f"synthetic generator, {r['generator_users']} users ({r['generator_sentences']} sentences)",
              f"{r['generator_s']:.3f}", f"{r['generator_sentences'] / r['generator_s']:.0f} sentences/s"]]
    return table(["measurement", "seconds", "ratio"], rows, fmt=str)


def run_caches(repeats: int, out: Path) -> dict:
    result = bench_caches(repeats)
    save(out, "caches", result, caches_table(result))
    return result




BREAKDOWN = [  # (key, row label, what it is); client rows are sums over the round's clients
    ("round", "round (wall)", "a round of Flower's loop: configure_train, send_and_receive, "
     "aggregate_train (to the new global arrays)"),
    ("serialize", "server: model serialization", "ArrayRecord(model weights), once a round: every message shares "
     "it (same model, measured apart)"),
    ("configure", "server: configure_train", "sampling, instructions, one Message per sampled client"),
    ("send_and_receive", "server: send_and_receive (wall)", "from pushing the messages to the last reply"),
    ("decode", "- clients: model deserialization (sum)", "the message to the client round: instructions, "
     "ArrayRecord -> ndarrays (the client mod's, handed to the train function)"),
    ("compute", "- clients: compute (sum)", "client_update: read/encode the user (cache miss), select, train "
     "(the new model)"),
    ("encode", "- clients: update, clip and reply (sum)", "ArrayRecord(new model), then the client mod's part: "
     "theta_local - theta_t, ONE clip of the whole update, ArrayRecord(update) and the reply Message"),
    ("transfer", "- Ray transfer / Flower message overhead", "send_and_receive minus the busiest worker's time "
     "in the ClientApp (simulation: 2 actors in parallel; in-process: 1 serial loop)"),
    ("aggregate", "server: aggregate_train", "the release (replies to ndarrays, re-check, sum, noise), the ledger "
     "saved, the update applied by the wrapped strategy"),
    ("rest", "server: the rest", "what else the round's time holds (it ends once the update is applied)"),
    ("client_cpu", "CPU s: clients in the ClientApp", "CPU seconds of the three client rows (both: sum over "
     "clients)"),
    ("worker_process_cpu", "CPU s: client actor processes", "the actors' CPU seconds, Ray's (de)serialization "
     "and task handling included"),
    ("server_process_cpu", "CPU s: server process", "the process running the ServerApp (simulation: also "
     "Flower's SuperLink and Ray driver; in-process: also the clients); rounds 2..T-1, accounting included"),
]


def rounds_tables(c: dict, r: dict) -> str:
    """The summary table (client update, rounds) and the round's breakdown, as markdown."""
    flower, local, n = r["flower_breakdown"], r["local_breakdown"], r["clients_per_round"]
    extra_ms = 1000 * (r["flower_round_s"] - r["local_round_s"]) / max(flower.get("clients", n), 1)
    summary = table(["measurement", "seconds", "ratio"], [
        [f"client update, one user ({c['sentences']} sentences, {c['steps']} steps): ours",
         f"{c['client_update_s']:.3f}", f"{c['ratio']:.2f}x plain"],
        ["same sentences, plain PyTorch loop", f"{c['plain_pytorch_s']:.3f}", "1.00"],
        [f"round through Flower simulation (median, rounds 2..{r['rounds']})", f"{r['flower_round_s']:.2f}",
         f"{r['flower_round_s'] / r['local_round_s']:.2f}x in-process"],
        ["round in-process, no Flower (median)", f"{r['local_round_s']:.2f}", "1.00"],
        [f"Flower's extra time per message ({flower.get('clients', n):.0f} clients a round)",
         f"{extra_ms / 1000:.4f}", "-"],
        [f"clients' own compute per round ({n:.0f} clients, serial)", f"{r['client_compute_per_round_s']:.2f}",
         "-"],
        ["first Flower round (Ray start-up included)", f"{r['flower_first_round_s']:.2f}", "-"],
    ], fmt=str)
    p = r["payload"]
    rows = [[label, f"{flower.get(key, 0.0):.4f}", f"{local.get(key, 0.0):.4f}", what]
            for key, label, what in BREAKDOWN]
    breakdown = table([f"one round (median, rounds 2..{r['rounds']}), seconds", "Flower simulation", "in-process",
                       "what it is"], rows, fmt=str)
    note = (f"Payload: {p['payload_bytes'] / 1e6:.2f} MB a message each way (float32); per message, measured apart: "
            f"ArrayRecord(weights) {1000 * p['to_record_s']:.2f} ms, to_numpy_ndarrays {1000 * p['to_numpy_s']:.2f}"
            " ms. Client rows are sums over the round's clients (in the simulation they run in 2 actors at once).")
    return f"{summary}\n\n{breakdown}\n\n{note}"


# -- 5. noise -------------------------------------------------------------------------------------------------
class TimedNoise:
    """Benchmark-only NoiseSource wrapper: seconds and coordinates of every draw of `inner`."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.mode = inner, inner.mode
        self.reproducible, self.warning = inner.reproducible, inner.warning
        self.seconds: list[float] = []
        self.coordinates = 0

    def normal(self, shape: tuple[int, ...], std: float) -> np.ndarray:
        start = time.perf_counter()
        out = self.inner.normal(shape, std)
        self.seconds.append(time.perf_counter() - start)
        self.coordinates += out.size
        return out


def bench_noise(cfg: RunConfig, out: Path, *, repeats: int = 2) -> dict:
    """Per noise source: the noise's seconds per round and the median round (rounds 2..T), over `repeats`
    alternating runs each (see the module docstring)."""
    import shutil

    from server.app import run_server
    from server.setup import Components
    from uedp.privacy.noise import GaussianNoise, SecureGaussianNoise

    manifest = prepare(cfg)
    set_local_task_identity()
    found: dict[str, dict[str, list[float]]] = {}
    for i in range(repeats):
        for mode, make in (("philox", GaussianNoise), ("secure", SecureGaussianNoise)):
            run_dir = out / f"noise-{mode}-{i}"
            shutil.rmtree(run_dir, ignore_errors=True)
            run_cfg = replace(cfg, federation=replace(cfg.federation, out_dir=str(run_dir)))
            noise = TimedNoise(make())
            run_server(LocalGrid(run_cfg, len(manifest.users)), run_cfg, components=Components(noise=noise))
            rounds = _round_seconds(run_dir)
            per_round = sum(noise.seconds) / len(rounds)
            got = found.setdefault(mode, {"noise_s": [], "round_s": [], "coordinates": []})
            got["noise_s"].append(per_round)
            got["round_s"].extend(rounds[1:])
            got["coordinates"].append(noise.coordinates / len(rounds))
    return {mode: {"noise_per_round_s": statistics.median(v["noise_s"]), "round_s": statistics.median(v["round_s"]),
                   "coordinates_per_round": statistics.median(v["coordinates"]), "runs": repeats,
                   "rounds_measured": len(v["round_s"])} for mode, v in found.items()}


def noise_table(r: dict) -> str:
    base = r["philox"]
    rows = [[mode, f"{v['coordinates_per_round']:.0f}", f"{v['noise_per_round_s']:.4f}",
             f"{v['noise_per_round_s'] / base['noise_per_round_s']:.1f}x", f"{v['round_s']:.3f}",
             f"{100 * v['noise_per_round_s'] / v['round_s']:.1f}%", f"{v['round_s'] / base['round_s']:.3f}"]
            for mode, v in r.items()]
    return table(["noise", "coordinates a round", "noise s a round", "vs philox", "round s (median)",
                  "noise / round", "round vs philox"], rows, fmt=str)


def run_lora(cfg: RunConfig, out: Path, repeats: int) -> dict:
    r = bench_lora(cfg, out / "lora-base", repeats)
    save(out, "lora", r, lora_table(r))
    return r


def run_noise(cfg: RunConfig, out: Path, *, repeats: int = 2) -> dict:
    r = bench_noise(cfg, out, repeats=repeats)
    save(out, "noise", r, noise_table(r))
    return r
