"""The project's ClientApp (client/app.py) takes the path users take: `ClientApp(mods=[uedp_mod])` with a train
function that returns the new model, the mounted mod making the reply; it pickles by reference (Ray ships it
with every message of a simulation), and the in-process grid runs it whole."""

from __future__ import annotations

import pickle

import cloudpickle
import numpy as np
import pytest
from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp

from client.app import ProjectClientApp, QueryFunction, TrainFunction, make_client_app
from client.update import client_update
from runtime.local_grid import LocalGrid, set_local_task_identity
from tests.helpers import instructions, tiny_config, train_message
from uedp.flower.mod import UeDPMod, bound_update, uedp_mod
from uedp.models.base import get_weights
from uedp.pipeline import load_manifest, new_model, prepare
from uedp.protocol import has_probe_marker, probe_content

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cfg = tiny_config(tmp_path_factory.mktemp("run"))
    prepare(cfg)
    return cfg


def _ins(**kw):
    base = dict(round=1, mechanism="user_dp", q_e=0.5, q_s=0.5, k_cap=0, m_max=6, slot=-1, beta=0.5, w_u=1.0,
                private=True, seed=7)
    return instructions(**{**base, **kw})


def _weights(cfg):
    return get_weights(new_model(cfg, load_manifest(cfg), seed=0))


def _message(cfg, node: int, ins) -> Message:
    set_local_task_identity()
    msg = train_message(_weights(cfg), *ins, node=node)
    msg.metadata.__dict__["_message_id"] = f"m{node}"
    return msg


def _context(node: int) -> Context:
    return Context(run_id=0, node_id=node, node_config={"partition-id": node}, state=RecordDict(), run_config={})


class Spy:
    """A client round that records its calls, then runs the real one."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args):
        self.calls += 1
        return client_update(*args)


def test_the_mounted_mod_answers_the_probe_without_calling_the_train_function(tiny):
    set_local_task_identity()
    spy = Spy()
    app = make_client_app(tiny, update=spy)
    probe = Message(probe_content(), dst_node_id=3, message_type="train")
    probe.metadata.__dict__["_message_id"] = "probe"
    reply = app(probe, _context(3))
    assert has_probe_marker(reply) and spy.calls == 0
    # without the mod the same train function answers the probe with an error, and no marker
    bare = ClientApp()
    bare.train()(TrainFunction(tiny, spy))
    with pytest.raises(Exception):  # noqa: B017 - no instructions: the train function itself fails
        bare(probe, _context(3))
    # and the module-level app `flwr run` loads has the mod too
    from client.app import app as module_app

    assert has_probe_marker(module_app(probe, _context(3)))


def test_a_private_reply_is_the_clipped_update_only_and_a_non_private_one_adds_metrics(tiny):
    ins = _ins()
    reply = make_client_app(tiny)(_message(tiny, 2, ins), _context(2))
    assert set(reply.content.keys()) == {"update"}
    weights = _weights(tiny)
    new, _ = client_update(tiny, 2, weights, *ins)
    expected = bound_update([n - w for n, w in zip(new, weights)], ins[0])
    assert all(np.array_equal(a, b) for a, b in zip(reply.content["update"].to_numpy_ndarrays(), expected))
    open_ins = _ins(private=False)
    reply = make_client_app(tiny)(_message(tiny, 2, open_ins), _context(2))
    assert set(reply.content.keys()) == {"update", "metrics"} and "train_loss" in reply.content["metrics"]


def test_the_train_function_returns_the_new_model_under_the_global_keys(tiny):
    """What any Flower train function returns: the new model ("arrays"), never an update or a clip."""
    ins = _ins()
    msg = _message(tiny, 4, ins)
    out = TrainFunction(tiny)(msg, _context(4))
    assert set(out.content.keys()) == {"arrays"}  # private: no metrics either
    assert list(out.content["arrays"].keys()) == list(msg.content["arrays"].keys())
    new, _ = client_update(tiny, 4, _weights(tiny), *ins)
    assert all(np.array_equal(a, b) for a, b in zip(out.content["arrays"].to_numpy_ndarrays(), new))


def test_an_injected_bound_is_the_mounted_mod(tiny):
    """The audit's seam: a UeDPMod with another bound replaces uedp_mod, in the app and in the in-process grid."""
    seen = []

    def doubled(delta, ins):
        seen.append(ins.round)
        return [2 * d for d in delta]

    ins = _ins(round=3)
    reply = make_client_app(tiny, mods=[UeDPMod(bound=doubled)])(_message(tiny, 1, ins), _context(1))
    weights = _weights(tiny)
    new, _ = client_update(tiny, 1, weights, *ins)
    assert seen == [3]
    got = reply.content["update"].to_numpy_ndarrays()
    assert all(np.allclose(g, 2 * (n - w)) for g, n, w in zip(got, new, weights))
    grid = LocalGrid(tiny, 8, mod=UeDPMod(bound=doubled))
    (answer,) = grid.send_and_receive([_message(tiny, 1, ins)])
    assert seen == [3, 3] and not answer.has_error()


