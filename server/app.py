"""The ServerApp: builds data, model, strategy and accountant from a RunConfig and runs the rounds.

Per round: budget check (never run a round that would take epsilon past the target), configure_train ->
send_and_receive -> aggregate_train (noisy mean update), record the round in the privacy ledger and save
the ledger, THEN apply the update with the server optimizer (the new model exists only after its round is
accounted for), central evaluation every `eval_every` rounds, metrics (CSV/JSONL), progress line, and a
checkpoint every `checkpoint_every` rounds. At the end: summary.json and model.pt, after the ledger.

`run_server(grid, cfg)` is the loop (tests and the Hydra entry point call it through `make_server_app`);
the module-level `app` reads its RunConfig from `context.run_config` (`flwr run`).
"""

from __future__ import annotations

import json
import logging
import random
import secrets
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp

from server.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from server.metrics import MetricsWriter
from server.optimizer import ServerOptimizer
from strategies.base import PrivateFedStrategy, build_strategy
from uedp.config import RunConfig
from uedp.errors import ConfigError
from uedp.models.base import get_weights
from uedp.pipeline import load_split, new_model, prepare
from uedp.privacy.accounting import calibrate_noise_multiplier, epsilon
from uedp.privacy.ledger import Ledger
from uedp.privacy.noise import FIXED_SEED_WARNING, GaussianNoise
from uedp.training import evaluate_encoded

log = logging.getLogger(__name__)
LEDGER = "ledger.json"
SUMMARY = "summary.json"


def adjacency_of(strategy: PrivateFedStrategy) -> str:
    """The adjacency a strategy's claim is about: user-level DP claims eps_user, UeDP claims eps_uedp."""
    return "user" if strategy.spec.method == "user_dp" else "uedp"


def noise_multiplier(cfg: RunConfig, *, method: str, population: int) -> float:
    """privacy.noise_multiplier, or the smallest z reaching privacy.target_epsilon in federation.rounds."""
    p = cfg.privacy
    if method == "noiseless":
        return 0.0
    if p.target_epsilon <= 0:
        if p.noise_multiplier <= 0:
            raise ConfigError("privacy.noise_multiplier must be > 0 when privacy.target_epsilon is 0")
        return p.noise_multiplier
    user_dp = method == "user_dp"
    return calibrate_noise_multiplier(
        p.target_epsilon, method=method, adjacency="user" if user_dp else "uedp", q_u=p.q_u,
        q_e=None if user_dp else p.q_e, q_s=None if user_dp else (0.0 if method == "uedp_naive" else p.q_s),
        m_max=None if user_dp else p.m_max, k_cap=None if user_dp else (p.k_cap or None),
        rounds=cfg.federation.rounds, delta=p.delta, num_users=population, tol=1e-3,
    )


def wait_for_nodes(grid: Grid, expected: int, timeout: float, stream: TextIO) -> int:
    t0 = time.monotonic()
    seen = len(list(grid.get_node_ids()))
    while seen < expected:
        if time.monotonic() - t0 > timeout:
            raise ConfigError(f"only {seen} of {expected} nodes registered within {timeout:.0f} s "
                              "(federation.wait_timeout)")
        time.sleep(0.2)
        seen = len(list(grid.get_node_ids()))
    print(f"{seen} nodes registered ({time.monotonic() - t0:.1f} s)", file=stream, flush=True)
    return seen


