"""Benchmarks, measured side by side in one run (timings on a shared machine are noisy: read the ratios).

1. Client update for one user: `client.app.client_update` (selection, batched training on pre-encoded
   tensors, one whole-update clip) versus a plain PyTorch loop over the same sentences (tokenize, pad and
   train batch by batch, then clip), same model, same number of steps.
2. Flower round overhead: the same configuration run as a Ray-backed Flower simulation and on the
   in-process grid (experiments/local_grid.py, same server loop and client code, no Flower): seconds per
   round (median over rounds 2..T; round 1 includes Ray start-up), and the clients' own compute per round.

    python -m experiments.benchmark [--rounds 6] [--repeats 5] [--out outputs/benchmark]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from client.app import client_update
from experiments.local_grid import LocalGrid, set_local_task_identity
from uedp.config import RunConfig
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
    ins = TrainInstructions(round=1, mode="user_dp", q_e=1.0, q_s=1.0, k_cap=0, m_max=1, slot=-1,
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="outputs/benchmark")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(args.out)
    base = RunConfig()
    cfg = replace(base, privacy=replace(base.privacy, target_epsilon=0.0, noise_multiplier=1.0),
                  federation=replace(base.federation, rounds=args.rounds, eval_every=args.rounds,
                                     checkpoint_every=args.rounds))
    client = bench_client(cfg, args.repeats)
    rounds = bench_rounds(cfg, out)
    result = {"client": client, "rounds": rounds}
    out.mkdir(parents=True, exist_ok=True)
    (out / "benchmark.json").write_text(json.dumps(result, indent=1))
    c, r = client, rounds
    lines = [
        "| measurement | seconds | ratio |",
        "|---|---|---|",
        f"| client update, one user ({c['sentences']} sentences, {c['steps']} steps): ours | "
        f"{c['client_update_s']:.3f} | {c['ratio']:.2f}x plain |",
        f"| same sentences, plain PyTorch loop | {c['plain_pytorch_s']:.3f} | 1.00 |",
        f"| round through Flower simulation (median, rounds 2..{r['rounds']}) | {r['flower_round_s']:.2f} | "
        f"{r['flower_round_s'] / r['local_round_s']:.2f}x in-process |",
        f"| round in-process, no Flower (median) | {r['local_round_s']:.2f} | 1.00 |",
        f"| clients' own compute per round ({r['clients_per_round']:.0f} clients, serial) | "
        f"{r['client_compute_per_round_s']:.2f} | - |",
        f"| first Flower round (Ray start-up included) | {r['flower_first_round_s']:.2f} | - |",
    ]
    text = "\n".join(lines)
    (out / "benchmark.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
