"""UeDP as a Flower component: a strategy wrapper run by Flower's own `Strategy.start`, and a client mod.

Server (uedp.flower.strategy):
    from flwr.serverapp.strategy import FedAvg
    from uedp.flower import PrivacyBudgetExhausted, PrivacyConfig, RunStore, UserEntityDP
    dp = UserEntityDP.make_private_with_epsilon(FedAvg(), places=N, num_rounds=R, store=RunStore(out),
                                                privacy=PrivacyConfig(q_u=0.1, beta=0.5, target_epsilon=8))
    try:
        result = dp.start(grid, dp.initial_arrays(arrays), dp.rounds_left, train_config=..., evaluate_fn=...)
    except PrivacyBudgetExhausted:
        ...

Node (uedp.flower.mod, uedp.flower.selection; uedp.entities.plain for plain strings):
    app = ClientApp(mods=[uedp_mod])
    ins = RoundInstructions.of(msg)
    rows, weights = select_rows(ins, owner=..., entities=keys, sids=stable_sids(texts, keys))

The parts: the wrapper's options, preflight, round schedule and report (options, preflight, schedule,
report), places (which node stands in each public place), plan (one round's pure plan), release (one
round's noisy mean), optimizer (the wrapped strategy as server optimizer), store (the run's files: ledger,
checkpoint, operator log) with checkpoint and resume (fail-closed), mod, selection; the accountant is
uedp.privacy.accountant's. `__all__` holds the names docs/flower-component.md documents, re-exported lazily,
so a node importing the mod does not load the server's accounting; every other name is imported from its
module.
"""

from __future__ import annotations

from uedp.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "uedp.flower.strategy": ("UserEntityDP", "PrivacyBudgetExhausted"),
    "uedp.privacy.accountant": ("UeDPAccountant",),
    "uedp.flower.store": ("RunStore",),
    "uedp.config": ("PrivacyConfig",),
    "uedp.flower.mod": ("uedp_mod",),
    "uedp.flower.selection": ("select_rows", "stable_sids"),
    "uedp.protocol": ("RoundInstructions",),
    "uedp.flower.places": ("KeyedPlaces", "SortedNodes", "read_places"),
    "uedp.flower.base": ("base_records", "verify_base"),
})