def run_server(grid: Grid, cfg: RunConfig, *, stream: TextIO | None = None) -> dict[str, Any]:
    stream = stream or sys.stderr
    t_start = time.monotonic()
    out = Path(cfg.federation.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg.to_nested(), indent=1))
    manifest = prepare(cfg)
    population = len(manifest.users)
    p = cfg.privacy
    fixed = p.seed >= 0
    if fixed:
        print(f"WARNING: {FIXED_SEED_WARNING} (privacy.seed={p.seed}); this run is for reproduction only",
              file=stream, flush=True)
    noise = GaussianNoise(seed=p.seed if fixed else None)
    rng: random.Random = random.Random(p.seed) if fixed else secrets.SystemRandom()

    name = cfg.strategy.name
    method = {"uedp": "uedp_naive" if cfg.strategy.estimator == "f_E" else "uedp",
              "user_dp": "user_dp", "fedavg": "noiseless", "deid": "noiseless"}[name]
    z = noise_multiplier(cfg, method=method, population=population)
    extra = {"estimator": cfg.strategy.estimator} if name == "uedp" else {}
    strategy = build_strategy(name, privacy=p, train=cfg.train, noise_multiplier=z, population=population,
                              noise=noise, rng=rng, num_entities=manifest.num_entities,
                              num_extended=manifest.num_extended, **extra)
    adjacency = adjacency_of(strategy)

    model = new_model(cfg, manifest, seed=p.seed if fixed else None)
    optimizer = ServerOptimizer(model, name=cfg.server.optimizer, lr=cfg.server.lr, momentum=cfg.server.momentum)
    strategy.set_template(get_weights(model))
    ledger = Ledger(delta=p.delta, num_users=population)
    first_round = 1
    metrics = MetricsWriter(out, stream=stream)
    if cfg.federation.resume:
        ledger = Ledger.resume(out / LEDGER, delta=p.delta, num_users=population)
        ckpt = load_checkpoint(out)
        if ckpt is not None:
            model.load_state_dict(ckpt.model_state)
            optimizer.load_state_dict(ckpt.optimizer_state)
        first_round = (ledger.last_round or 0) + 1
        lost = (ledger.last_round or 0) - (ckpt.round if ckpt else 0)
        print(f"resuming after round {ledger.last_round or 0} (checkpoint of round "
              f"{ckpt.round if ckpt else 0}; {lost} round(s) after it stay charged)", file=stream, flush=True)
    strategy.summary()
    print(f"{name} ({method}): z={z:.4f} sigma={strategy.sigma:.4g} Z={strategy.Z:.4g} "
          f"population={population} rounds={cfg.federation.rounds}", file=stream, flush=True)

    test = load_split(cfg, "test")
    metric_name = "perplexity" if cfg.task.name == "next_word" else "error"
    initial = evaluate_encoded(model, test)
    wait_for_nodes(grid, population, cfg.federation.wait_timeout, stream)

    stopped_by_budget = False
    last_eval: dict[str, float] = initial
    eps: dict[str, float] = ledger.epsilons() if len(ledger) and strategy.spec.private else {}
    for rnd in range(first_round, cfg.federation.rounds + 1):
        record = strategy.round_record(rnd)
        eps_after: float | None = None
        if strategy.spec.private and p.target_epsilon > 0:
            check = ledger.check_budget(record, target_epsilon=p.target_epsilon, adjacency=adjacency)
            eps_after = check.epsilon_after
            if not check.allowed:
                stopped_by_budget = True
                print(f"budget stop: round {rnd} would take eps_{adjacency} to {check.epsilon_after:.4f} > "
                      f"target {p.target_epsilon}", file=stream, flush=True)
                break
        t_round = time.monotonic()
        arrays = ArrayRecord([w for w in get_weights(model)])
        replies = grid.send_and_receive(strategy.configure_train(rnd, arrays, ConfigRecord(), grid),
                                        timeout=cfg.federation.round_timeout)
        agg, round_metrics = strategy.aggregate_train(rnd, replies)
        # Account for the round BEFORE the new model exists anywhere.
        ledger.append(record)
        ledger.save(out / LEDGER)
        optimizer.apply(agg.to_numpy_ndarrays())
        row: dict[str, Any] = {"round": rnd, "seconds": round(time.monotonic() - t_round, 3),
                               **dict(round_metrics or {})}
        evaluate_now = rnd % cfg.federation.eval_every == 0 or rnd == cfg.federation.rounds
        if strategy.spec.private:
            # The claimed epsilon every round (the budget check already computed it); all four at evaluations.
            if evaluate_now:
                eps = ledger.epsilons()
                row.update({k: eps[k] for k in ("eps_uedp", "eps_user", "eps_undetected", "eps_rdp_bound")})
            else:
                eps = {f"eps_{adjacency}": eps_after if eps_after is not None
                       else epsilon(adjacency, ledger.groups(), delta=p.delta, num_users=population)}
                row.update(eps)
        if evaluate_now:
            last_eval = evaluate_encoded(model, test)
            row.update({f"test_{k}": v for k, v in last_eval.items()})
        metrics.write(row)
        shown = row.get(f"test_{metric_name}")
        metrics.progress(round=rnd, rounds=cfg.federation.rounds,
                         eps=eps.get(f"eps_{adjacency}") if strategy.spec.private else None,
                         metric=(metric_name, shown) if shown is not None else None,
                         extra=f"replies={int(row['replies'])}/{int(row['sampled'])}")
        if rnd % cfg.federation.checkpoint_every == 0 or rnd == cfg.federation.rounds:
            save_checkpoint(out, Checkpoint(rnd, model.state_dict(), optimizer.state_dict(), ledger.to_dict(),
                                            {"z": z}))

    final = evaluate_encoded(model, test) if stopped_by_budget else last_eval
    if strategy.spec.private and len(ledger) and "eps_rdp_bound" not in eps:  # not yet all four
        eps = ledger.epsilons()
    summary = {
        "strategy": name, "method": method, "estimator": cfg.strategy.estimator if name == "uedp" else None,
        "rounds": len(ledger), "noise_multiplier": z, "sigma": strategy.sigma, "Z": strategy.Z,
        "delta": p.delta, "population": population, "stopped_by_budget": stopped_by_budget,
        "eps_uedp": eps.get("eps_uedp", float("inf")), "eps_user": eps.get("eps_user", float("inf")),
        "eps_undetected": eps.get("eps_undetected", float("inf")),
        "eps_rdp_bound": eps.get("eps_rdp_bound", float("inf")),
        "metric": metric_name, "initial": initial, "final": final,
        "private": strategy.spec.private and not fixed,
        "warning": FIXED_SEED_WARNING if fixed else None,
        "seconds": round(time.monotonic() - t_start, 1),
    }
    (out / SUMMARY).write_text(json.dumps(summary, indent=1, default=str))
    torch.save({"weights": get_weights(model), "config": cfg.to_nested()}, out / "model.pt")
    return summary


def make_server_app(cfg: RunConfig | None = None) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run_cfg = cfg if cfg is not None else RunConfig.from_flat(dict(context.run_config))
        run_server(grid, run_cfg)

    return app


app = make_server_app()
