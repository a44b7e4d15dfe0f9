"""UeDP as a Flower component (uedp.flower): Flower's own `Strategy.start` drives the wrapper; the project's app is
one user of it; a node that stands in no place changes nothing; the place map; the budget stop; resume; the
server optimizer role of the wrapped strategy; the public names."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.serverapp.strategy import FedAdam, FedAvg, FedMedian

from runtime.local_grid import LocalGrid, node_key, owner_places, set_local_task_identity
from server.app import run_server
from server.setup import Components
from tests.helpers import StandInGrid, ZeroNoise, split_probes, tiny_config
from uedp.errors import ConfigError
from uedp.flower.places import Assignment, KeyedPlaces, SortedNodes, key_fingerprint, read_places, write_places
from uedp.flower.store import RunStore
from uedp.flower.strategy import PrivacyBudgetExhausted, Seams, UserEntityDP
from uedp.models.base import get_weights
from uedp.pipeline import new_model, prepare
from uedp.privacy.accountant import UeDPAccountant
from uedp.privacy.ledger import Ledger
from uedp.protocol import is_probe
from uedp.training import LocalTraining


class Recorder:
    """A grid that records, per round, each training message's destination node (and passes everything on)."""

    def __init__(self, grid: Any) -> None:
        self.grid = grid
        self.sent: dict[int, list[int]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.grid, name)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        messages = list(messages)
        for m in messages:
            if not is_probe(m):  # the training messages (the probe before round 1: tests/test_component_misuse.py)
                self.sent.setdefault(int(m.metadata.group_id), []).append(m.metadata.dst_node_id)
        return self.grid.send_and_receive(messages, timeout=timeout)


def _accountant(cfg: Any, *, mechanism: str = "uedp", places: int = 8, rounds: int = 3,
                z: float = 1.0) -> UeDPAccountant:
    return UeDPAccountant(mechanism, cfg.privacy, num_users=places, rounds=rounds, noise_multiplier=z)


def _weights(out: Path) -> list[np.ndarray]:
    return [np.asarray(w) for w in torch.load(out / "model.pt", weights_only=False)["weights"]]


def _records(out: Path) -> list[dict]:
    return json.loads((out / "ledger.json").read_text())["rounds"]


# -- a bare Flower app on the component = the project's app, at one fixed seed --------------------------------
@pytest.mark.parametrize("strategy", ["uedp", "user_dp", "fedavg"])
def test_flowers_own_start_on_the_component_equals_the_projects_app(tmp_path, strategy):
    """The project's ServerApp (run_server) and a bare app that wires the component by hand, as a Flower
    user would (FedAvg as the server optimizer, the train config, `dp.start`): at the same fixed seed they
    send each round's messages to the same nodes, charge the same ledger and end with the same weights."""
    set_local_task_identity()
    cfg = tiny_config(tmp_path / "app", strategy={"name": strategy}, privacy={"seed": 5})
    ours = Recorder(LocalGrid(cfg, 8))
    run_server(ours, cfg, stream=open("/dev/null", "w"))  # noqa: SIM115 - closed with the process

    bare_out = tmp_path / "bare"
    manifest = prepare(cfg)
    model = new_model(cfg, manifest, seed=5)  # the project's model at the run's seed: the same start
    accountant = UeDPAccountant(strategy, cfg.privacy, num_users=8, rounds=cfg.federation.rounds,
                                noise_multiplier=cfg.privacy.noise_multiplier)
    dp = UserEntityDP(FedAvg(), places=8, accountant=accountant, store=RunStore(bare_out))
    bare = Recorder(LocalGrid(cfg, 8))
    result = dp.start(bare, ArrayRecord(get_weights(model)), cfg.federation.rounds,
                      train_config=ConfigRecord(LocalTraining.from_config(cfg.train).to_record()))
    assert bare.sent == ours.sent and len(bare.sent) == cfg.federation.rounds
    strip = ("prev", "hash")  # the chains differ only by the header (this ledger's own delta, N): compare records
    assert [{k: v for k, v in r.items() if k not in strip} for r in _records(bare_out)] == \
        [{k: v for k, v in r.items() if k not in strip} for r in _records(tmp_path / "app")]
    for got, want in zip(result.arrays.to_numpy_ndarrays(), _weights(tmp_path / "app")):
        np.testing.assert_array_equal(got, want)  # FedAvg's float64 sum rounds like torch's float32 SGD step
    if strategy != "fedavg":
        # privacy_spent reports the largest of the same epsilons: the same floats
        spent = dp.privacy_spent()
        everything = dp.accountant.epsilons()
        assert spent.epsilon == pytest.approx(max(everything[f"eps_{c}"] for c in dp.accountant.claims))
        assert spent.claims == {f"eps_{c}": pytest.approx(everything[f"eps_{c}"]) for c in dp.accountant.claims}
        assert spent.num_releases == cfg.federation.rounds
    else:
        assert dp.privacy_spent() is None


