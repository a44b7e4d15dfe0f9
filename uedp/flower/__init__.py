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

import importlib
from typing import Any

_EXPORTS = {
    "uedp.flower.strategy": ("UserEntityDP", "PrivacyBudgetExhausted", "RoundReport"),
    "uedp.flower.mod": ("UeDPMod", "uedp_mod", "bound_update"),
    "uedp.flower.selection": ("select_rows",),
    "uedp.flower.places": ("KeyedPlaces", "SortedNodes", "key_fingerprint", "read_places", "write_places"),
    "uedp.flower.plan": ("MechanismSettings", "RoundPlan", "plan_round"),
    "uedp.protocol": ("RoundInstructions",),
    "uedp.config": ("PrivacyConfig",),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
