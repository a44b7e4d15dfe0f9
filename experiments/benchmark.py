"""Benchmarks, measured side by side in one run (timings on a shared machine are noisy: read the ratios).

1. Client update for one user: `client.update.client_update` (selection, batched training on pre-encoded
   tensors, one whole-update clip) versus a plain PyTorch loop over the same sentences (tokenize, pad and
   train batch by batch, then clip), same model, same number of steps.
2. Flower round overhead: the same configuration run as a Ray-backed Flower simulation and on the
   in-process grid (experiments/local_grid.py, same server loop and client code, no Flower): seconds per
   round (median over rounds 2..T; round 1 includes Ray start-up), and the clients' own compute per round.
3. Noise calibration for the main job's setting (q_u 0.25, q_e 0.2, q_s 0.2, m_max 80, k_cap 1, target
   epsilon 8, delta 1e-5) at T = 30, 60, 100: `uedp.privacy.calibration.calibrate_noise_multiplier` versus
   the reference search it replaced (same guarantee), each from cold accounting caches; z of both and seconds.

4. Caches and the corpus generator (what the tests check by behaviour, measured here): the entity-detection
   cache (spacy+rules on the synthetic corpus: first run, detect and write, versus the cached run), the
   tokenizer cache (train and save versus load) and the synthetic generator's sentences per second; each
   the median of --repeats runs, the first runs each into a fresh cache directory.

    python -m experiments.benchmark [--rounds 6] [--repeats 5] [--out outputs/benchmark]
    python -m experiments.benchmark --only calibration [--calibration-rounds 30 60 100]
    python -m experiments.benchmark --only caches [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from client.update import client_update
from experiments.local_grid import LocalGrid, set_local_task_identity
from uedp.config import RunConfig
from uedp.markdown import table
from uedp.models.base import get_weights, set_weights
from uedp.pipeline import load_manifest, load_tokenizer, new_model, prepare
from uedp.privacy.clipping import clip_update
from uedp.protocol import TrainInstructions
from uedp.tasks import per_sentence_loss
from uedp.tokenization import pad_sequences


def plain_pytorch_update(cfg: RunConfig, model: torch.nn.Module, texts: list[str], weights: list[np.ndarray], *,
                         steps_per_epoch: int) -> None:
    """A straightforward implementation: tokenize and pad each batch as it comes, mean loss, SGD."""
    tok = load_tokenizer(load_manifest(cfg).tokenizer)
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
    ins = TrainInstructions(round=1, mechanism="user_dp", q_e=1.0, q_s=1.0, k_cap=0, m_max=1, slot=-1,
                            beta=cfg.privacy.beta, w_u=1.0, private=True, optimizer="sgd", lr=cfg.train.lr,
                            momentum=0.0, local_epochs=1, local_steps=0, batch_size=cfg.train.batch_size)
    steps = -(-len(texts) // cfg.train.batch_size)
    client_update(cfg, user, weights, ins)  # warm-up (loads and encodes the user's data once)
    plain_model = new_model(cfg, manifest)
    plain_pytorch_update(cfg, plain_model, texts, weights, steps_per_epoch=steps)
    ours, plain = [], []
    for _ in range(repeats):  # interleaved, so both see the same machine load
        t = time.perf_counter()
        client_update(cfg, user, weights, ins)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        plain_pytorch_update(cfg, plain_model, texts, weights, steps_per_epoch=steps)
        plain.append(time.perf_counter() - t)
    return {"sentences": len(texts), "steps": steps, "client_update_s": statistics.median(ours),
            "plain_pytorch_s": statistics.median(plain),
            "ratio": statistics.median(ours) / statistics.median(plain)}


def _round_seconds(out: Path) -> list[float]:
    return [json.loads(x)["seconds"] for x in (out / "metrics.jsonl").read_text().splitlines()]


def bench_rounds(cfg: RunConfig, out: Path) -> dict:
    from experiments.simulate import simulate
    from server.app import run_server

    cfg_flower = replace(cfg, federation=replace(cfg.federation, out_dir=str(out / "flower")))
    cfg_local = replace(cfg, federation=replace(cfg.federation, out_dir=str(out / "local")))
    manifest = prepare(cfg)
    set_local_task_identity()
    grid = LocalGrid(cfg_local, len(manifest.users))
    run_server(grid, cfg_local)
    local = _round_seconds(out / "local")
    simulate(cfg_flower)
    flower = _round_seconds(out / "flower")
    compute = sum(grid.client_seconds) / len(local)
    return {"rounds": len(flower), "flower_round_s": statistics.median(flower[1:]),
            "flower_first_round_s": flower[0], "local_round_s": statistics.median(local[1:]),
            "client_compute_per_round_s": compute,
            "clients_per_round": grid.calls / len(local)}


CALIBRATION_SETTING = dict(q_u=0.25, q_e=0.2, q_s=0.2, m_max=80, k_cap=1)  # the main job's
CALIBRATION_TARGET = 8.0


def _clear_accounting_caches() -> None:
    from uedp.privacy import accounting

    for cached in (accounting._pld_epsilon, accounting._mixture_pld, accounting._rdp_epsilon):
        cached.cache_clear()


def bench_calibration(rounds: list[int]) -> list[dict]:
    """For each T: the reference and the fast calibration, each timed from cold accounting caches."""
    from uedp.privacy.calibration import calibrate_noise_multiplier, calibrate_noise_multiplier_reference

    rows = []
    for t in rounds:
        row: dict = {"rounds": t}
        for name, calibrate in (("reference", calibrate_noise_multiplier_reference),
                                ("new", calibrate_noise_multiplier)):  # fmt: skip
            _clear_accounting_caches()
            start = time.perf_counter()
            row[f"z_{name}"] = calibrate(CALIBRATION_TARGET, **CALIBRATION_SETTING, rounds=t)
            row[f"{name}_s"] = time.perf_counter() - start
        rows.append(row)
    return rows


def calibration_table(rows: list[dict]) -> str:
    return table(["T", "z reference", "z new", "abs dz", "seconds reference", "seconds new", "ratio"],
                 [[r["rounds"], f"{r['z_reference']:.6f}", f"{r['z_new']:.6f}",
                   f"{abs(r['z_new'] - r['z_reference']):.1e}", f"{r['reference_s']:.2f}", f"{r['new_s']:.2f}",
                   f"{r['reference_s'] / r['new_s']:.1f}x"] for r in rows], fmt=str)


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


def bench_caches(repeats: int, *, num_users: int = 200, generator_users: int = 1200) -> dict:
    """Seconds (medians over `repeats`) of: detection first run and cache hit, tokenizer training and load,
    and generating the synthetic corpus of `generator_users` users."""
    import os
    import tempfile

    from uedp.data.synthetic import load_synthetic
    from uedp.entities import annotate
    from uedp.errors import UedpError
    from uedp.tokenization import TokenizerConfig, get_tokenizer

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
            annotate(load_synthetic(num_users=2, seed=1), "ensemble", cache=False)  # warm-up: builds the lists
            result["ensemble_first_s"] = _median_seconds(
                lambda: annotate(corpus, "ensemble", cache_dir=Path(tmp, f"ann-{next(fresh)}")), repeats)
        except UedpError as exc:  # no spaCy model installed
            result["detect_skipped"] = str(exc).splitlines()[0]
        main_job = RunConfig().tokenizer
        cfg = TokenizerConfig(kind=main_job.kind, vocab_size=main_job.vocab_size)  # as uedp.pipeline builds it
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
        if "ensemble_first_s" in r:
            rows.append(["same with the ensemble detector (+ gazetteers, informal rules): first run",
                         f"{r['ensemble_first_s']:.3f}", f"{r['sentences'] / r['ensemble_first_s']:.0f} sentences/s"])
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="outputs/benchmark")
    ap.add_argument("--only", choices=["calibration", "caches"], help="run only this section")
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
    cfg = replace(base, privacy=replace(base.privacy, target_epsilon=0.0, noise_multiplier=1.0),
                  federation=replace(base.federation, rounds=args.rounds, eval_every=args.rounds,
                                     checkpoint_every=args.rounds))
    client = bench_client(cfg, args.repeats)
    rounds = bench_rounds(cfg, out)
    c, r = client, rounds
    text = table(["measurement", "seconds", "ratio"], [
        [f"client update, one user ({c['sentences']} sentences, {c['steps']} steps): ours",
         f"{c['client_update_s']:.3f}", f"{c['ratio']:.2f}x plain"],
        ["same sentences, plain PyTorch loop", f"{c['plain_pytorch_s']:.3f}", "1.00"],
        [f"round through Flower simulation (median, rounds 2..{r['rounds']})", f"{r['flower_round_s']:.2f}",
         f"{r['flower_round_s'] / r['local_round_s']:.2f}x in-process"],
        ["round in-process, no Flower (median)", f"{r['local_round_s']:.2f}", "1.00"],
        [f"clients' own compute per round ({r['clients_per_round']:.0f} clients, serial)",
         f"{r['client_compute_per_round_s']:.2f}", "-"],
        ["first Flower round (Ray start-up included)", f"{r['flower_first_round_s']:.2f}", "-"],
    ], fmt=str)
    save(out, "benchmark", {"client": client, "rounds": rounds}, text)
    run_calibration(args.calibration_rounds, out)
    run_caches(args.repeats, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
