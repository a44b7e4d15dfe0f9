"""Drive the INSTALLED uedp.flower component with the INSTALLED Flower's own `Strategy.start`.

    python -I check_component.py --flwr 1.42.0

Run by tests/test_flower_versions.py in a venv that holds one Flower release and a wheel of uedp (the rest,
numpy, torch, ..., come from the project's venv through a plain path line in a .pth file). It imports only
installed packages (uedp, flwr, numpy), nothing of the checkout: run it with `python -I` (no script directory
or PYTHONPATH on sys.path) from a directory outside the checkout. It checks first that uedp and flwr come from
this interpreter's own venv (sys.prefix) and that flwr is the expected release, then:

  a run    UserEntityDP(FedAvg(), places=4, num_rounds=2, mechanism="uedp", ...) started by Flower's own
           `Strategy.start` over an in-memory grid whose nodes answer each training message with a train
           function wrapped in the client mod `uedp_mod` (the new model = global + a small delta): two ledger
           rounds (saved), finite arrays of the start's shapes, every message a "train" message carrying its
           round's RoundInstructions, no evaluate message, every reply counted ("replies" = messages sent,
           none missing, failed or refused), the central evaluate_fn called for rounds 0, 1, 2, and
           `privacy_spent()` answering (one release per round);
  keyed    the same with Flower's FedAdam as the server optimizer (the FedOpt family's path) and the keyed
           place map (KeyedPlaces: place i is the node whose registered public key has the i-th fingerprint)
           over five nodes, one of them with a key outside the map, whose id sorts first: it is never sent
           a message. The in-memory grid has get_nodes() whatever the release: the check asks that Flower's
           own Grid has it (what a real grid gives the place map: Flower >= 1.38);
  budget   `target_epsilon` below round 1's epsilon: PrivacyBudgetExhausted before round 1 (nothing sent or
           charged); `target_epsilon` between rounds 1 and 2: raised before round 2 (one round charged, the
           round-1 release kept). The exception is Flower's own where the release has one.

Prints one JSON line (`{"ok": true, ...}`) and exits 0 when every check holds; exits 1 naming the first
check that failed. The privacy settings sample every place (q_u = 1) and every entity (q_e = q_s = 1): what
is checked here is the component under Flower, not the accounting; rates below 1 make each round's epsilon a
mixture PLD that costs seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


class CheckFailed(Exception):
    pass


def check(condition: Any, what: str) -> None:
    if not condition:
        raise CheckFailed(what)


def set_task_identity() -> None:
    """Building a flwr Message outside a running app: Flower >= 1.38 takes the sender's run and node from the
    process's task identity (as runtime/local_grid.py's set_local_task_identity sets it); older releases
    fill them in when the message is pushed, and have no task identity to set."""
    try:
        from flwr.supercore.task_identity import TaskIdentity
    except ImportError:
        return
    if TaskIdentity._run_id is None:
        TaskIdentity.run_id = 0
        TaskIdentity.node_id = 0
        TaskIdentity.task_id = 0


class Node:
    """What Flower's NodeInfo says of a node (the places by key read it; the sorted places only the id)."""

    def __init__(self, node_id: int, public_key: bytes) -> None:
        self.node_id = node_id
        self.public_key = public_key
        self.status = "online"
        self.last_activated_at = ""


def public_key() -> bytes:
    """A fresh P-256 public key (PEM), as Flower's NodeInfo holds a registered SuperNode key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    public = ec.generate_private_key(ec.SECP256R1()).public_key()
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


class Grid:
    """An in-memory grid: `n` nodes (large ids, as a SuperLink gives), each training message answered by
    `train` behind the client mod, in this process; it records every message it is given."""

    def __init__(self, n: int, train: Any) -> None:
        self.ids = [1_000_003 + 7 * i for i in range(n)]
        self.keys = [public_key() for _ in self.ids]
        self.train = train
        self.sent: list[Any] = []

    def get_node_ids(self) -> list[int]:
        return list(self.ids)

    def get_nodes(self) -> list[Node]:
        return [Node(i, k) for i, k in zip(self.ids, self.keys)]

    def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> list[Any]:
        from flwr.app import Context, RecordDict

        from uedp.flower.mod import uedp_mod

        replies = []
        for msg in list(messages):
            self.sent.append(msg)
            node = msg.metadata.dst_node_id
            context = Context(run_id=msg.metadata.run_id, node_id=node, node_config={}, state=RecordDict(),
                              run_config={})
            replies.append(uedp_mod(msg, context, self.train))
        return replies


def train(msg: Any, context: Any) -> Any:
    """The node's train function: its new model is the global one plus a small delta (its own, per node)."""
    from flwr.app import Array, ArrayRecord, Message, RecordDict

    glob = msg.content["arrays"]
    rng = np.random.default_rng(context.node_id)
    new = {}
    for key, array in glob.items():
        old = array.numpy()
        new[key] = Array(np.asarray(old + 0.01 * rng.standard_normal(old.shape), dtype=old.dtype))
    return Message(RecordDict({"arrays": ArrayRecord(new)}), reply_to=msg)


