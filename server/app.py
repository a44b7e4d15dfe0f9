"""The ServerApp: set-up (server/setup.py), the rounds (Flower's own `Strategy.start` around UeDP's wrapper,
uedp.flower.UserEntityDP, with server/round_log.py's `RoundLog` as its evaluate_fn), then the summary.

    run_server(grid, cfg, components=Components(...), stream=...) -> summary dict

A budget stop is Flower's `PrivacyBudgetExhausted`, raised by the wrapper before a round that would pass the
target: caught here around `start` (uncaught, Flower would end the ServerApp as failed and the run would lose
its summary), and the run ends normally. At the end: summary.json and model.pt, both after the ledger (which
each round saves before its model exists), then for a hf, gpt2 or bert model the release in Hugging Face format
(uedp.models.export: hf_model/ or, with LoRA, hf_adapter/, each with a model card of the privacy summary).
`make_server_app(cfg)` binds a RunConfig (tests, the Hydra entry point, the simulation); the module-level `app`
reads its RunConfig from the `uedp.*` keys of `context.run_config` (`flwr run`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import torch
from flwr.app import ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp

from server.metrics import OPERATOR_LOGS
from server.polling import fast_polling
from server.round_log import RoundLog
from server.setup import Components, RunContext, RunState, evaluate, setup
from uedp.config import RunConfig
from uedp.entities.public import policy_record
from uedp.errors import ConfigError
from uedp.files import atomic_path
from uedp.flower.places import Places
from uedp.flower.strategy import PrivacyBudgetExhausted
from uedp.models.base import get_weights, parameter_counts
from uedp.models.export import export_release
from uedp.pipeline import evaluation_split, release_options
from uedp.privacy.holders import holders_epsilon
from uedp.privacy.mechanisms import spec_for
from uedp.summary import write_summary

# What a private run's summary.json holds that the privacy guarantee does not cover (docs/proofs.md section 1,
# where the adversarial read found these fields): release the model, the ledger and the epsilons, not these.
OUTSIDE_GUARANTEE = {
    "corpus": ("seconds (the run's wall time depends on the sampled users' data); initial, final and final_tokens, "
               "and every round's test metric the run prints (evaluated without noise on the held-out sentences of "
               "the same users: a simulation's measurement); population (the corpus's number of users, treated as "
               "the public number of places)"),
    "owners": "seconds (the run's wall time depends on the sampled owners' data)",
}
# An owners-mode run without a public round schedule (federation.round_period None): what the owners' nodes see
# of the rounds' timing is outside the guarantee (docs/proofs.md section 1, "Timing").
UNSCHEDULED = ("; the rounds' timing (federation.round_period None: when each round's messages are sent and when "
               "the run started depend on who took part and on the sampled owners' data, and a node sees them)")
# A scheduled run: how many rounds started late depends on the rounds before them (the operator log counts them);
# the released files say only that such a round's timing is outside (the same sentence whatever the count).
LATE_ROUNDS = ("; the timing of any round that started after its scheduled time (operator.jsonl marks them: "
               "federation.round_period too short for this server)")


def wait_for_nodes(grid: Grid, places: Places, timeout: float, stream: TextIO, *, strict: bool = True,
                   full: bool = False, operator_log: Callable[[dict[str, Any]], None] | None = None) -> int:
    """Wait until every one of the N places has its node connected (a node that stands in no place does not
    count: it must not shorten the wait). At the deadline (`timeout`) a strict wait fails; a lenient one
    (invited owners: federation.data = owners) starts with those connected. `full`: wait until the deadline
    whoever is connected (a public start time: with a round schedule, whether an owner is there must not
    change when the run starts). How many invited owners were connected tells who took part: it goes to
    `operator_log` (the run store's operator log), never to `stream` (the ServerApp's output)."""
    expected = places.size
    t0 = time.monotonic()
    seen = places.assign(grid).connected
    if full:
        time.sleep(max(0.0, timeout - (time.monotonic() - t0)))
        seen = places.assign(grid).connected
        print(f"the public start after {timeout:.0f} s (federation.wait_timeout): absent owners are sampled as usual "
              "and contribute zero", file=stream, flush=True)
    else:
        while seen < expected:
            if time.monotonic() - t0 > timeout:
                if strict:
                    raise ConfigError(f"only {seen} of {expected} nodes registered within {timeout:.0f} s "
                                      "(federation.wait_timeout)")
                break
            time.sleep(0.2)
            seen = places.assign(grid).connected
        if strict:  # every place has its node: a public count (all N), and the time taken
            print(f"{seen} nodes registered ({time.monotonic() - t0:.1f} s)", file=stream, flush=True)
        else:  # the same line whoever came: how many did is the operator log's
            print(f"starting when every invited owner is connected or at federation.wait_timeout ({timeout:.0f} s): "
                  "absent owners are sampled as usual and contribute zero", file=stream, flush=True)
    if operator_log is not None:
        operator_log({"event": "start", "connected": seen, "places": expected,
                      "seconds": round(time.monotonic() - t0, 3)})
    return seen


def outside_guarantee(ctx: RunContext) -> str:
    """What a private run's summary.json lists as outside the guarantee (docs/proofs.md section 1)."""
    fed = ctx.cfg.federation
    text = OUTSIDE_GUARANTEE[fed.data]
    if ctx.cfg.owners and fed.round_period is None:
        text += UNSCHEDULED
    if fed.round_period is not None:
        text += LATE_ROUNDS
    return text


