"""The faults of one run of the fault study (studies/faults.py): their kinds, and the schedule, a pure function
of a seed (`make_schedule`): the SuperLink and the ServerApp each killed once after two different rounds before
the last, `node_kills` distinct random SuperNodes killed after random rounds before the last, and `restarts`
of them started again `RESTART_AFTER` s after their kill.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, replace
from typing import Any

SUPERNODE_KILL, SUPERNODE_RESTART = "supernode_kill", "supernode_restart"
SUPERLINK_KILL, SERVERAPP_KILL = "superlink_kill", "serverapp_kill"
FAULT_KINDS = (SUPERNODE_KILL, SUPERNODE_RESTART, SUPERLINK_KILL, SERVERAPP_KILL)
SERVER_FAULT_KINDS = (SUPERLINK_KILL, SERVERAPP_KILL)
# Flower 1.42: a node is "online" until 2 (HEARTBEAT_PATIENCE) x 30 s (its heartbeat interval) after its last
# heartbeat; a restart before then is refused, and restart_node starts it again every few seconds.
RESTART_AFTER = 60.0


@dataclass(frozen=True)
class Fault:
    kind: str  # one of FAULT_KINDS
    after_round: int  # armed when this round's progress line is seen (restarts: when their node is killed); 0:
    # when the run is first submitted (make_schedule never uses 0: its faults come during rounds)
    delay: float  # seconds after that line (restarts: after the line too, RESTART_AFTER past their kill)
    node: int | None = None  # the SuperNode (partition id) of a supernode_* fault


@dataclass(frozen=True)
class Schedule:
    seed: int
    nodes: int
    rounds: int
    faults: tuple[Fault, ...]

    def count(self, kind: str) -> int:
        return sum(f.kind == kind for f in self.faults)

    def to_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "nodes": self.nodes, "rounds": self.rounds,
                "faults": [asdict(f) for f in self.faults]}


def make_schedule(seed: int, *, nodes: int, rounds: int, node_kills: int | None = None,
                  restarts: int | None = None, max_delay: float = 3.0,
                  restart_after: float = RESTART_AFTER) -> Schedule:
    """The faults of one run, from `seed` alone (see the module docstring). Defaults: nodes // 5 node kills
    (at least 1), half of them (rounded up) restarted; a node that is restarted is killed after a round of
    the first half of the run (so that it comes back while the run goes on)."""
    if rounds < 3:
        raise ValueError(f"at least 3 rounds (the SuperLink and the ServerApp are killed after two different "
                         f"rounds before the last), got {rounds}")
    node_kills = max(1, nodes // 5) if node_kills is None else node_kills
    if not 0 <= node_kills < nodes:
        raise ValueError(f"node_kills must be in [0, {nodes - 1}] (one node at least stays), got {node_kills}")
    restarts = math.ceil(node_kills / 2) if restarts is None else restarts
    if not 0 <= restarts <= node_kills:
        raise ValueError(f"restarts must be in [0, node_kills = {node_kills}], got {restarts}")
    if not max_delay >= 0 or not restart_after >= 0:
        raise ValueError("max_delay and restart_after must be non-negative")
    rng = random.Random(seed)
    link_round, app_round = rng.sample(range(1, rounds), 2)
    faults = [Fault(SUPERLINK_KILL, link_round, rng.uniform(0, max_delay)),
              Fault(SERVERAPP_KILL, app_round, rng.uniform(0, max_delay))]
    victims = rng.sample(range(nodes), node_kills)
    early = range(1, max(2, rounds // 2 + 1))  # a node that comes back is killed in the first half of the run
    for i, node in enumerate(victims):
        kill = Fault(SUPERNODE_KILL, rng.choice(early if i < restarts else range(1, rounds)),
                     rng.uniform(0, max_delay), node)
        faults.append(kill)
        if i < restarts:
            faults.append(replace(kill, kind=SUPERNODE_RESTART,
                                  delay=kill.delay + restart_after + rng.uniform(0, max_delay)))
    faults.sort(key=lambda f: (f.after_round, f.delay, FAULT_KINDS.index(f.kind)))
    return Schedule(seed, nodes, rounds, tuple(faults))