def initial() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)]


def privacy(**changes: Any) -> Any:
    from uedp.config import PrivacyConfig

    settings = dict(q_u=1.0, q_e=1.0, q_s=1.0, beta=1.0, target_epsilon=0.0, noise_multiplier=1.0, delta=1e-3,
                    m_max=4, k_cap=1, seed=0)
    return PrivacyConfig(**{**settings, **changes})


def run(strategy: Any, out: Path, *, keyed: bool = False, grid: Grid | None = None,
        **options: Any) -> tuple[Any, Grid, Any, list[int]]:
    """UserEntityDP around `strategy`, 2 rounds on 4 places, started by Flower's own Strategy.start. `keyed`:
    the place map of four nodes' keys, on a grid of five whose first (smallest id) is not in the map."""
    from flwr.app import ArrayRecord, ConfigRecord

    from uedp.flower import KeyedPlaces, UserEntityDP, key_fingerprint

    evaluated: list[int] = []

    def evaluate_fn(server_round: int, arrays: Any) -> None:
        evaluated.append(server_round)
        return None

    grid = grid or Grid(5 if keyed else 4, train)
    places = KeyedPlaces(tuple(key_fingerprint(k) for k in grid.keys[1:])) if keyed else 4
    dp = UserEntityDP(strategy, places=places, num_rounds=2, mechanism="uedp", out_dir=out,
                      privacy=options.pop("privacy", privacy()), **options)
    result = dp.start(grid, ArrayRecord(initial()), 2, train_config=ConfigRecord({"lr": 0.1}),
                      evaluate_fn=evaluate_fn)
    return dp, grid, result, evaluated


def check_run(dp: Any, grid: Grid, result: Any, evaluated: list[int], out: Path, name: str) -> dict[str, Any]:
    from uedp.protocol import RoundInstructions

    check(len(dp.ledger) == 2, f"{name}: the ledger holds {len(dp.ledger)} rounds, not 2")
    saved = json.loads((out / "ledger.json").read_text())["rounds"]
    check(len(saved) == 2, f"{name}: ledger.json holds {len(saved)} rounds, not 2")
    start = initial()
    arrays = result.arrays
    check(arrays is not None and len(arrays) == len(start), f"{name}: Strategy.start's result has no arrays")
    got = [a.numpy() for a in arrays.values()]
    check([g.shape for g in got] == [s.shape for s in start], f"{name}: the arrays' shapes changed")
    check(all(np.isfinite(g).all() for g in got), f"{name}: the arrays are not finite")
    check(any(not np.array_equal(g, s) for g, s in zip(got, start)), f"{name}: the arrays did not change")
    per_round: dict[int, list[int]] = {}
    for msg in grid.sent:
        check(msg.metadata.message_type == "train", f"{name}: a {msg.metadata.message_type!r} message was sent")
        ins = RoundInstructions.of(msg)
        check(ins is not None, f"{name}: a training message carries no RoundInstructions")
        check(ins.round == int(msg.metadata.group_id) and ins.mechanism == "uedp" and ins.private,
              f"{name}: a message's instructions are not its round's")
        check("server-round" in msg.content["config"] and msg.content["config"]["lr"] == 0.1,
              f"{name}: a message lacks the train config")
        per_round.setdefault(ins.round, []).append(msg.metadata.dst_node_id)
    check(sorted(per_round) == [1, 2], f"{name}: messages for rounds {sorted(per_round)}, not [1, 2]")
    placed = grid.ids[-4:]  # keyed: the first node's key is not in the map
    for rnd, nodes in per_round.items():  # q_u = 1: every place, every round; one message per node
        check(sorted(nodes) == placed, f"{name}: round {rnd} went to nodes {sorted(nodes)}, not the 4 places' "
                                       f"{placed}")
        metrics = result.train_metrics_clientapp[rnd]
        check(metrics["replies"] == len(nodes), f"{name}: round {rnd} counted {metrics['replies']} replies of "
                                                f"{len(nodes)}")
        for key in ("missing", "failed", "refused"):
            check(metrics[key] == 0, f"{name}: round {rnd} has {metrics[key]} {key}")
    check(evaluated == [0, 1, 2], f"{name}: evaluate_fn was called for rounds {evaluated}, not [0, 1, 2]")
    spent = dp.privacy_spent()
    check(spent is not None and math.isfinite(spent.epsilon) and spent.epsilon > 0,
          f"{name}: privacy_spent() gave {spent!r}")
    check(spent.num_releases == 2 and spent.delta == 1e-3, f"{name}: privacy_spent() gave {spent!r}")
    return {"epsilon": spent.epsilon, "round_epsilons": [max(v for k, v in result.train_metrics_clientapp[r].items()
                                                            if k.startswith("eps_")) for r in (1, 2)]}