# -- an intruder: a node that stands in no place ---------------------------------------------------------------
def test_an_intruder_node_changes_nothing_in_corpus_mode(tmp_path):
    """9 nodes connected for 8 places: the run goes on, and its sampled places, each message's destination and
    the final weights equal those of the run without the ninth node."""
    runs = {}
    for nodes in (8, 9):
        cfg = tiny_config(tmp_path / str(nodes), privacy={"seed": 11})
        grid = Recorder(LocalGrid(cfg, nodes))
        set_local_task_identity()
        summary = run_server(grid, cfg, stream=open("/dev/null", "w"))  # noqa: SIM115
        runs[nodes] = (grid.sent, _weights(tmp_path / str(nodes)), summary)
    assert runs[9][0] == runs[8][0] and all(8 not in nodes for nodes in runs[9][0].values())
    assert runs[9][2]["rounds"] == runs[8][2]["rounds"] == 3
    for a, b in zip(runs[9][1], runs[8][1]):
        np.testing.assert_array_equal(a, b)


def test_an_intruder_owner_changes_nothing(tmp_path):
    """Owners mode: 4 invited owners (the place map of their keys) and a fifth node with a key of its own: it
    is never sent a message, and the run equals the run without it (places, destinations, final weights)."""
    from uedp.owner_files import write_owner_files

    paths = [str(p) for p in write_owner_files(tmp_path / "owners", dataset="synthetic",
                                               options={"num_users": 5, "min_sentences": 20, "max_sentences": 30})]
    evaluation = write_owner_files(tmp_path / "eval", dataset="synthetic", splits=("test",),
                                   options={"num_users": 2, "min_sentences": 20, "max_sentences": 30, "seed": 7})
    runs = {}
    for name, files in (("invited", paths[:4]), ("intruder", paths)):
        out = tmp_path / name
        cfg = tiny_config(out, federation={"data": "owners", "num_nodes": 4, "eval_data": str(evaluation[0]),
                                           "rounds": 2, "eval_every": 2, "wait_timeout": 0.0},
                          entities={"detector": "rules"}, privacy={"q_u": 1.0, "m_max": 6, "seed": 3})
        grid = Recorder(LocalGrid(cfg, 4, data_paths=files))
        set_local_task_identity()
        summary = run_server(grid, cfg, components=Components(places=owner_places(4)),
                             stream=open("/dev/null", "w"))  # noqa: SIM115
        runs[name] = (grid.sent, _weights(out), summary)
    assert runs["intruder"][0] == runs["invited"][0] and all(4 not in n for n in runs["intruder"][0].values())
    assert sorted(runs["invited"][0][1]) == [0, 1, 2, 3]  # q_u = 1: every place, every round
    for a, b in zip(runs["intruder"][1], runs["invited"][1]):
        np.testing.assert_array_equal(a, b)


def test_a_private_owners_run_without_a_place_map_is_refused(tmp_path):
    from strategies import run_places
    from uedp.privacy.mechanisms import spec_for

    cfg = tiny_config(tmp_path, federation={"data": "owners", "num_nodes": 4})
    with pytest.raises(ConfigError, match="federation.places"):
        run_places(cfg, spec_for("uedp", "f_E+"), 4)
    assert isinstance(run_places(cfg, spec_for("fedavg", "f_E+"), 4), SortedNodes)  # no guarantee, no map needed
    places = write_places(tmp_path / "places.txt", [node_key(i) for i in range(3)])
    cfg3 = dataclasses.replace(cfg, federation=dataclasses.replace(cfg.federation, places=str(places)))
    with pytest.raises(ConfigError, match="lists 3 places, federation.num_nodes is 4"):
        run_places(cfg3, spec_for("uedp", "f_E+"), 4)
    assert run_places(cfg3, spec_for("uedp", "f_E+"), 3).size == 3


