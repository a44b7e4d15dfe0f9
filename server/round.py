"""One server round (contract steps 1-2 and 7-9).

budget check (never run a round that would take a claimed epsilon past the target: UeDP claims eps_uedp and
eps_undetected unless privacy.target_on names one) -> configure_train
-> send_and_receive -> aggregate_train (noisy mean update) -> record the round in the privacy ledger and
save the ledger -> THEN apply the update with the server optimizer (the new model exists only after its
round is accounted for) -> central evaluation every `eval_every` rounds -> metrics row and progress line
-> a checkpoint every `checkpoint_every` rounds (model, optimizer, a copy of the ledger, z and the ledger's
head). Every metrics row carries the ledger's head hash after its round (`ledger_hash`).
"""

from __future__ import annotations

import time
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp import Grid

from server.checkpoint import Checkpoint, save_checkpoint
from server.resume import CHECKPOINT_HEAD, LEDGER, ROW_HASH
from server.setup import RunContext, RunState, evaluate
from uedp.models.base import get_weights
from uedp.privacy.accounting import epsilon

EPSILON_KEYS = ("eps_uedp", "eps_user", "eps_undetected", "eps_rdp_bound")


def run_round(ctx: RunContext, state: RunState, grid: Grid, rnd: int) -> bool:
    """Run round `rnd`; False (and nothing run) if the budget stops it."""
    cfg, spec, ledger = ctx.cfg, ctx.spec, state.ledger
    p, fed = cfg.privacy, cfg.federation
    record = ctx.strategy.round_record(rnd)  # built once: budget-checked here, then noised with and charged
    claims = spec.claims_for(p)
    eps_after: dict[str, float] | None = None
    if spec.private and p.target_epsilon > 0:
        check = ledger.check_budget(record, target_epsilon=p.target_epsilon, adjacency=claims)
        eps_after = check.epsilons_after
        if not check.allowed:
            state.stopped_by_budget = True
            over = ", ".join(f"eps_{k} to {check.epsilons_after[k]:.4f}" for k in check.exceeded)
            print(f"budget stop: round {rnd} would take {over} > target {p.target_epsilon}", file=ctx.stream,
                  flush=True)
            return False
    t_round = time.monotonic()
    arrays = ArrayRecord(list(get_weights(state.model)))
    plan = ctx.strategy.configure_train(rnd, arrays, ConfigRecord(), grid, record=record)
    replies = grid.send_and_receive(plan.messages, timeout=fed.round_timeout)
    agg, round_metrics = ctx.strategy.aggregate_train(rnd, replies)  # takes the round's plan back
    # Account for the round BEFORE the new model exists anywhere.
    ledger.append(plan.record)
    ledger.save(ctx.out / LEDGER)
    state.optimizer.apply(agg.to_numpy_ndarrays())
    # The ledger's chain head after this round: resume checks every metrics row and checkpoint against it.
    row: dict[str, Any] = {"round": rnd, "seconds": round(time.monotonic() - t_round, 3),
                           **dict(round_metrics or {}), ROW_HASH: ledger.head.hash}
    evaluate_now = rnd % fed.eval_every == 0 or rnd == fed.rounds
    if spec.private:
        # The claimed epsilons every round (the budget check already computed them); all four at evaluations.
        if evaluate_now:
            state.eps = ledger.epsilons()
            row.update({k: state.eps[k] for k in EPSILON_KEYS})
        else:
            state.eps = {f"eps_{k}": eps_after[k] if eps_after is not None
                         else epsilon(k, ledger.groups(), delta=p.delta, num_users=ctx.population) for k in claims}
            row.update(state.eps)
    if evaluate_now:
        state.last_eval = evaluate(state.model, ctx.test)
        row.update({f"test_{k}": v for k, v in state.last_eval.items()})
    ctx.metrics.write(row)
    shown = row.get(f"test_{ctx.metric_name}")
    ctx.metrics.progress(round=rnd, rounds=fed.rounds,
                         eps=max(state.eps[f"eps_{k}"] for k in claims) if spec.private else None,
                         metric=(ctx.metric_name, shown) if shown is not None else None,
                         extra=f"replies={int(row['replies'])}/{int(row['sampled'])}")
    if rnd % fed.checkpoint_every == 0 or rnd == fed.rounds:
        save_checkpoint(ctx.out, Checkpoint(rnd, state.model.state_dict(), state.optimizer.state_dict(),
                                            ledger.to_dict(), {"z": ctx.z, CHECKPOINT_HEAD: ledger.head.to_dict()}))
    return True