def test_an_app_without_uedp_mod_is_refused():
    with pytest.raises(ValueError, match="uedp_mod"):
        make_client_app(mods=[])


def test_the_app_pickles_as_a_reference_and_its_config(tiny):
    """Ray ships the ClientApp with every message: the app's pickle is its RunConfig's plus a reference of a few
    hundred bytes, whatever mods Flower wrapped around its functions; Flower's own wrapping of the same functions
    and mod, pickled as it is, is larger (its closures travel by value)."""
    app = make_client_app(tiny)
    bound = len(pickle.dumps(tiny)) + 400
    assert len(cloudpickle.dumps(app)) <= bound
    assert len(cloudpickle.dumps(make_client_app())) <= 400  # the module-level app: no config bound
    plain = ClientApp(mods=[uedp_mod])
    plain.train()(TrainFunction(tiny))
    plain.query()(QueryFunction(tiny))
    assert len(cloudpickle.dumps(plain)) > bound
    # a process rebuilds it once, and the rebuilt app is the same app
    first, second = pickle.loads(cloudpickle.dumps(app)), pickle.loads(cloudpickle.dumps(app))
    assert first is second and isinstance(first, ProjectClientApp) and first.spec == app.spec


def test_the_in_process_grid_runs_the_app_whole_and_keeps_its_error_replies(tiny):
    """Errors name only the exception's type: a raising client round (through the mod), a failing node."""

    def broken(cfg, node, weights, ins, training):
        raise ValueError("the text of sentence 3 of user 1")

    set_local_task_identity()
    grid = LocalGrid(tiny, 8, client_fn=broken, failing=frozenset({2}))
    replies = grid.send_and_receive([_message(tiny, n, _ins()) for n in (1, 2)])
    assert [r.has_error() for r in replies] == [True, True]
    assert "ValueError" in replies[0].error.reason and "sentence" not in replies[0].error.reason
    assert grid.calls == 2 and grid.client_seconds == []
    probe = Message(probe_content(), dst_node_id=5, message_type="train")
    probe.metadata.__dict__["_message_id"] = "probe"
    (answer,) = grid.send_and_receive([probe])
    assert has_probe_marker(answer) and grid.client_seconds == []  # the probe is not a training message


def test_npy_headers_are_parsed_once_and_decoded_as_before(monkeypatch):
    """The mod path decodes the global and the new model: each distinct .npy header is parsed once (numpy's
    literal evaluation), the same view comes back, a bad header is still refused, and the memo is bounded."""
    from flwr.app import Array

    from client.app import model_record
    from uedp.privacy import replies

    parsed = []
    real = replies.HEADER_READERS[(1, 0)]
    monkeypatch.setitem(replies.HEADER_READERS, (1, 0), lambda fp: parsed.append(1) or real(fp))
    monkeypatch.setattr(replies, "PARSED_HEADERS", {})
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(4)]
    record = model_record(["a", "b"], arrays)
    for _ in range(3):
        got = [replies.decode_array(a) for a in record.values()]
        assert all(np.array_equal(g, x) and g.dtype == x.dtype for g, x in zip(got, arrays))
    assert len(parsed) == 2  # two headers, each parsed once
    assert all(a.data == Array(x).data for a, x in zip(record.values(), arrays))  # byte for byte np.save's
    short = Array(dtype="float32", shape=(2, 3), stype="numpy.ndarray", data=record["a"].data[:-4])
    assert replies.decode_array(short) is None and replies.decode_array(record["a"], (3, 2)) is None
    monkeypatch.setattr(replies, "PARSED_HEADERS_MAX", 2)
    for n in range(5):
        assert replies.decode_array(Array(np.zeros(n + 10))) is not None
    assert len(replies.PARSED_HEADERS) == 2


def test_the_mod_hands_the_train_function_its_reading_of_that_message_only(tiny):
    """`received(msg)`: inside the mod's call, the instructions and global arrays the mod read of that very
    message (read-only views of its buffers); None outside it and for another message object. The project's
    train function, called without the mod, reads the message itself and trains the same."""
    from uedp.flower.mod import received
    from uedp.protocol import RoundInstructions

    msg = _message(tiny, 1, _ins())
    seen = []

    def train(m, context):
        got, other = received(m), received(_message(tiny, 1, _ins()))
        seen.append((got, other))
        return TrainFunction(tiny)(m, context)

    with_mod = uedp_mod(msg, _context(1), train)
    (got, other), = seen
    assert other is None and received(msg) is None  # another message; after the call
    assert got.message is msg and got.instructions == RoundInstructions.of(msg)
    assert [a.shape for a in got.arrays] == [w.shape for w in _weights(tiny)]
    assert all(not a.flags.writeable for a in got.arrays)
    without = uedp_mod.reply(msg, got.instructions, got.arrays,
                             [TrainFunction(tiny)(msg, _context(1)).content.array_records["arrays"]
                              .to_numpy_ndarrays()], None)
    assert with_mod.content.array_records.keys() == without.content.array_records.keys()
    for key in with_mod.content.array_records:
        a = with_mod.content.array_records[key].to_numpy_ndarrays()
        b = without.content.array_records[key].to_numpy_ndarrays()
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