# -- the place map ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Info:
    node_id: int
    public_key: bytes
    status: str = "online"
    last_activated_at: str = ""


class Nodes:
    in_process_simulation = True  # a stand-in grid (SortedNodes accepts it)

    def __init__(self, infos: list[Info]) -> None:
        self.infos = infos

    def get_nodes(self) -> list[Info]:
        return self.infos

    def get_node_ids(self) -> list[int]:
        return [i.node_id for i in self.infos]


def test_keyed_places_map_registered_keys_and_ignore_the_rest(tmp_path):
    keys = [node_key(i) for i in range(4)]
    places = read_places(write_places(tmp_path / "p.txt", keys[:3], ["a", "b", "c"]))
    assert places.size == 3 and places.fingerprints[0] == key_fingerprint(keys[0])
    # node ids are whatever the SuperLink gave; an unknown key and a key-less node stand in no place
    grid = Nodes([Info(901, keys[2]), Info(55, keys[0]), Info(7, keys[3]), Info(12, b"")])
    assert places.assign(grid) == Assignment((55, None, 901), ignored=2)
    # a restarted node whose old id is still listed: the online one, then the most recently activated
    grid = Nodes([Info(55, keys[0], status="offline", last_activated_at="2026-12-01"),
                  Info(66, keys[0], status="online", last_activated_at="2026-11-01")])
    assert places.assign(grid) == Assignment((66, None, None), ignored=1)
    # the same key in OpenSSH, PEM or DER form has one fingerprint
    from cryptography.hazmat.primitives import serialization

    public = serialization.load_pem_public_key(keys[1])
    ssh = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert key_fingerprint(ssh) == key_fingerprint(der) == key_fingerprint(keys[1])


def test_a_bad_place_map_is_refused_naming_the_line(tmp_path):
    path = tmp_path / "places.txt"
    path.write_text(f"# owners\n{key_fingerprint(node_key(0))}\nnot-a-fingerprint\n")
    with pytest.raises(ConfigError, match=r"places.txt, line 3: 'not-a-fingerprint'"):
        read_places(path)
    fp = key_fingerprint(node_key(0))
    path.write_text(f"{fp}\n{fp}  # twice\n")
    with pytest.raises(ConfigError, match="places 0 and 1 have the same key"):
        read_places(path)
    with pytest.raises(ConfigError, match="no such file"):
        read_places(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="not a public key"):
        key_fingerprint(b"ssh-rsa garbage")


def test_sorted_nodes_fill_the_first_places():
    assert SortedNodes(3).assign(Nodes([Info(9, b""), Info(4, b"")])) == Assignment((4, 9, None))
    assert SortedNodes(2).assign(Nodes([Info(i, b"") for i in (5, 3, 8)])) == Assignment((3, 5), ignored=1)