def holders_record(ctx: RunContext) -> dict[str, Any] | None:
    """summary.json `holders` (privacy.target_holders = K >= 0 on a private run): the epsilon of the run's
    rounds for one user and one undetected entity held by K other users, its bound and every bound computed
    (uedp.privacy.holders); None otherwise."""
    k = ctx.cfg.privacy.target_holders
    ledger = ctx.strategy.accountant.ledger
    if k is None or not ctx.spec.private or not len(ledger):
        return None
    h = holders_epsilon(ledger.runs(), k, delta=ctx.cfg.privacy.delta, num_users=ledger.num_users)
    return {"k": k, "epsilon": h.epsilon, "bound": h.bound, "bounds": h.bounds}


def final_tokens(ctx: RunContext, state: RunState) -> dict[str, Any] | None:
    """summary.json `final_tokens`: the final model's perplexity on the entity tokens and on the other tokens of
    the central evaluation set (uedp.entity_tokens, one more pass over it); None for a classification run or
    a run without an evaluation set. A failure of this diagnostic is printed and leaves the field None: the
    summary and the model are still written (the rounds are already charged)."""
    if ctx.test is None:
        return None
    try:
        split = evaluation_split(state.model, ctx.cfg, tokenizer=ctx.text_tokenizer, device=ctx.device)
    except Exception as exc:  # noqa: BLE001 - a diagnostic must not lose the run's release
        print(f"WARNING: summary.json final_tokens not computed ({type(exc).__name__}: {exc})", file=ctx.stream,
              flush=True)
        return None
    return None if split is None else split.record()


