"""The wrapped strategy as the SERVER OPTIMIZER: it turns the released update into the next global model.

UeDP's wrapper (uedp.flower.strategy) samples, instructs, re-checks, sums, noises and divides by the public
denominator itself; what it asks of the strategy it wraps is only how to apply the released (noisy, mean)
update to the global model: plain FedAvg adds it, FedAvgM with momentum, FedAdam / FedYogi / FedAdagrad (Flower's
FedOpt family) with their adaptive steps. Applying a released update is post-processing and costs no privacy
(docs/mechanism.md step 9).

`ServerOptimizer.of(strategy)` picks how:
- a strategy with `apply_update(server_round, arrays, update) -> ArrayRecord` (and, for checkpoints,
  `state_dict()` / `load_state_dict(state)`) is called directly (the project's own: strategies/);
- a strategy of Flower's FedAvg family with Flower's own aggregation (FedAvg, FedProx, FedAvgM, FedAdam,
  FedYogi, FedAdagrad) is run through its PUBLIC Strategy API: its `configure_train` on a stand-in grid (so
  that it records the current arrays, as FedOpt and FedAvgM do there; the messages it builds are thrown
  away), then its `aggregate_train` on ONE stand-in reply that holds "global + update" in float64 with weight
  1, whose weighted mean is that reply: FedAvg returns it, the FedOpt family and FedAvgM take the pseudo-
  gradient from it. The result is cast back to the global arrays' dtypes;
- anything else (FedMedian, FedTrimmedAvg, Krum, Bulyan, QFedAvg, a custom aggregation) is refused: a
  robust or reweighting aggregation has nothing to aggregate once the replies are summed and noised.

Checkpoints (the wrapper saves them): `state_dict()` holds the strategy's own state (the FedOpt family's
moments m_t, v_t; FedAvgM's momentum vector and arrays), restored by `load_state_dict`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAdagrad, FedAdam, FedAvg, FedAvgM, FedProx, FedYogi, Strategy
from flwr.serverapp.strategy.fedopt import FedOpt

# Flower strategies whose aggregate_train is a weighted mean of the replies' arrays (then, for some, a
# server step from the current arrays): a stand-in reply applies an update exactly through them.
FEDAVG_FAMILY = (FedAvg, FedProx, FedAvgM, FedOpt, FedAdam, FedYogi, FedAdagrad)
# What their checkpoint holds (attributes set by their own configure_train / aggregate_train).
STATE_ATTRIBUTES = {FedOpt: ("m_t", "v_t", "current_arrays"), FedAvgM: ("momentum_vector", "current_arrays")}


class _StandInGrid:
    """A grid with `n` nodes and nothing behind them: the inner strategy's configure_train builds its
    messages for them, and they are never sent."""

    def __init__(self, n: int) -> None:
        self.n = n

    def get_node_ids(self) -> Iterable[int]:
        return range(1, self.n + 1)


@contextlib.contextmanager
def _quiet_flower() -> Iterator[None]:
    """The inner strategy's own INFO lines ("Sampled 2 nodes", "Received 1 results") describe the stand-in
    grid and reply, not the round: keep them out of the log."""
    logger = logging.getLogger("flwr")
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


def _own_aggregation(strategy: Strategy) -> bool:
    """Its aggregate_train is one of the FedAvg family's, not a subclass's own."""
    method = type(strategy).aggregate_train
    return isinstance(strategy, FedAvg) and any(method is cls.aggregate_train for cls in FEDAVG_FAMILY)


def check_server_optimizer(strategy: Any) -> None:
    """TypeError unless `strategy` can serve as the server optimizer (module docstring)."""
    if callable(getattr(strategy, "apply_update", None)):
        return
    if isinstance(strategy, Strategy) and _own_aggregation(strategy):
        return
    raise TypeError(
        f"UserEntityDP wraps the strategy that applies the released update (the server optimizer): Flower's "
        f"FedAvg, FedProx, FedAvgM, FedAdam, FedYogi or FedAdagrad, or a strategy with apply_update(server_round, "
        f"arrays, update); got {type(strategy).__name__} (a robust or custom aggregation has nothing to "
        "aggregate once the replies are summed and noised)")


@dataclass
class ServerOptimizer:
    """Applies released updates through `strategy` (module docstring)."""

    strategy: Any

    @classmethod
    def of(cls, strategy: Any) -> ServerOptimizer:
        check_server_optimizer(strategy)
        return cls(strategy)

    def apply(self, server_round: int, arrays: ArrayRecord, update: Sequence[np.ndarray],
              config: ConfigRecord) -> ArrayRecord:
        """The next global arrays: `arrays` with `update` (one array per array of `arrays`, in order) applied."""
        if callable(getattr(self.strategy, "apply_update", None)):
            return self.strategy.apply_update(server_round, arrays, list(update))
        keys = list(arrays.keys())
        current = [arrays[k].numpy() for k in keys]
        if len(update) != len(current):
            raise ValueError(f"the update has {len(update)} arrays, the model {len(current)}")
        inner: FedAvg = self.strategy
        n = max(inner.min_available_nodes, inner.min_train_nodes, 1)
        target = {k: Array(np.asarray(c, dtype=np.float64) + np.asarray(u, dtype=np.float64))
                  for k, c, u in zip(keys, current, update, strict=True)}
        reply = Message(RecordDict({inner.arrayrecord_key: ArrayRecord(target),
                                    "metrics": MetricRecord({inner.weighted_by_key: 1.0})}),
                        dst_node_id=0, message_type="train")
        with _quiet_flower():
            list(inner.configure_train(server_round, arrays, ConfigRecord(dict(config)), _StandInGrid(n)))
            new, _ = inner.aggregate_train(server_round, [reply])
        if new is None:
            raise RuntimeError(f"{type(inner).__name__}.aggregate_train returned no arrays for one valid reply")
        return ArrayRecord({k: Array(np.asarray(new[k].numpy(), dtype=c.dtype)) for k, c in zip(keys, current)})

    def state_dict(self) -> dict[str, Any]:
        if callable(getattr(self.strategy, "state_dict", None)):
            return {"state": self.strategy.state_dict()}
        for cls, names in STATE_ATTRIBUTES.items():
            if isinstance(self.strategy, cls):
                return {"attributes": {n: getattr(self.strategy, n, None) for n in names}}
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "state" in state:
            self.strategy.load_state_dict(state["state"])
        for name, value in state.get("attributes", {}).items():
            setattr(self.strategy, name, value)