# -- the budget stop through Flower's start --------------------------------------------------------------------
def test_the_budget_stop_is_flowers_exception_before_the_round(tmp_path):
    """Driven by Flower's start, the wrapper raises PrivacyBudgetExhausted in configure_train of the first
    round that would pass the target: nothing of it is charged, the last released arrays are kept, and the
    project's app still ends with summary.json and model.pt."""
    from runtime.local_grid import run_local

    cfg = tiny_config(tmp_path / "stop", privacy={"target_epsilon": 2.5}, federation={"rounds": 6})
    s = run_local(cfg, components=Components(noise_multiplier=1.0))
    ledger = Ledger.load(tmp_path / "stop" / "ledger.json")
    assert s["stopped_by_budget"] and 0 < s["rounds"] < 6 and len(ledger) == s["rounds"]
    assert max(s["eps_uedp"], s["eps_undetected"]) <= 2.5
    after = ledger.check_budget(dataclasses.replace(ledger.records[-1], round=len(ledger) + 1), target_epsilon=2.5,
                                adjacency=("uedp", "undetected"))
    assert not after.allowed  # the next round would have passed it
    assert (tmp_path / "stop" / "summary.json").is_file() and (tmp_path / "stop" / "model.pt").is_file()

    set_local_task_identity()
    dp = UserEntityDP(FedAvg(), places=8, accountant=UeDPAccountant("uedp", cfg.privacy, num_users=8, rounds=6,
                                                                    noise_multiplier=1.0),
                      store=RunStore(tmp_path / "bare"))
    weights = get_weights(new_model(cfg, prepare(cfg), seed=0))
    with pytest.raises(PrivacyBudgetExhausted, match=f"round {len(ledger) + 1} would take"):
        dp.start(LocalGrid(cfg, 8), dp.initial_arrays(ArrayRecord(weights)), 6,
                 train_config=ConfigRecord(LocalTraining.from_config(cfg.train).to_record()))
    report = dp.report
    assert report.rounds_charged == dp.accountant.num_releases == len(ledger) and report.arrays is not None
    assert report.model_round == len(ledger)


# -- the wrapped strategy is the server optimizer ----------------------------------------------------------------
def _released(inner: Any, tmp_path: Path, update: list[np.ndarray], start: list[np.ndarray]) -> list[np.ndarray]:
    """The new global arrays `inner` makes of one released update (through the wrapper's server optimizer)."""
    from uedp.flower.optimizer import ServerOptimizer

    set_local_task_identity()
    return ServerOptimizer.of(inner).apply(1, ArrayRecord(start), update, ConfigRecord()).to_numpy_ndarrays()


def test_fedavg_adds_the_update_and_fedadam_steps_with_it(tmp_path):
    start = [np.ones((2, 2), np.float32), np.zeros(3, np.float32)]
    update = [np.full((2, 2), 0.25, np.float32), np.array([1.0, -2.0, 0.5], np.float32)]
    got = _released(FedAvg(), tmp_path, update, start)
    for g, s, u in zip(got, start, update):
        np.testing.assert_array_equal(g, s + u)
        assert g.dtype == np.float32
    adam = FedAdam(eta=0.1, beta_1=0.9, beta_2=0.99, tau=1e-3)
    got = _released(adam, tmp_path, update, start)
    # FedAdam's step at round 1 from m = v = 0: m = 0.1 u, v = 0.01 u^2, and Flower's bias-corrected rate
    # eta sqrt(1 - beta_2^(t+1)) / (1 - beta_1^(t+1)) with t = 1: the update is FedAdam's pseudo-gradient
    eta = 0.1 * np.sqrt(1 - 0.99**2) / (1 - 0.9**2)
    for g, s, u in zip(got, start, update):
        u64 = u.astype(np.float64)
        want = s + eta * (0.1 * u64) / (np.sqrt(0.01 * u64**2) + 1e-3)
        np.testing.assert_allclose(g, want.astype(np.float32), rtol=1e-6)  # float32 against float64: a few 2^-24
    with pytest.raises(TypeError, match="FedMedian"):
        UserEntityDP(FedMedian(), places=4, accountant=_accountant(tiny_config(tmp_path), places=4, rounds=2),
                     store=RunStore(tmp_path))