def summarize(ctx: RunContext, state: RunState, *, seconds: float) -> dict[str, Any]:
    """Write summary.json and model.pt (the ledger is already saved) and return the summary."""
    report, accountant = ctx.strategy.report, ctx.strategy.accountant
    lost = report.rounds_charged - report.model_round
    final = (evaluate(state.model, ctx.test, device=ctx.device) if state.stopped_by_budget or lost or not
             state.last_eval else state.last_eval)
    if lost:  # a resumed run whose checkpoint is older than its ledger, with no round left to run
        print(f"WARNING: model.pt is the model of round {report.model_round} (its checkpoint); the "
              f"models of the {lost} round(s) charged after it were lost in a crash and stay charged "
              "(summary.json: model_round)", file=ctx.stream, flush=True)
    eps = accountant.epsilons()
    trainable, total = parameter_counts(state.model)
    summary = {
        "strategy": ctx.cfg.strategy.name, "method": ctx.spec.summary_method, "estimator": ctx.spec.estimator,
        "rounds": report.rounds_charged, "noise_multiplier": ctx.z, "sigma": report.sigma, "Z": report.denominator,
        "delta": ctx.cfg.privacy.delta, "population": ctx.population, "stopped_by_budget": state.stopped_by_budget,
        **{k: eps.get(k, float("inf")) for k in ("eps_uedp", "eps_user", "eps_undetected", "eps_rdp_bound")},
        "claims": [f"eps_{k}" for k in ctx.spec.claims_for(ctx.cfg.privacy)], "m_max": report.m_max,
        "noise": report.noise,
        "undetected_rule": eps.get("undetected_rule"), "delta_trunc": eps.get("delta_trunc"),
        "holders": holders_record(ctx),
        "metric": ctx.metric_name, "initial": state.initial, "final": final,
        "final_tokens": final_tokens(ctx, state),
        "private": ctx.private, "warning": ctx.warning, "tokenizer": ctx.tokenizer,
        "initial_model": ctx.initial_model,
        "detector": ctx.cfg.detector(), "metrics_note": OPERATOR_LOGS if ctx.spec.private else None,
        "public_entities": (policy_record(ctx.cfg.entities.public) if ctx.cfg.entities.public != "none"
                            else None),
        "outside_guarantee": outside_guarantee(ctx) if ctx.spec.private else None,
        "model_round": report.model_round, "device": ctx.device,
        "noised_dimension": trainable, "trainable_share": trainable / total, "base_model": ctx.base_model,
        "seconds": round(seconds, 1),
    }
    write_summary(ctx.out, summary, kind="federated")
    with atomic_path(ctx.out / "model.pt") as tmp:
        torch.save({"weights": get_weights(state.model), "config": ctx.cfg.to_nested()}, tmp)
    if ctx.text_tokenizer is not None:  # the release in Hugging Face format, after the ledger and the summary
        for folder in export_release(ctx.out, state.model, tokenizer=ctx.text_tokenizer, summary=summary,
                                     **release_options(ctx.cfg)):
            print(f"released in Hugging Face format: {folder}", file=ctx.stream, flush=True)
    return summary


def run_server(grid: Grid, cfg: RunConfig, *, components: Components | None = None,
               stream: TextIO | None = None) -> dict[str, Any]:
    stream = stream or sys.stderr
    if spec_for(cfg.strategy.name, cfg.strategy.estimator).local:  # dp_bart: one query, no rounds
        from server.local_dp import run_local_dp

        return run_local_dp(grid, cfg, stream=stream)
    t_start = time.monotonic()
    ctx, state = setup(cfg, components=components or Components(), stream=stream)
    dp = ctx.strategy
    wait_for_nodes(grid, ctx.places, cfg.federation.wait_timeout, stream, strict=not cfg.owners,
                   full=cfg.owners and cfg.federation.round_period is not None, operator_log=ctx.store.operator_log)
    try:
        dp.start(grid, state.arrays, dp.rounds_left, timeout=cfg.federation.round_timeout,
                 train_config=ConfigRecord(ctx.train_config()), evaluate_fn=RoundLog(ctx, state))
    except PrivacyBudgetExhausted as stop:  # before the round: nothing of it was sampled, sent or charged
        state.stopped_by_budget = True
        print(f"budget stop: {stop}", file=stream, flush=True)
    return summarize(ctx, state, seconds=time.monotonic() - t_start)


def make_server_app(cfg: RunConfig | None = None, *, pull_interval: float | None = None,
                    wrap_grid: Callable[[Grid], Any] | None = None) -> ServerApp:
    """The ServerApp bound to `cfg` (None: read it from `context.run_config`). `pull_interval`: seconds
    between pulls of Flower's in-memory (simulation) grid, which has its own (runtime/simulate.py);
    `wrap_grid` (benchmark only): the grid the server loop sees, e.g. a timing wrapper."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run_cfg = cfg if cfg is not None else RunConfig.from_run_config(context.run_config)
        if pull_interval is not None and hasattr(grid, "pull_interval"):  # flwr's InMemoryGrid
            grid.pull_interval = pull_interval
        grid = fast_polling(grid, run_cfg.federation.poll_interval)
        run_server(grid if wrap_grid is None else wrap_grid(grid), run_cfg)

    return app


app = make_server_app()
