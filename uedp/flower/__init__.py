"""UeDP as a Flower component: a strategy wrapper run by Flower's own `Strategy.start`, and a client mod.

Server (uedp.flower.strategy):
    from flwr.serverapp.strategy import FedAvg
    from uedp.flower import PrivacyBudgetExhausted, PrivacyConfig, UserEntityDP
    dp = UserEntityDP(FedAvg(), places=N, num_rounds=R, privacy=PrivacyConfig(q_u=0.1, beta=0.5), out_dir=out)
    try:
        result = dp.start(grid, dp.initial_arrays(arrays), dp.rounds_left, train_config=..., evaluate_fn=...)
    except PrivacyBudgetExhausted:
        ...

Node (uedp.flower.mod, uedp.flower.selection; uedp.entities.plain for plain strings):
    app = ClientApp(mods=[uedp_mod])
    ins = RoundInstructions.of(msg); rows, weights = select_rows(ins, owner=..., entities=...)

The parts: places (which node stands in each public place), plan (one round's pure plan), optimizer (the
wrapped strategy as server optimizer), checkpoint and resume (fail-closed), mod, selection. docs/flower-
component.md is the page for users. Names are re-exported lazily, so a node importing the mod does not load
the server's accounting.
"""

from __future__ import annotations

from uedp.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "uedp.flower.strategy": ("UserEntityDP", "PrivacyBudgetExhausted", "RoundReport"),
    "uedp.flower.mod": ("UeDPMod", "uedp_mod", "bound_update"),
    "uedp.flower.selection": ("select_rows",),
    "uedp.flower.places": ("KeyedPlaces", "SortedNodes", "key_fingerprint", "read_places", "write_places"),
    "uedp.flower.plan": ("MechanismSettings", "RoundPlan", "plan_round"),
    "uedp.protocol": ("RoundInstructions",),
    "uedp.config": ("PrivacyConfig",),
})