def test_a_resumed_wrapper_keeps_its_server_optimizers_state(tmp_path):
    """FedAdam's moments are in the wrapper's checkpoint: a run of 2 + 2 rounds (resumed) ends where a run
    of 4 does, the rounds numbered on from the ledger."""
    cfg = tiny_config(tmp_path, privacy={"seed": 2, "q_u": 1.0})
    set_local_task_identity()
    start = ArrayRecord([np.zeros(4, np.float32)])

    class Constant(StandInGrid):
        """Every node replies the update [1, 0, 0, 0] (clipped by the wrapper's re-check to beta)."""

        def send_and_receive(self, messages, *, timeout=None):
            from flwr.app import RecordDict

            answers, messages = split_probes(messages)
            return answers + [Message(RecordDict({"update": ArrayRecord([np.array([1.0, 0, 0, 0], np.float32)])}),
                                      reply_to=m) for m in messages]

    def dp(out: Path, rounds: int, resume: bool) -> UserEntityDP:
        return UserEntityDP(FedAdam(eta=0.05), places=8,
                            accountant=_accountant(cfg, mechanism="user_dp", rounds=rounds),
                            store=RunStore(out, checkpoint_every=1, resume=resume), seams=Seams(noise=ZeroNoise()))

    whole = dp(tmp_path / "whole", 4, False)
    whole_result = whole.start(Constant(), whole.initial_arrays(start), whole.rounds_left).arrays
    first = dp(tmp_path / "split", 2, False)
    first.start(Constant(), first.initial_arrays(start), first.rounds_left)
    second = dp(tmp_path / "split", 4, True)
    assert second.rounds_left == 2 and second.report.checkpoint_round == 2
    result = second.start(Constant(), second.initial_arrays(start), second.rounds_left).arrays
    assert [r.round for r in second.accountant.ledger.records] == [1, 2, 3, 4]
    # the same float32 FedAdam steps from moments restored exactly: rtol 1e-6 allows only a float32 reassociation
    np.testing.assert_allclose(result.to_numpy_ndarrays()[0], whole_result.to_numpy_ndarrays()[0], rtol=1e-6)
    assert not np.allclose(result.to_numpy_ndarrays()[0], 0.0)


def test_no_evaluation_message_is_ever_sent(tmp_path):
    """Flower's DP wrappers delegate evaluation to the inner strategy (FedAvg evaluates on every node by
    default); the UeDP wrapper never configures one: the nodes' data is private."""
    set_local_task_identity()
    dp = UserEntityDP(FedAvg(fraction_evaluate=1.0), places=4,
                      accountant=_accountant(tiny_config(tmp_path), places=4, rounds=2), store=RunStore(tmp_path))
    assert list(dp.configure_evaluate(1, ArrayRecord([np.zeros(2, np.float32)]), ConfigRecord(), Nodes([]))) == []


def test_the_component_exports_exactly_its_documented_names():
    """uedp.flower.__all__ holds the names docs/flower-component.md documents, each importable, and nothing
    else (the rest is imported from its module)."""
    import re

    import uedp.flower as component

    page = (Path(__file__).resolve().parents[1] / "docs" / "flower-component.md").read_text()
    for name in component.__all__:
        assert getattr(component, name) is not None
        assert re.search(rf"`[^`]*\b{name}\b[^`]*`", page), f"{name} is exported but not documented"
    assert set(component.__all__) == {"UserEntityDP", "PrivacyBudgetExhausted", "UeDPAccountant", "RunStore",
                                      "PrivacyConfig", "uedp_mod", "select_rows", "stable_sids",
                                      "RoundInstructions", "KeyedPlaces", "SortedNodes", "read_places",
                                      "base_records", "verify_base"}
    for gone in ("UeDPMod", "plan_round", "MechanismSettings", "bound_update", "RoundReport", "MechanismStrategy"):
        with pytest.raises(AttributeError):
            getattr(component, gone)
    assert KeyedPlaces is component.KeyedPlaces


def test_a_failing_train_function_sends_no_text_to_the_server():
    """Flower's own error reply quotes the exception's message (a corpus error quotes its sentence); the mod's
    says only that the train function failed, and of which type."""
    from flwr.app import Context, RecordDict

    from tests.helpers import instructions, train_message
    from uedp.errors import CorpusError
    from uedp.flower.mod import uedp_mod
    from uedp.privacy.sampling import new_round_key

    set_local_task_identity()
    ins, training = instructions(round=1, mechanism="uedp", q_e=0.5, q_s=0.5, k_cap=1, m_max=4, slot=0, beta=1.0,
                                 w_u=1.0, private=True, key=new_round_key())
    msg = train_message([np.zeros(3, np.float32)], ins, training)
    context = Context(run_id=0, node_id=1, node_config={}, state=RecordDict(), run_config={})

    def leaky(m, c):
        raise CorpusError("line 7: entity [6, 35, 'PERSON'] ('David Johnson in Paris') crosses a sentence boundary")

    reply = uedp_mod(msg, context, leaky)
    assert reply.has_error() and "CorpusError" in reply.error.reason
    assert "David" not in reply.error.reason and "Paris" not in reply.error.reason