def check_budget(epsilons: list[float], tmp: Path) -> str:
    """The budget stop, before round 1 and before round 2 (z fixed at 1: no calibration to the target)."""
    from flwr.serverapp.strategy import FedAvg

    from uedp.flower import PrivacyBudgetExhausted

    try:
        from flwr.serverapp.exception import PrivacyBudgetExhausted as FlowersOwn
    except ImportError:
        FlowersOwn = None  # noqa: N806
    check(FlowersOwn is None or PrivacyBudgetExhausted is FlowersOwn,
          "uedp.flower.PrivacyBudgetExhausted is not Flower's own, which this release has")
    for stop, target in ((1, epsilons[0] / 2), (2, (epsilons[0] + epsilons[1]) / 2)):
        out = tmp / f"budget{stop}"
        grid = Grid(4, train)
        try:
            run(FedAvg(), out, grid=grid, privacy=privacy(target_epsilon=target), noise_multiplier=1.0)
        except PrivacyBudgetExhausted:
            pass
        else:
            raise CheckFailed(f"target_epsilon {target:.4f}: no PrivacyBudgetExhausted before round {stop}")
        charged = json.loads((out / "ledger.json").read_text())["rounds"] if (out / "ledger.json").exists() else []
        check(len(charged) == stop - 1, f"budget stop before round {stop}: {len(charged)} rounds charged")
        check(len(grid.sent) == 4 * (stop - 1), f"budget stop before round {stop}: {len(grid.sent)} messages sent")
    return "flwr" if FlowersOwn is not None else "uedp fallback"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flwr", required=True, help="the Flower release this venv must hold")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    try:
        import flwr

        import uedp

        prefix = Path(sys.prefix).resolve()
        for module in (uedp, flwr):
            check(Path(module.__file__).resolve().is_relative_to(prefix),
                  f"{module.__name__} is imported from {module.__file__}, not from this venv ({prefix})")
        check(flwr.__version__ == args.flwr, f"flwr is {flwr.__version__}, not {args.flwr}")
        logging.getLogger("flwr").setLevel(logging.WARNING)  # Strategy.start's per-round INFO lines
        set_task_identity()
        from flwr.serverapp import Grid as FlowersGrid
        from flwr.serverapp.strategy import FedAdam, FedAvg

        check(callable(getattr(FlowersGrid, "get_nodes", None)), "Flower's Grid has no get_nodes(): the keyed "
              "place map (uedp.flower.KeyedPlaces) cannot read the nodes' registered public keys")

        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            dp, grid, result, evaluated = run(FedAvg(), tmp / "fedavg")
            fedavg = check_run(dp, grid, result, evaluated, tmp / "fedavg", "FedAvg")
            dp, grid, result, evaluated = run(FedAdam(), tmp / "keyed", keyed=True)
            check_run(dp, grid, result, evaluated, tmp / "keyed", "FedAdam, keyed places")
            check(dp.optimizer.state_dict().get("attributes", {}).get("m_t") is not None,
                  "FedAdam kept no moments (m_t): the released update did not go through its step")
            exhausted = check_budget(fedavg["round_epsilons"], tmp)
    except CheckFailed as exc:
        print(json.dumps({"ok": False, "flwr": args.flwr, "failed": str(exc)}))
        return 1
    print(json.dumps({"ok": True, "flwr": flwr.__version__, "uedp": uedp.__file__, "epsilon": fedavg["epsilon"],
                      "budget_exception": exhausted, "seconds": round(time.perf_counter() - t0, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
