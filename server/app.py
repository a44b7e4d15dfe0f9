"""The ServerApp: set-up (server/setup.py), the rounds (server/round.py), then the summary.

    run_server(grid, cfg, components=Components(...), stream=...) -> summary dict

At the end: summary.json and model.pt, both after the ledger (which each round saves before its model
exists). `make_server_app(cfg)` binds a RunConfig (tests, the Hydra entry point, the simulation); the
module-level `app` reads its RunConfig from `context.run_config` (`flwr run`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import torch
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from server.metrics import OPERATOR_LOGS
from server.polling import fast_polling
from server.round import run_round
from server.setup import Components, RunContext, RunState, evaluate, setup
from uedp.config import RunConfig
from uedp.entities.public import policy_record
from uedp.errors import ConfigError
from uedp.files import atomic_path
from uedp.models.base import get_weights
from uedp.privacy.mechanisms import spec_for
from uedp.summary import write_summary

# What a private run's summary.json holds that the privacy guarantee does not cover (docs/proofs.md section 1,
# found by the adversarial read of issue 22): release the model, the ledger and the epsilons, not these.
OUTSIDE_GUARANTEE = {
    "corpus": ("seconds (the run's wall time depends on the sampled users' data); initial and final (evaluated "
               "without noise on the held-out sentences of the same users: a simulation's measurement); "
               "population (the corpus's number of users, treated as the public number of places)"),
    "owners": "seconds (the run's wall time depends on the sampled owners' data)",
}


def wait_for_nodes(grid: Grid, expected: int, timeout: float, stream: TextIO, *, strict: bool = True) -> int:
    """Wait until `expected` nodes have registered. At the deadline (`timeout`) a strict wait fails; a
    lenient one (invited owners: federation.data = owners) starts with those connected."""
    t0 = time.monotonic()
    seen = len(list(grid.get_node_ids()))
    while seen < expected:
        if time.monotonic() - t0 > timeout:
            if not strict:
                print(f"deadline: starting with {seen} of {expected} invited owners connected (the others are "
                      "sampled as usual and contribute zero)", file=stream, flush=True)
                return seen
            raise ConfigError(f"only {seen} of {expected} nodes registered within {timeout:.0f} s "
                              "(federation.wait_timeout)")
        time.sleep(0.2)
        seen = len(list(grid.get_node_ids()))
    print(f"{seen} nodes registered ({time.monotonic() - t0:.1f} s)", file=stream, flush=True)
    return seen


def summarize(ctx: RunContext, state: RunState, *, seconds: float) -> dict[str, Any]:
    """Write summary.json and model.pt (the ledger is already saved) and return the summary."""
    final = evaluate(state.model, ctx.test) if state.stopped_by_budget else state.last_eval
    eps = state.eps
    if ctx.spec.private and len(state.ledger) and "eps_rdp_bound" not in eps:  # not yet all four
        eps = state.ledger.epsilons()
    strategy = ctx.strategy
    summary = {
        "strategy": ctx.cfg.strategy.name, "method": ctx.spec.method, "estimator": ctx.spec.estimator,
        "rounds": len(state.ledger), "noise_multiplier": ctx.z, "sigma": strategy.sigma, "Z": strategy.Z,
        "delta": ctx.cfg.privacy.delta, "population": ctx.population, "stopped_by_budget": state.stopped_by_budget,
        **{k: eps.get(k, float("inf")) for k in ("eps_uedp", "eps_user", "eps_undetected", "eps_rdp_bound")},
        "claims": [f"eps_{k}" for k in ctx.spec.claims_for(ctx.cfg.privacy)], "m_max": strategy.m_max,
        "noise": strategy.round_record(0).noise,
        "undetected_rule": eps.get("undetected_rule"), "delta_trunc": eps.get("delta_trunc"),
        "metric": ctx.metric_name, "initial": state.initial, "final": final,
        "private": ctx.private, "warning": ctx.warning, "tokenizer": ctx.tokenizer,
        "initial_model": ctx.initial_model,
        "detector": ctx.cfg.detector(), "metrics_note": OPERATOR_LOGS if ctx.spec.private else None,
        "public_entities": (policy_record(ctx.cfg.entities.public) if ctx.cfg.entities.public != "none"
                            else None),
        "outside_guarantee": OUTSIDE_GUARANTEE[ctx.cfg.federation.data] if ctx.spec.private else None,
        "seconds": round(seconds, 1),
    }
    write_summary(ctx.out, summary, kind="federated")
    with atomic_path(ctx.out / "model.pt") as tmp:
        torch.save({"weights": get_weights(state.model), "config": ctx.cfg.to_nested()}, tmp)
    return summary


def run_server(grid: Grid, cfg: RunConfig, *, components: Components | None = None,
               stream: TextIO | None = None) -> dict[str, Any]:
    stream = stream or sys.stderr
    if spec_for(cfg.strategy.name, cfg.strategy.estimator).local:  # dp_bart: one query, no rounds
        from server.local_dp import run_local_dp

        return run_local_dp(grid, cfg, stream=stream)
    t_start = time.monotonic()
    ctx, state = setup(cfg, components=components or Components(), stream=stream)
    wait_for_nodes(grid, ctx.population, cfg.federation.wait_timeout, stream,
                   strict=not cfg.owners)
    for rnd in range(state.first_round, cfg.federation.rounds + 1):
        if not run_round(ctx, state, grid, rnd):
            break
    return summarize(ctx, state, seconds=time.monotonic() - t_start)


def make_server_app(cfg: RunConfig | None = None, *, pull_interval: float | None = None,
                    wrap_grid: Callable[[Grid], Any] | None = None) -> ServerApp:
    """The ServerApp bound to `cfg` (None: read it from `context.run_config`). `pull_interval`: seconds
    between pulls of Flower's in-memory (simulation) grid, which has its own (runtime/simulate.py);
    `wrap_grid` (benchmark only): the grid the server loop sees, e.g. a timing wrapper."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run_cfg = cfg if cfg is not None else RunConfig.from_flat(dict(context.run_config))
        if pull_interval is not None and hasattr(grid, "pull_interval"):  # flwr's InMemoryGrid
            grid.pull_interval = pull_interval
        grid = fast_polling(grid, run_cfg.federation.poll_interval)
        run_server(grid if wrap_grid is None else wrap_grid(grid), run_cfg)

    return app


app = make_server_app()
