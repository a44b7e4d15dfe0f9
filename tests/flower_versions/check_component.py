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
    """An in-memory grid: `n` nodes (large ids, as a SuperLink gives), each message answered by `train` behind
    the client mod (`mod`: None for an app without it), in this process; it records every training message it
    is given (`sent`; the probe before round 1 apart, `probes`). It declares itself an in-process simulation
    (uedp.flower.places: SortedNodes accepts it)."""

    in_process_simulation = True

    def __init__(self, n: int, train: Any, *, mod: bool = True) -> None:
        self.ids = [1_000_003 + 7 * i for i in range(n)]
        self.keys = [public_key() for _ in self.ids]
        self.train = train
        self.mod = mod
        self.sent: list[Any] = []
        self.probes: list[Any] = []

    def get_node_ids(self) -> list[int]:
        return list(self.ids)

    def get_nodes(self) -> list[Node]:
        return [Node(i, k) for i, k in zip(self.ids, self.keys)]

    def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> list[Any]:
        from flwr.app import Context, RecordDict

        from uedp.flower import uedp_mod
        from uedp.protocol import is_probe

        replies = []
        for msg in list(messages):
            (self.probes if is_probe(msg) else self.sent).append(msg)
            node = msg.metadata.dst_node_id
            context = Context(run_id=msg.metadata.run_id, node_id=node, node_config={}, state=RecordDict(),
                              run_config={})
            try:
                replies.append(uedp_mod(msg, context, self.train) if self.mod else self.train(msg, context))
            except Exception:  # noqa: BLE001 - as Flower: a ClientApp that raises gives an error reply
                from flwr.app import Error, Message

                replies.append(Message(Error(code=0, reason="the ClientApp raised"), reply_to=msg))
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


class ZeroNoise:
    """No noise (a test seam): a resumed fixed-seed run draws its noise from the seed again."""

    mode = "philox_fixed_seed"

    def normal(self, shape: tuple[int, ...], std: float) -> np.ndarray:
        return np.zeros(shape)


def wrapper(strategy: Any, out: Path, places: Any, *, rounds: int = 2, resume: bool = False,
            checkpoint_every: int = 0, noiseless: bool = False, **changes: Any) -> Any:
    """UserEntityDP around `strategy` with z = 1 (no calibration) and its run store in `out`."""
    from uedp.flower import RunStore, UeDPAccountant, UserEntityDP
    from uedp.flower.strategy import Seams

    size = places if isinstance(places, int) else places.size
    accountant = UeDPAccountant("uedp", privacy(**changes), num_users=size, rounds=rounds, noise_multiplier=1.0)
    return UserEntityDP(strategy, places=places, accountant=accountant,
                        store=RunStore(out, checkpoint_every=checkpoint_every, resume=resume),
                        seams=Seams(noise=ZeroNoise()) if noiseless else None)


def run(strategy: Any, out: Path, *, keyed: bool = False, grid: Grid | None = None,
        **changes: Any) -> tuple[Any, Grid, Any, list[int]]:
    """UserEntityDP around `strategy`, 2 rounds on 4 places, started by Flower's own Strategy.start. `keyed`:
    the place map of four nodes' keys, on a grid of five whose first (smallest id) is not in the map."""
    from flwr.app import ArrayRecord, ConfigRecord

    from uedp.flower import KeyedPlaces
    from uedp.flower.places import key_fingerprint

    evaluated: list[int] = []

    def evaluate_fn(server_round: int, arrays: Any) -> None:
        evaluated.append(server_round)
        return None

    grid = grid or Grid(5 if keyed else 4, train)
    places = KeyedPlaces(tuple(key_fingerprint(k) for k in grid.keys[1:])) if keyed else 4
    dp = wrapper(strategy, out, places, **changes)
    result = dp.start(grid, ArrayRecord(initial()), 2, train_config=ConfigRecord({"lr": 0.1}),
                      evaluate_fn=evaluate_fn)
    return dp, grid, result, evaluated


