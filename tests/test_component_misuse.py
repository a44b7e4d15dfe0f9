"""The Flower component keeps the guarantee on every public path, and misuse is loud before any budget is spent
(uedp.flower.strategy's preflight, uedp.flower.places, uedp.flower.store):

- a deployment never maps places by node-id order: an int `places` (SortedNodes) is refused on a deployment's
  grid, through wrappers of it; the adversarial read's world (owners 10, 20, 30 and u' = 40, an extra node
  999) with the keyed map: the extra node is never sent anything and every sampled quantity, and every other
  node's messages, are the same with u' present or absent (and with another owner absent);
- a private run's MetricRecords and its ServerApp's output (stdout, stderr, logging) are the same with u'
  present and absent, but for the lines named here (evaluation on public data, durations); the counts that
  differ are in the operator log;
- a ClientApp without `uedp_mod` is refused by the probe before round 1; a simulation with more places than
  nodes is refused; a budget stop ends with a line saying so;
- a round that starts late is counted, with no grace, and round_period is checked against the server's work.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import FedAvg
from flwr.superlink.grid.http_grid import HttpGrid
from flwr.superlink.grid.inmemory_grid import InMemoryGrid

from runtime.local_grid import LocalGrid, LocalNode, node_key, owner_places, set_local_task_identity
from server.polling import PollingGrid
from tests.helpers import ZeroNoise, operator_rows, split_probes, tiny_config
from uedp.config import PrivacyConfig
from uedp.errors import ConfigError
from uedp.flower.mod import uedp_mod
from uedp.flower.places import (
    DEPLOYMENT,
    IN_PROCESS,
    SIMULATION,
    UNKNOWN,
    KeyedPlaces,
    SortedNodes,
    grid_kind,
    key_fingerprint,
)
from uedp.flower.store import RunStore
from uedp.flower.strategy import MissingClientMod, PrivacyBudgetExhausted, Seams, UserEntityDP
from uedp.privacy.accountant import UeDPAccountant
from uedp.protocol import INSTRUCTIONS_RECORD, RoundInstructions, is_probe, reply_content

PRIVACY = PrivacyConfig(q_u=0.1, q_e=0.5, q_s=0.5, m_max=4, k_cap=1, beta=1.0, target_epsilon=None,
                        noise_multiplier=1.0, delta=1e-3, seed=0)


class FakeSuperLink(HttpGrid):
    """A deployment's grid (an HttpGrid to `grid_kind`) with these nodes; every node runs the client mod: it
    answers the probe, and replies a zero update to a training message. Records each message it is sent."""

    def __init__(self, nodes: dict[int, bytes]) -> None:  # no SuperLink behind it
        self.nodes = nodes
        self.sent: list[tuple[str, int, dict[str, Any]]] = []  # (round, node, instructions without the key)
        self.probes = 0

    def get_node_ids(self) -> Iterable[int]:
        return list(self.nodes)

    def get_nodes(self) -> Iterable[LocalNode]:  # what Flower's NodeInfo says of a node
        return [LocalNode(n, k) for n, k in self.nodes.items()]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        answers, messages = split_probes(messages)
        self.probes += len(answers)
        replies = list(answers)
        for m in messages:
            record = dict(m.content.config_records[INSTRUCTIONS_RECORD])
            self.sent.append((m.metadata.group_id, m.metadata.dst_node_id, record))
            zeros = [np.zeros_like(a.numpy()) for a in m.content.array_records["arrays"].values()]
            replies.append(Message(reply_content(zeros, None), reply_to=m))
        return replies


def _wrapper(places: Any, out: Path, *, rounds: int = 30, privacy: PrivacyConfig = PRIVACY, **options: Any):
    set_local_task_identity()
    size = places if isinstance(places, int) else places.size
    accountant = UeDPAccountant("uedp", privacy, num_users=size, rounds=rounds, noise_multiplier=1.0)
    return UserEntityDP(FedAvg(), places=places, accountant=accountant, store=RunStore(out),
                        seams=Seams(noise=ZeroNoise()), **options)


START = ArrayRecord([np.zeros(3, np.float32)])


# -- places by node order only in a simulation -------------------------------------------------------------------
def test_grid_kind_sees_through_wrappers():
    deployment, simulation = FakeSuperLink({}), InMemoryGrid.__new__(InMemoryGrid)
    assert grid_kind(deployment) == DEPLOYMENT and grid_kind(simulation) == SIMULATION
    assert grid_kind(PollingGrid(deployment, 0.1)) == DEPLOYMENT  # the project's own polling wrapper
    assert grid_kind(PollingGrid(simulation, 0.1)) == SIMULATION
    assert grid_kind(LocalGrid(tiny_config(Path("/tmp/unused")), 2)) == IN_PROCESS  # in_process_simulation

    class Claims(FakeSuperLink):  # a claim never turns a deployment's grid into an in-process one
        in_process_simulation = True

    class ClaimingWrapper:
        in_process_simulation = True

        def __init__(self, grid: Any) -> None:
            self.grid = grid

    assert grid_kind(Claims({})) == DEPLOYMENT and grid_kind(ClaimingWrapper(deployment)) == DEPLOYMENT
    assert grid_kind(ClaimingWrapper(object())) == IN_PROCESS

    class Hides:  # claims, and keeps the deployment's grid under a name of its own, or in a slot
        in_process_simulation = True

        def __init__(self, grid: Any) -> None:
            self.backend = grid

    class Slotted:
        __slots__ = ("backend",)
        in_process_simulation = True

        def __init__(self, grid: Any) -> None:
            self.backend = grid

    assert grid_kind(Hides(deployment)) == DEPLOYMENT and grid_kind(Slotted(deployment)) == DEPLOYMENT
    import functools

    def closure(grid: Any) -> Any:
        return lambda: grid

    for hidden in ({"a": deployment}, [deployment], (deployment,), functools.partial(print, deployment),
                   closure(deployment), Hides(Hides(deployment)), deployment.get_node_ids):
        assert grid_kind(Hides(hidden)) == DEPLOYMENT, hidden  # held anywhere, a few levels deep

    class Mirror:  # shows a simulation's grid, sends through a deployment's
        def __init__(self) -> None:
            self.grid, self._real = simulation, deployment

    assert grid_kind(Mirror()) == DEPLOYMENT

    class Delegating:  # forwards every attribute (a __getattr__ wrapper): seen through its stored grid only
        def __init__(self, grid: Any) -> None:
            self._grid = grid

        def __getattr__(self, name: str) -> Any:
            return getattr(self._grid, name)

    assert grid_kind(Delegating(deployment)) == DEPLOYMENT
    assert grid_kind(object()) == UNKNOWN


def test_sorted_nodes_are_refused_on_a_deployment_grid_naming_the_keyed_map(tmp_path):
    grid = FakeSuperLink({10: b"", 20: b""})
    for places in (2, SortedNodes(2)):
        dp = _wrapper(places, tmp_path, rounds=2)
        with pytest.raises(ConfigError, match=r"KeyedPlaces.*uedp fingerprint"):
            dp.start(PollingGrid(grid, 0.1), START, 2)
        assert not (tmp_path / "ledger.json").exists() and grid.sent == []  # nothing sent, nothing charged
    with pytest.raises(ConfigError, match="not known to be a simulation"):
        SortedNodes(2).assign(object())
    # the explicit opt-in runs, labelled not private
    dp = _wrapper(SortedNodes(2, outside_simulation=True), tmp_path / "opt-in", rounds=2)
    dp.start(grid, START, 2)
    assert any("places by node order" in why for why in dp.report.not_private) and not dp.report.private


def _world(tmp_path: Path, name: str, places: Any, owners: dict[int, bytes], seed: int = 0):
    """30 rounds at q_u 0.1 over a deployment of `owners` (node id -> key) plus node 999 (a key of its own)."""
    grid = FakeSuperLink({**owners, 999: node_key(999)})
    dp = _wrapper(places, tmp_path / name, privacy=dataclasses.replace(PRIVACY, seed=seed))
    dp.start(grid, START, 30)
    return grid.sent


def test_the_keyed_map_makes_every_sampled_quantity_independent_of_u_prime(tmp_path):
    """The adversarial read's world: N = 4, owners with node ids 10, 20, 30 and u' = 40, and an extra node 999.
    With the keyed map (a fixed seed couples the two worlds' randomness), node 999 is never sent anything, and
    the rounds' messages to every other node (destination, slot, rates, round: everything a node is told) and
    the set of sampled places are the same whether u' is connected or not; likewise with owner 20 absent."""
    keys = {n: node_key(n) for n in (10, 20, 30, 40)}
    keyed = KeyedPlaces(tuple(key_fingerprint(keys[n]) for n in (10, 20, 30, 40)))
    for absent in ((), (20,)):
        owners = {n: k for n, k in keys.items() if n not in absent}
        with_u = _world(tmp_path, f"with-{absent}", keyed, owners)
        without_u = _world(tmp_path, f"without-{absent}", keyed, {n: k for n, k in owners.items() if n != 40})
        assert all(node != 999 for _, node, _ in with_u + without_u)
        assert [m for m in with_u if m[1] != 40] == without_u
        assert len({r for r, _, _ in with_u}) >= 5  # the worlds are not empty: many rounds sent something
    # the same world with places by node order (the opted-in SortedNodes): node 999 is sent messages exactly
    # when u' is absent, so its messages tell whether u' took part
    order = SortedNodes(4, outside_simulation=True)
    with_u = _world(tmp_path, "order-with", order, keys)
    without_u = _world(tmp_path, "order-without", order, {n: k for n, k in keys.items() if n != 40})
    assert not any(node == 999 for _, node, _ in with_u) and any(node == 999 for _, node, _ in without_u)


# -- the ServerApp's output does not depend on u' ------------------------------------------------------------------
EXCLUDED = (  # lines that may differ between D and D', each for a reason the summary states
    # evaluation on the public evaluation file (post-processing of the release): its metrics, wherever printed
    re.compile(r"perplexity|'loss'"),
    re.compile(r"Strategy execution finished in"),  # the run's wall time (summary.json: seconds, outside)
)
DURATION = re.compile(r"\(\s*[0-9.]+\s*s\)")  # the progress line's elapsed time, and the wait's


def _owners_run(tmp_path: Path, files: list[str], capsys: pytest.CaptureFixture) -> tuple[list[str], Path]:
    from server.app import run_server
    from server.setup import Components

    out = tmp_path / f"run-{len(files)}"
    cfg = tiny_config(out, federation={"data": "owners", "num_nodes": 4, "eval_data": str(tmp_path / "eval.jsonl"),
                                       "rounds": 3, "eval_every": 3, "wait_timeout": 0.0},
                      entities={"detector": "rules"}, privacy={"q_u": 1.0, "m_max": 4, "seed": 3})
    set_local_task_identity()
    capsys.readouterr()
    flower = logging.getLogger("flwr")  # what Flower's start logs under `flwr run` (every MetricRecord, the Result),
    level = flower.level  # and the wrapper's "flwr.uedp" lines: all that reaches `flwr log`, with the prints
    logged = io.StringIO()
    handler = logging.StreamHandler(logged)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    flower.addHandler(handler)
    flower.setLevel(logging.INFO)
    try:
        run_server(LocalGrid(cfg, 4, data_paths=files), cfg, components=Components(places=owner_places(4)))
    finally:
        flower.setLevel(level)
        flower.removeHandler(handler)
    captured = capsys.readouterr()
    text = captured.out + captured.err + logged.getvalue()
    lines = [DURATION.sub("(...)", line) for line in text.splitlines()]
    return [x for x in lines if x.strip() and not any(p.search(x) for p in EXCLUDED)], out


def test_what_the_serverapp_prints_does_not_depend_on_u_prime(tmp_path, capsys):
    """D' (4 owners) and D (owner u' absent: its place empty), at one fixed seed: every line the ServerApp,
    the wrapper and Flower's own `start` print (every MetricRecord, the final Result) is the same, but for
    the EXCLUDED lines; the operator log, on the server, has the counts that do differ."""
    from uedp.owner_files import write_owner_files

    paths = [str(p) for p in write_owner_files(tmp_path / "owners", dataset="synthetic",
                                               options={"num_users": 4, "min_sentences": 20, "max_sentences": 30})]
    evaluation = write_owner_files(tmp_path / "eval-src", dataset="synthetic", splits=("test",),
                                   options={"num_users": 2, "min_sentences": 20, "max_sentences": 30, "seed": 7})
    (tmp_path / "eval.jsonl").write_bytes(Path(evaluation[0]).read_bytes())
    with_u, out_with = _owners_run(tmp_path, paths, capsys)
    without_u, out_without = _owners_run(tmp_path, paths[:3], capsys)
    assert any("Aggregated MetricRecord" in x for x in with_u)  # Flower's start logged its MetricRecords
    assert any("eps_uedp" in x for x in with_u) and any("[round" in x for x in with_u)
    assert with_u == without_u
    # the counts that tell u''s presence are in the operator log, and only there
    assert [r["missing"] for r in operator_rows(out_with)] == [0, 0, 0]
    assert [r["missing"] for r in operator_rows(out_without)] == [1, 1, 1]
    note = json.loads((out_with / "operator.jsonl").read_text().splitlines()[0])["note"]
    assert "OUTSIDE the privacy guarantee" in note
    assert "operator.jsonl" in json.loads((out_with / "summary.json").read_text())["metrics_note"]


# -- the probe: a ClientApp without the mod is refused before any budget is spent -----------------------------------
def _train(msg: Message, context: Context) -> Message:
    """A train function as any Flower app has: the new model = the global one + 0.1 (it reads the model)."""
    arrays = msg.content["arrays"]
    RoundInstructions.of(msg)  # the instructions exist in every training message
    new = ArrayRecord([a.numpy() + 0.1 for a in arrays.values()])
    return Message(RecordDict({"arrays": new}), reply_to=msg)


def _app(mods: list) -> ClientApp:
    app = ClientApp(mods=mods)
    app.train()(_train)
    return app


class AppGrid:
    """A simulation's grid whose nodes run `app` (a Flower ClientApp, its mods included); `answered` nodes reply,
    the others are silent."""

    in_process_simulation = True

    def __init__(self, app: ClientApp, nodes: int, *, silent: frozenset[int] = frozenset(),
                 failing: frozenset[int] = frozenset()) -> None:
        self.app, self.nodes, self.silent, self.failing = app, nodes, silent, failing
        self.train_messages = 0

    def get_node_ids(self) -> list[int]:
        return list(range(1, self.nodes + 1))

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        from flwr.app import Error

        replies = []
        for m in messages:
            node = m.metadata.dst_node_id
            self.train_messages += not is_probe(m)
            if node in self.silent:
                continue
            if node in self.failing:
                replies.append(Message(Error(code=0, reason="node down"), reply_to=m))
                continue
            context = Context(run_id=0, node_id=node, node_config={}, state=RecordDict(), run_config={})
            try:
                reply = self.app(m, context)
            except Exception as exc:  # noqa: BLE001 - as Flower: a raising ClientApp is an error reply
                reply = Message(Error(code=0, reason=type(exc).__name__), reply_to=m)
            replies.append(Message(reply.content, reply_to=m) if not reply.has_error() else
                           Message(reply.error, reply_to=m))
        return replies


def test_a_clientapp_without_the_mod_is_refused_before_round_1(tmp_path):
    dp = _wrapper(4, tmp_path, rounds=2)
    grid = AppGrid(_app([]), 4)
    with pytest.raises(MissingClientMod, match=r"uedp_mod"):
        dp.start(grid, START, 2)
    assert grid.train_messages == 0 and not (tmp_path / "ledger.json").exists()  # no budget spent
    assert isinstance(MissingClientMod("x"), ConfigError)


def test_with_the_mod_the_probe_passes_and_the_app_never_sees_it(tmp_path):
    seen: list[bool] = []

    def train(msg: Message, context: Context) -> Message:
        seen.append(is_probe(msg))
        return _train(msg, context)

    app = ClientApp(mods=[uedp_mod])
    app.train()(train)
    dp = _wrapper(4, tmp_path, rounds=2, privacy=dataclasses.replace(PRIVACY, q_u=1.0))
    dp.start(AppGrid(app, 4), START, 2)
    assert dp.accountant.num_releases == 2 and seen and not any(seen)  # the mod answered every probe itself


def test_the_probe_reads_only_the_marker_and_decides_nothing_on_silence(tmp_path):
    """One marker shows the app has the mod (every node runs the submitted app): nodes that fail or stay silent
    change nothing; no answer at all decides nothing either."""
    privacy = dataclasses.replace(PRIVACY, q_u=1.0)
    dp = _wrapper(4, tmp_path / "a", rounds=1, privacy=privacy)
    dp.start(AppGrid(_app([uedp_mod]), 4, silent=frozenset({1}), failing=frozenset({2, 3})), START, 1)
    assert dp.accountant.num_releases == 1
    dp = _wrapper(4, tmp_path / "b", rounds=1, privacy=privacy)
    dp.start(AppGrid(_app([]), 4, silent=frozenset({1, 2, 3, 4})), START, 1)  # no answer: no decision
    assert dp.accountant.num_releases == 1
    dp = _wrapper(4, tmp_path / "c", rounds=1, privacy=privacy)
    with pytest.raises(MissingClientMod):  # answers, none with the marker (errors, an app's own reply)
        dp.start(AppGrid(_app([]), 4, failing=frozenset({1})), START, 1)


def test_the_probe_goes_to_mapped_places_only(tmp_path):
    keys = {n: node_key(n) for n in (10, 20)}

    class Keyed(AppGrid):  # in-process nodes 10, 20 (the map's) and 999 (an extra key), with the mod
        def get_node_ids(self) -> list[int]:
            return [10, 20, 999]

        def get_nodes(self) -> list[LocalNode]:
            return [LocalNode(n, node_key(n)) for n in self.get_node_ids()]

    grid = Keyed(_app([uedp_mod]), 3)
    probed: list[int] = []
    real = grid.send_and_receive

    def record(messages, *, timeout=None):
        messages = list(messages)
        probed.extend(m.metadata.dst_node_id for m in messages if is_probe(m))
        return real(messages, timeout=timeout)

    grid.send_and_receive = record  # type: ignore[method-assign]
    keyed = KeyedPlaces(tuple(key_fingerprint(keys[n]) for n in (10, 20)))
    _wrapper(keyed, tmp_path, rounds=1).start(grid, START, 1)
    assert sorted(probed) == [10, 20]


def test_the_superlinks_error_for_an_unavailable_node_is_silence(tmp_path):
    """The adversarial read's world: the app has the mod, every node but u' is unavailable, and Flower's
    SuperLink answers their probes with its own error replies. Those are silence: the run goes on whether u'
    answers (with the marker) or not (nothing but SuperLink errors)."""
    from flwr.app import Error
    from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode

    class Unavailable(AppGrid):
        def get_node_ids(self) -> list[int]:  # (not 1, Flower's SUPERLINK_NODE_ID: a real node's id is random)
            return [11, 12, 13, 14]

        def send_and_receive(self, messages, *, timeout=None):
            messages = list(messages)
            down = [m for m in messages if m.metadata.dst_node_id in self.down]
            up = super().send_and_receive([m for m in messages if m not in down], timeout=timeout)
            errors = []
            for m in down:  # as Flower's SuperLink answers for a node whose heartbeat expired
                reply = Message(Error(code=ErrorCode.NODE_UNAVAILABLE, reason="node unavailable"), reply_to=m)
                reply.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE_ID
                errors.append(reply)
            return up + errors

    for present in (True, False):
        grid = Unavailable(_app([uedp_mod]), 4)
        grid.down = {11, 12, 13} | (set() if present else {14})
        dp = _wrapper(4, tmp_path / str(present), rounds=1, privacy=dataclasses.replace(PRIVACY, q_u=1.0))
        dp.start(grid, START, 1)
        assert dp.accountant.num_releases == 1


# -- a deployment: the client mod read from the app bundle --------------------------------------------------------
def _bundle(tmp_path: Path, name: str, mods: str) -> Path:
    """An app bundle: pyproject.toml naming `NAME.client:app`, a ClientApp built with `mods`."""
    root = tmp_path / f"bundle-{name}"
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    (root / name / "client.py").write_text(
        "from flwr.clientapp import ClientApp\nfrom uedp.flower import uedp_mod\n"
        f"app = ClientApp(mods={mods})\n\n\n@app.train()\ndef train(msg, context):\n    return msg\n")
    (root / "pyproject.toml").write_text(f'[tool.flwr.app.components]\nclientapp = "{name}.client:app"\n')
    return root


def test_a_deployment_reads_the_client_mod_from_the_app_bundle(tmp_path, monkeypatch):
    """On a deployment's grid the decision is the bundle's (the ServerApp runs from it: Flower puts its directory
    first on sys.path), never the nodes' answers: no probe is sent; a bundle without uedp_mod is refused, naming
    it, before anything is sent; no bundle on sys.path is refused too."""
    from uedp.flower.bundle import bundle_client_app, mounts_uedp_mod

    keys = {n: node_key(n) for n in (10, 20)}
    keyed = KeyedPlaces(tuple(key_fingerprint(keys[n]) for n in (10, 20)))
    without = _bundle(tmp_path, "nomod_app", "[]")
    found = bundle_client_app([str(without)])
    assert found is not None and found.reference == "nomod_app.client:app" and not mounts_uedp_mod(found.app)
    monkeypatch.syspath_prepend(str(without))
    grid = FakeSuperLink(keys)
    with pytest.raises(MissingClientMod, match=r"nomod_app\.client:app.*uedp_mod"):
        _wrapper(keyed, tmp_path / "nomod", rounds=1).start(grid, START, 1)
    assert grid.sent == [] and not (tmp_path / "nomod" / "ledger.json").exists()
    monkeypatch.syspath_prepend(str(_bundle(tmp_path, "mod_app", "[uedp_mod]")))
    grid = FakeSuperLink(keys)
    dp = _wrapper(keyed, tmp_path / "mod", rounds=1)
    dp.start(grid, START, 1)
    assert dp.accountant.num_releases == 1 and grid.probes == 0  # read from the bundle: no probe
    from flwr.clientapp import ClientApp

    from uedp.flower import uedp_mod

    class Skips(ClientApp):  # a subclass whose __call__ would skip its mods
        def __call__(self, message, context):  # pragma: no cover - never called
            return message

    unregistered, skipping = ClientApp(mods=[uedp_mod]), Skips(mods=[uedp_mod])
    skipping.train()(lambda msg, context: msg)
    assert not mounts_uedp_mod(unregistered) and not mounts_uedp_mod(skipping)
    monkeypatch.setattr("sys.path", [str(tmp_path / "nothing-here")])
    with pytest.raises(ConfigError, match=r"cannot find the app bundle's ClientApp"):
        _wrapper(keyed, tmp_path / "none", rounds=1).start(FakeSuperLink(keys), START, 1)


# -- a simulation with more places than nodes; the budget stop's last line --------------------------------------
class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


def test_more_places_than_simulated_nodes_is_refused(tmp_path):
    fake = FakeClock()
    set_local_task_identity()
    accountant = UeDPAccountant("uedp", PRIVACY, num_users=6, rounds=2, noise_multiplier=1.0)
    dp = UserEntityDP(FedAvg(), places=6, accountant=accountant, store=RunStore(tmp_path),
                      seams=Seams(noise=ZeroNoise(), clock=fake.clock, sleep=fake.sleep))
    with pytest.raises(ConfigError, match=r"places=6 but this simulation has 4 node"):
        dp.start(AppGrid(_app([uedp_mod]), 4), START, 2)
    assert not (tmp_path / "ledger.json").exists()


def test_a_caught_budget_stop_ends_with_a_line_saying_so(tmp_path, caplog):
    privacy = dataclasses.replace(PRIVACY, q_u=1.0, target_epsilon=3.0)
    dp = _wrapper(4, tmp_path, rounds=10, privacy=privacy)
    with caplog.at_level(logging.INFO, logger="flwr.uedp"), pytest.raises(PrivacyBudgetExhausted):
        dp.start(AppGrid(_app([uedp_mod]), 4), START, 10)
    last = [r for r in caplog.records if r.name == "flwr.uedp"][-1]
    assert last.levelno == logging.WARNING and "budget stop before round" in last.getMessage()
    assert f"round {dp.report.model_round}'s" in last.getMessage() and dp.report.model_round >= 1


# -- the round schedule: no grace ----------------------------------------------------------------------------------
def test_a_round_09_s_late_is_counted(tmp_path):
    """round_period 10 s (a fake clock): round 1's grid takes 10.9 s, so its release comes after its public time
    and round 2 starts 0.9 s after its due time: both rounds are counted late (no grace), in the report and the
    operator log; round 3 is on time again."""
    fake = FakeClock()
    durations = {1: 10.9}

    class Timed(AppGrid):
        def send_and_receive(self, messages, *, timeout=None):
            messages = list(messages)
            rounds = {int(m.metadata.group_id) for m in messages if not is_probe(m)}
            replies = super().send_and_receive(messages, timeout=timeout)
            for r in rounds:
                fake.now += durations.get(r, 0.0)
            return replies

    set_local_task_identity()
    accountant = UeDPAccountant("uedp", dataclasses.replace(PRIVACY, q_u=1.0), num_users=4, rounds=3,
                                noise_multiplier=1.0)
    dp = UserEntityDP(FedAvg(), places=4, accountant=accountant, store=RunStore(tmp_path), round_period=10.0,
                      seams=Seams(noise=ZeroNoise(), clock=fake.clock, sleep=fake.sleep))
    dp.start(Timed(_app([uedp_mod]), 4), START, 3, timeout=1.0)
    assert dp.report.late_rounds == 2
    assert [r["late"] for r in operator_rows(tmp_path)] == [True, True, False]


def test_a_round_period_shorter_than_the_servers_work_is_refused_before_round_1(tmp_path):
    """round_period must exceed the timeout plus the measured release, ledger, checkpoint and evaluate_fn
    time: here evaluate_fn alone takes 0.4 s (at round 0), so a period of 1.0 s with a 0.5 s timeout is too
    short, and nothing is charged."""
    import time

    def slow_evaluation(server_round: int, arrays: ArrayRecord) -> None:
        time.sleep(0.4)

    dp = _wrapper(4, tmp_path, rounds=2, privacy=dataclasses.replace(PRIVACY, q_u=1.0), round_period=1.0)
    with pytest.raises(ConfigError, match=r"round_period 1 s is too short.*evaluate_fn, 0\.4"):
        dp.start(AppGrid(_app([uedp_mod]), 4), START, 2, timeout=0.5, evaluate_fn=slow_evaluation)
    assert not (tmp_path / "ledger.json").exists()
    ok = _wrapper(4, tmp_path / "ok", rounds=1, privacy=dataclasses.replace(PRIVACY, q_u=1.0), round_period=1.5)
    ok.start(AppGrid(_app([uedp_mod]), 4), START, 1, timeout=0.1, evaluate_fn=lambda r, a: None)
    assert ok.accountant.num_releases == 1


# -- the accountant -------------------------------------------------------------------------------------------------
def test_flowers_own_accountant_is_refused_with_the_reason(tmp_path):
    from flwr.supercore.privacy_accounting import (
        NeighboringRelation,
        SamplingMethod,
    )
    from flwr.supercore.privacy_accounting import (
        PrivacyConfig as FlowerPrivacyConfig,
    )
    from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

    theirs = RdpAccountant(FlowerPrivacyConfig(target_delta=1e-5, population_size=4,
                                               neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
                                               sampling_method=SamplingMethod.NO_AMPLIFICATION))
    with pytest.raises(TypeError, match=r"one Gaussian per round at user level"):
        UserEntityDP(FedAvg(), places=4, accountant=theirs, store=RunStore(tmp_path))  # type: ignore[arg-type]


def test_the_constructor_takes_seven_parameters():
    import inspect

    parameters = inspect.signature(UserEntityDP.__init__).parameters
    assert list(parameters) == ["self", "strategy", "places", "accountant", "store", "round_period", "records",
                                "seams"]


def test_a_scheduled_rounds_end_is_its_deadline_whoever_replies_when(tmp_path):
    """The adversarial read's late world: the time-out is 10 s and u' answers 9.5 s into each round it is
    sampled in. With a round schedule (P = 11 s, a fake clock) every round's replies are awaited until its due
    time + 10 s and the round ends THEN, however early they came: each round starts and ends at the same times
    with u' present or absent, and none is late."""
    fake = FakeClock()
    slow = 14

    class Slow(AppGrid):
        def get_node_ids(self) -> list[int]:
            return [11, 12, 13, 14]

        def send_and_receive(self, messages, *, timeout=None):
            messages = list(messages)
            replies = super().send_and_receive(messages, timeout=timeout)
            if any(m.metadata.dst_node_id == slow and not is_probe(m) for m in messages) and self.present:
                fake.now += 9.5  # u''s reply arrives 9.5 s into the round
            return replies

    times = {}
    for present in (True, False):
        fake.now = 1000.0
        grid = Slow(_app([uedp_mod]), 4, silent=frozenset() if present else frozenset({slow}))
        grid.present = present
        set_local_task_identity()
        accountant = UeDPAccountant("uedp", dataclasses.replace(PRIVACY, q_u=0.5), num_users=4, rounds=6,
                                    noise_multiplier=1.0)
        dp = UserEntityDP(FedAvg(), places=4, accountant=accountant, store=RunStore(tmp_path / str(present)),
                          round_period=11.0, seams=Seams(noise=ZeroNoise(), clock=fake.clock, sleep=fake.sleep))
        ends = []
        real = dp.aggregate_train

        def aggregate(server_round, replies, _real=real, _ends=ends):
            _ends.append(fake.now - 1000.0)
            return _real(server_round, replies)

        dp.aggregate_train = aggregate  # type: ignore[method-assign]
        dp.start(grid, START, 6, timeout=10.0)
        times[present] = ends
        assert dp.report.late_rounds == 0
    assert times[True] == times[False] == [11.0 * t + 10.0 for t in range(1, 7)]


def test_a_scheduled_round_on_flowers_http_grid_ends_and_releases_at_public_times(tmp_path):
    """Adversarial read #5's world on a deployment's grid (an HttpGrid whose push and pull run on a fake clock,
    each pull costing 0.3 s): the time-out is 10 s, P = 14 s, and u' answers 9.5 s into each round it is sampled
    in. The round's replies are pulled every 0.1 s until its deadline (due + 10 s); the round ends then, and its
    release (aggregate_train's return, after which Flower prints the round) comes at due + 10 + 3 s, whether u'
    is there or not; no round is late, and a reply after the deadline is not waited for."""
    import uuid

    fake = FakeClock()
    keys = {n: node_key(n) for n in (10, 20, 30, 40)}
    keyed = KeyedPlaces(tuple(key_fingerprint(keys[n]) for n in (10, 20, 30, 40)))

    class FakeHttp(HttpGrid):
        def __init__(self, nodes: dict[int, bytes], delays: dict[int, float]) -> None:
            self.nodes, self.delays, self.store = nodes, delays, {}

        def get_node_ids(self) -> list[int]:
            return list(self.nodes)

        def get_nodes(self) -> list[LocalNode]:
            return [LocalNode(n, k) for n, k in self.nodes.items()]

        def push_messages(self, messages):
            ids = []
            for m in messages:
                mid = uuid.uuid4().hex
                m.metadata.__dict__["_message_id"] = mid
                zeros = [np.zeros_like(a.numpy()) for a in m.content.array_records["arrays"].values()]
                self.store[mid] = (fake.now + self.delays[m.metadata.dst_node_id],
                                   Message(reply_content(zeros, None), reply_to=m))
                ids.append(mid)
            return ids

        def pull_messages(self, message_ids):
            ready = [i for i in message_ids if i in self.store and self.store[i][0] <= fake.now]
            fake.now += 0.3  # a pull's cost
            return [self.store.pop(i)[1] for i in ready]

    times = {}
    for present in (True, False):
        fake.now = 1000.0
        owners = {n: k for n, k in keys.items() if present or n != 40}
        grid = FakeHttp(owners, {10: 1.0, 20: 2.0, 30: 0.5, 40: 9.5})
        set_local_task_identity()
        accountant = UeDPAccountant("uedp", dataclasses.replace(PRIVACY, q_u=0.5), num_users=4, rounds=8,
                                    noise_multiplier=1.0)
        dp = UserEntityDP(FedAvg(), places=keyed, accountant=accountant, store=RunStore(tmp_path / str(present)),
                          round_period=14.0, seams=Seams(noise=ZeroNoise(), clock=fake.clock, sleep=fake.sleep))
        marks: list[tuple[float, float]] = []
        real = dp.aggregate_train

        def aggregate(server_round, replies, _real=real, _marks=marks):
            entered = fake.now - 1000.0
            out = _real(server_round, replies)
            _marks.append((entered, fake.now - 1000.0))
            return out

        dp.aggregate_train = aggregate  # type: ignore[method-assign]
        dp.start(grid, START, 8, timeout=10.0)
        times[present] = marks
        assert dp.report.late_rounds == 0
        sampled_u = [r for r in operator_rows(tmp_path / str(present)) if present]
        assert all(r["missing"] == 0 for r in sampled_u)  # u''s 9.5 s reply arrives before the deadline
    due = [14.0 * t for t in range(1, 9)]
    assert [e for e, _ in times[True]] == [e for e, _ in times[False]]
    assert all(abs(e - (d + 10.0)) < 0.31 for (e, _), d in zip(times[True], due))  # the last pull at the deadline
    assert [r for _, r in times[True]] == [r for _, r in times[False]] == [d + 13.0 for d in due]