def test_a_node_reporting_garbage_for_its_key_stands_in_no_place(tmp_path):
    keys = [node_key(i) for i in range(2)]
    places = KeyedPlaces(tuple(key_fingerprint(k) for k in keys))
    grid = Nodes([Info(3, b"not a key"), Info(4, b"ssh-foo AAAA x"), Info(5, keys[1])])
    assert places.assign(grid) == Assignment((None, 5), ignored=2)


def test_a_round_schedule_makes_the_rounds_start_on_time(tmp_path):
    """A round_period: round t's messages are built at `start` + t periods (the period before round 1 holds
    the preflight), however quickly the rounds before it ended (their timing then depends on no one's data or
    presence)."""
    import time

    set_local_task_identity()
    cfg = tiny_config(tmp_path, privacy={"q_u": 1.0, "seed": 1, "target_epsilon": None})
    starts: list[float] = []

    class Quick(StandInGrid):
        def send_and_receive(self, messages, *, timeout=None):
            answers, messages = split_probes(messages)
            if messages:  # (not the probe, nor Flower's empty evaluation step)
                starts.append(time.monotonic())
            return answers  # every training reply missing: the round is over at once

    dp = UserEntityDP(FedAvg(), places=8, accountant=_accountant(cfg, mechanism="user_dp", rounds=3),
                      store=RunStore(tmp_path), round_period=1.5, seams=Seams(noise=ZeroNoise()))
    t0 = time.monotonic()
    result = dp.start(Quick(), ArrayRecord([np.zeros(2, np.float32)]), 3, timeout=0.5)
    since = np.array(starts) - t0  # round t is due at start + t periods (start is after t0)
    assert len(starts) == 3 and np.all(since >= [1.5, 3.0, 4.5]) and np.all(since < np.array([1.5, 3.0, 4.5]) + 0.5)
    assert dp.report.late_rounds == 0
    # no target here (no budget check computes epsilons), yet every round's metrics carry its claimed epsilon
    eps = [result.train_metrics_clientapp[r]["eps_user"] for r in (1, 2, 3)]
    # the last round's value and the accountant's are one computation on the same ledger: equal
    assert eps[0] < eps[1] < eps[2] and eps[2] == dp.claimed_epsilons()["eps_user"] == \
        dp.accountant.epsilons()["eps_user"]
    assert [set(result.train_metrics_clientapp[r]) for r in (1, 2, 3)] == [{"round", "eps_user"}] * 3
    with pytest.raises(ConfigError, match="round_period"):
        UserEntityDP(FedAvg(), places=8, accountant=_accountant(cfg, rounds=3), store=RunStore(tmp_path),
                     round_period=-1.0)


def test_an_owners_run_without_a_schedule_says_its_timing_is_outside_the_guarantee(tmp_path):
    from server.app import outside_guarantee
    from server.setup import RunContext

    def ctx(**federation):
        cfg = tiny_config(tmp_path, federation={"data": "owners", "num_nodes": 4, **federation})

        return RunContext(cfg=cfg, spec=None, out=tmp_path, population=4, strategy=None, places=None,  # type: ignore[arg-type]
                          store=None, test=None, metric_name="perplexity", warning=None, metrics=None,  # type: ignore[arg-type]
                          stream=None)  # type: ignore[arg-type]

    assert "round_period None" in outside_guarantee(ctx())
    scheduled = outside_guarantee(ctx(round_period=700.0))
    assert "round_period None" not in scheduled and "started after its scheduled time" in scheduled  # a fixed sentence


def test_the_privacy_settings_table_lists_every_field_with_its_default():
    """docs/flower-component.md's table of PrivacyConfig: one row per field, in order, with its default."""
    import re

    from uedp.config import PrivacyConfig

    page = (Path(__file__).resolve().parents[1] / "docs" / "flower-component.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", page, flags=re.M)
    fields = dataclasses.fields(PrivacyConfig)
    assert [name for name, _ in rows] == [f.name for f in fields]
    for (name, default), f in zip(rows, fields):
        assert default.strip() == (f'"{f.default}"' if isinstance(f.default, str) else repr(f.default)), name