def check_run(dp: Any, grid: Grid, result: Any, evaluated: list[int], out: Path, name: str) -> dict[str, Any]:
    from uedp.flower.store import read_operator_log
    from uedp.protocol import RoundInstructions

    check(dp.accountant.num_releases == 2, f"{name}: the ledger holds {dp.accountant.num_releases} rounds, not 2")
    check(len(grid.probes) == 4, f"{name}: {len(grid.probes)} probes, not one per node in a place")
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
        public = result.train_metrics_clientapp[rnd]
        check(set(public) == {"round", "eps_uedp", "eps_undetected"}, f"{name}: round {rnd}'s MetricRecord holds "
                                                                      f"{sorted(public)}, not public values only")
        metrics = read_operator_log(out)[rnd - 1]  # the counts: the operator log's
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
            run(FedAvg(), out, grid=grid, target_epsilon=target)
        except PrivacyBudgetExhausted:
            pass
        else:
            raise CheckFailed(f"target_epsilon {target:.4f}: no PrivacyBudgetExhausted before round {stop}")
        charged = json.loads((out / "ledger.json").read_text())["rounds"] if (out / "ledger.json").exists() else []
        check(len(charged) == stop - 1, f"budget stop before round {stop}: {len(charged)} rounds charged")
        check(len(grid.sent) == 4 * (stop - 1), f"budget stop before round {stop}: {len(grid.sent)} messages sent")
    return "flwr" if FlowersOwn is not None else "uedp fallback"


def check_grids(tmp: Path) -> None:
    """An int `places` (SortedNodes) is refused on this release's deployment grid (HttpGrid), also through a
    wrapper that holds it, and accepted on its simulation grid (InMemoryGrid); no message is sent first."""
    from flwr.app import ArrayRecord
    from flwr.serverapp.strategy import FedAvg
    from flwr.superlink.grid.http_grid import HttpGrid
    from flwr.superlink.grid.inmemory_grid import InMemoryGrid

    from uedp.errors import ConfigError
    from uedp.flower.places import DEPLOYMENT, SIMULATION, grid_kind

    check(grid_kind(InMemoryGrid.__new__(InMemoryGrid)) == SIMULATION, "InMemoryGrid is not seen as a simulation")
    check(grid_kind(HttpGrid.__new__(HttpGrid)) == DEPLOYMENT, "HttpGrid is not seen as a deployment")

    class Deployed(HttpGrid):  # this release's HttpGrid, with four nodes and nothing behind them
        def __init__(self) -> None:
            self.sent = 0

        def get_node_ids(self) -> list[int]:
            return [11, 12, 13, 14]

        def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> list[Any]:
            self.sent += len(list(messages))
            return []

    class Wrapper:  # a grid wrapper of an app's own, delegating everything
        def __init__(self, grid: Any) -> None:
            self.grid = grid

        def __getattr__(self, name: str) -> Any:
            return getattr(self.grid, name)

    for grid in (Deployed(), Wrapper(Deployed())):
        dp = wrapper(FedAvg(), tmp / "deployed", 4)
        try:
            dp.start(grid, ArrayRecord(initial()), 1)
        except ConfigError as exc:
            check("KeyedPlaces" in str(exc) and "uedp fingerprint" in str(exc),
                  f"the refusal does not name KeyedPlaces and uedp fingerprint: {exc}")
        else:
            raise CheckFailed(f"places=4 ran on a deployment grid ({type(grid).__name__})")
        inner = grid.grid if isinstance(grid, Wrapper) else grid
        check(inner.sent == 0, "a message was sent before the refusal")


