"""What the project's ServerApp does at the end of each round, as the `evaluate_fn` of Flower's `start`.

The rounds themselves are Flower's own loop (`Strategy.start`) around UeDP's wrapper (uedp.flower.strategy),
which, per round: budget check -> plan, messages -> replies -> re-check, sum, noise, divide by Z -> record the
round in the ledger and SAVE it -> apply the update (the new model exists only after its round is accounted
for) -> a checkpoint every `checkpoint_every` rounds. Flower then calls `evaluate_fn(round, arrays)`, and
`RoundLog` here: central evaluation every `eval_every` rounds (and at the last), the round's metrics row
(its seconds, claimed epsilons, all four at evaluations, the test metric, the ledger's head hash after the
round, `ledger_hash`) and the progress line (round, claimed epsilon, metric: no count of replies, which would
tell who took part; the counts are in the wrapper's operator log, uedp.flower.store). Round 0 (before any
round) evaluates the initial model (timed by the wrapper for a round schedule's check).
"""

from __future__ import annotations

from typing import Any

from flwr.app import ArrayRecord, MetricRecord

from server.setup import RunContext, RunState, evaluate
from uedp.flower.resume import ROW_HASH
from uedp.privacy.accountant import EPSILON_KEYS


class RoundLog:
    """`evaluate_fn` for `Strategy.start` (module docstring)."""

    def __init__(self, ctx: RunContext, state: RunState) -> None:
        self.ctx, self.state = ctx, state

    def __call__(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        ctx, state = self.ctx, self.state
        report = ctx.strategy.report.last_round
        if server_round == 0 or report is None:
            state.initial = state.last_eval = evaluate(state.model, ctx.test, device=ctx.device)
            return MetricRecord(dict(state.initial)) if state.initial else None
        fed, rnd = ctx.cfg.federation, report.round
        row: dict[str, Any] = {"round": rnd, "seconds": round(report.seconds, 3), ROW_HASH: report.ledger_hash}
        evaluate_now = rnd % fed.eval_every == 0 or rnd == fed.rounds
        claims = ctx.spec.claims_for(ctx.cfg.privacy)
        claimed: dict[str, float] = {}
        if ctx.spec.private and evaluate_now:  # all four epsilons at evaluations
            everything = ctx.strategy.accountant.epsilons()
            row.update({k: everything[k] for k in EPSILON_KEYS})
            claimed = {f"eps_{k}": everything[f"eps_{k}"] for k in claims}
        elif ctx.spec.private:  # the claimed ones every round (the budget check's, or computed now)
            claimed = ctx.strategy.claimed_epsilons()
            row.update(claimed)
        if evaluate_now:
            state.last_eval = evaluate(state.model, ctx.test, device=ctx.device)
            row.update({f"test_{k}": v for k, v in state.last_eval.items()})
        ctx.metrics.write(row)
        shown = row.get(f"test_{ctx.metric_name}")
        ctx.metrics.progress(round=rnd, rounds=fed.rounds,
                             eps=max(((f"eps_{k}", claimed[f"eps_{k}"]) for k in claims), key=lambda kv: kv[1])
                             if ctx.spec.private else None,
                             metric=(ctx.metric_name, shown) if shown is not None else None)
        return MetricRecord({k: v for k, v in state.last_eval.items()}) if evaluate_now and state.last_eval else None