def check_probe(tmp: Path) -> None:
    """A ClientApp without uedp_mod is refused before round 1, naming it: nothing sent, nothing charged."""
    from flwr.app import ArrayRecord
    from flwr.serverapp.strategy import FedAvg

    from uedp.flower.strategy import MissingClientMod

    grid = Grid(4, train, mod=False)
    dp = wrapper(FedAvg(), tmp / "nomod", 4)
    try:
        dp.start(grid, ArrayRecord(initial()), 1)
    except MissingClientMod as exc:
        check("uedp_mod" in str(exc), f"the refusal does not name uedp_mod: {exc}")
    else:
        raise CheckFailed("a ClientApp without uedp_mod was not refused")
    check(grid.sent == [] and not (tmp / "nomod" / "ledger.json").exists(), "the probe's refusal came too late")
    # a deployment reads it from the app bundle's ClientApp: Flower's private ClientApp._mods (pinned here)
    from flwr.clientapp import ClientApp

    from uedp.flower import uedp_mod
    from uedp.flower.bundle import mounts_uedp_mod

    with_mod, without = ClientApp(mods=[uedp_mod]), ClientApp()
    for app in (with_mod, without):
        app.train()(train)
    check(mounts_uedp_mod(with_mod) and not mounts_uedp_mod(without),
          "ClientApp._mods / _registered_funcs do not hold the app-level mods and the train function on this "
          "release: the bundle check cannot read them")


def check_optimizer_state(tmp: Path) -> None:
    """The attributes of Flower's strategies the server optimizer's checkpoint reads (uedp.flower.optimizer:
    FedOpt's m_t, v_t, current_arrays; FedAvgM's momentum_vector, current_arrays) exist on this release after
    a round, and a run resumed from its round-1 checkpoint ends where a run without a break does."""
    from flwr.app import ArrayRecord
    from flwr.serverapp.strategy import FedAdam, FedAvgM

    from uedp.flower.optimizer import STATE_ATTRIBUTES, ServerOptimizer

    for make in (lambda: FedAdam(eta=0.05), lambda: FedAvgM(server_learning_rate=1.0, server_momentum=0.9)):
        name = type(make()).__name__
        whole = wrapper(make(), tmp / f"{name}-whole", 4, noiseless=True)
        whole_result = whole.start(Grid(4, train), ArrayRecord(initial()), 2).arrays
        names = next(n for cls, n in STATE_ATTRIBUTES.items() if isinstance(make(), cls))
        state = ServerOptimizer.of(make()).state_dict()  # before any round: the attributes may be unset
        inner = whole._inner  # noqa: SLF001 - the wrapped strategy, whose attributes are pinned here
        for attribute in names:
            check(getattr(inner, attribute, None) is not None, f"{name} has no {attribute} after a round: "
                  "uedp.flower.optimizer's checkpoint would lose its state")
        check("attributes" in state, f"{name}: the server optimizer's state is not its attributes")
        first = wrapper(make(), tmp / f"{name}-split", 4, checkpoint_every=1, noiseless=True)
        first.start(Grid(4, train), ArrayRecord(initial()), 1)
        second = wrapper(make(), tmp / f"{name}-split", 4, resume=True, noiseless=True)
        check(second.rounds_left == 1, f"{name}: the resumed run has {second.rounds_left} rounds left, not 1")
        result = second.start(Grid(4, train), second.initial_arrays(ArrayRecord(initial())), 1).arrays
        for got, want in zip(result.values(), whole_result.values()):
            check(np.allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7),
                  f"{name}: the resumed run does not end where the unbroken one does")


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
            check(dp._optimizer.state_dict().get("attributes", {}).get("m_t") is not None,  # noqa: SLF001
                  "FedAdam kept no moments (m_t): the released update did not go through its step")
            exhausted = check_budget(fedavg["round_epsilons"], tmp)
            check_grids(tmp)
            check_probe(tmp)
            check_optimizer_state(tmp)
    except CheckFailed as exc:
        print(json.dumps({"ok": False, "flwr": args.flwr, "failed": str(exc)}))
        return 1
    print(json.dumps({"ok": True, "flwr": flwr.__version__, "uedp": uedp.__file__, "epsilon": fedavg["epsilon"],
                      "budget_exception": exhausted, "seconds": round(time.perf_counter() - t0, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
