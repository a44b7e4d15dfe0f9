"""What cut the Flower simulation's per-message cost (studies/benchmark.py), checked by behaviour:
the per-process user cache holds a whole population, the ClientApp pickles without by-value code (Ray ships
it with every message), and the benchmark's client timing (a mod in studies/timing_mod.py) writes durations
only, and only in the app the benchmark mounts it in."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from flwr.app import Context, Message, RecordDict

from client import update as client_update_module
from client.app import make_client_app
from client.update import client_update
from runtime.local_grid import LocalGrid, set_local_task_identity
from tests.helpers import instructions, tiny_config, train_message
from uedp.flower.mod import bound_update
from uedp.models.base import get_weights
from uedp.pipeline import load_manifest, new_model, prepare


def _ins(**kw):
    """(RoundInstructions, LocalTraining) of a user-level DP round."""
    base = dict(round=1, mechanism="user_dp", q_e=0.5, q_s=0.5, k_cap=0, m_max=6, slot=-1, beta=0.5, w_u=1.0,
                private=True, seed=7)
    base.update(kw)
    return instructions(**base)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # as the ClientApp and the in-process runner


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cfg = tiny_config(tmp_path_factory.mktemp("run"))
    prepare(cfg)
    return cfg


def _message(cfg, node: int, ins) -> Message:
    set_local_task_identity()
    weights = get_weights(new_model(cfg, load_manifest(cfg), seed=0))
    msg = train_message(weights, *ins, node=node)
    msg.metadata.__dict__["_message_id"] = f"m{node}"  # as the grid sets it when pushing
    return msg


def _context(node: int) -> Context:
    return Context(run_id=0, node_id=node, node_config={"partition-id": node}, state=RecordDict(),
                   run_config={})


def test_a_process_keeps_every_user_of_a_population_over_the_old_64(tmp_path):
    """An actor of a 2-actor simulation serves ~100 of 200 users: with an LRU of 64 nearly every round re-read
    and re-encoded each sampled user's data. Now a second pass over 80 users is served from the cache."""
    cfg = tiny_config(tmp_path, dataset={"options": {"num_users": 80, "min_sentences": 4, "max_sentences": 6}})
    prepare(cfg)
    weights = get_weights(new_model(cfg, load_manifest(cfg), seed=0))
    cache = client_update_module._user_data
    cache.cache_clear()
    for pid in range(80):
        client_update(cfg, pid, weights, *_ins())
    assert cache.cache_info().misses == 80
    for pid in range(80):
        client_update(cfg, pid, weights, *_ins())
    assert cache.cache_info().misses == 80 and cache.cache_info().hits == 80
    assert cache.cache_info().maxsize >= 2500  # an actor's share of the largest population run (5,000 users)


def test_a_cached_user_trains_exactly_like_a_fresh_read(tiny):
    weights = get_weights(new_model(tiny, load_manifest(tiny), seed=0))
    client_update_module._user_data.cache_clear()
    fresh, _ = client_update(tiny, 3, weights, *_ins())
    cached, _ = client_update(tiny, 3, weights, *_ins())
    assert client_update_module._user_data.cache_info().hits >= 1
    assert all(np.array_equal(a, b) for a, b in zip(fresh, cached))


def test_the_client_app_pickles_without_by_value_code_and_still_trains(tiny):
    """Ray pickles the ClientApp with every message; its handlers are module-level classes, so even the
    standard pickle (which cannot send code) round-trips it, and the restored app replies as the original."""
    app = make_client_app(tiny)
    restored = pickle.loads(pickle.dumps(app))
    ins = _ins()
    reply = restored(_message(tiny, 2, ins), _context(2))
    weights = get_weights(new_model(tiny, load_manifest(tiny), seed=0))
    new, _ = client_update(tiny, 2, weights, *ins)
    direct = bound_update([n - w for n, w in zip(new, weights)], ins[0])  # what the app's client mod does
    got = reply.content["update"].to_numpy_ndarrays()
    assert set(reply.content.keys()) == {"update"}  # private: the update only
    assert all(np.array_equal(a, b) for a, b in zip(got, direct))


def test_client_timing_only_in_the_timed_app_and_only_durations(tiny, tmp_path, monkeypatch):
    from studies.timing_mod import timed_client_app

    monkeypatch.chdir(tmp_path)
    plain = make_client_app(tiny)(_message(tiny, 1, _ins()), _context(1))
    assert list(tmp_path.iterdir()) == []  # every real run: nothing written
    timings = tmp_path / "timings"
    timings.mkdir()
    app = pickle.loads(pickle.dumps(timed_client_app(tiny, directory=str(timings))))  # as Ray ships it
    timed = app(_message(tiny, 1, _ins(round=4)), _context(1))
    (line,) = [x for f in timings.iterdir() for x in f.read_text().splitlines()]
    record = json.loads(line)
    assert set(record) == {"decode", "compute", "encode", "round", "cpu", "process_cpu"}
    assert record["round"] == 4 and all(isinstance(v, (int, float)) and v >= 0 for v in record.values())
    assert record["compute"] > 0  # the client round was timed, inside the mods
    # the timed app replies as the plain one: the update only (private), the same arrays (round 4's seed too)
    assert set(timed.content.keys()) == set(plain.content.keys()) == {"update"}
    same = make_client_app(tiny)(_message(tiny, 1, _ins(round=4)), _context(1))
    assert all(np.array_equal(a, b) for a, b in zip(timed.content["update"].to_numpy_ndarrays(),
                                                    same.content["update"].to_numpy_ndarrays()))


def test_local_grid_runs_the_timed_app_and_times_each_answered_message(tiny):
    from studies.timing_mod import timed_client_app

    set_local_task_identity()
    laps: list[dict] = []
    grid = LocalGrid(tiny, 8, failing=frozenset({5}), app=timed_client_app(tiny, sink=laps.append))
    replies = grid.send_and_receive([_message(tiny, n, _ins(round=2)) for n in (0, 5, 6)])
    assert [r.has_error() for r in replies] == [False, True, False]
    assert len(laps) == 2 == len(grid.client_seconds)
    assert all(set(lap) == {"round", "decode", "compute", "encode", "cpu"} and lap["round"] == 2
               for lap in laps)
    assert all(lap["decode"] + lap["compute"] + lap["encode"] <= s for lap, s in zip(laps, grid.client_seconds))
    with pytest.raises(ValueError, match="either app or client_fn"):
        LocalGrid(tiny, 8, app=timed_client_app(tiny, sink=laps.append), client_fn=lambda *a: None)


def test_the_benchmark_table_breaks_a_round_down_and_keeps_the_ratio_row():
    from studies.benchmark import BREAKDOWN, rounds_tables

    client = {"sentences": 10, "steps": 2, "client_update_s": 0.01, "plain_pytorch_s": 0.02, "ratio": 0.5}
    pieces = {key: 0.1 for key, _, _ in BREAKDOWN} | {"clients": 40.0}
    rounds = {"rounds": 6, "flower_round_s": 1.0, "flower_first_round_s": 9.0, "local_round_s": 0.8,
              "client_compute_per_round_s": 0.5, "clients_per_round": 40.0,
              "payload": {"to_record_s": 1e-4, "to_numpy_s": 2e-4, "payload_bytes": 9e5},
              "flower_breakdown": pieces, "local_breakdown": pieces}
    text = rounds_tables(client, rounds)
    assert "| round through Flower simulation (median, rounds 2..6) | 1.00 | 1.25x in-process |" in text
    for _, label, _ in BREAKDOWN:
        assert f"| {label} |" in text


def test_the_simulated_superlink_skips_nodes_without_messages_and_still_delivers_each_once():
    """experiments.simulate.index_pending_messages: a node with no undelivered message gets [] without Flower's
    per-message validation; a node with one gets Flower's own answer, once."""
    import threading
    from types import SimpleNamespace

    from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState

    from runtime.simulate import index_pending_messages

    calls = []

    def flower_original(self, node_id, limit, *, run_id=None):  # what Flower's method does, minus validation
        calls.append(node_id)
        out = [m for m in self.message_ins_store.values()
               if m.metadata.dst_node_id == node_id and m.metadata.delivered_at == ""][:limit]
        for m in out:
            m.metadata.delivered_at = "now"
        return out

    saved = InMemoryLinkState.get_message_ins
    try:
        InMemoryLinkState.get_message_ins = flower_original
        index_pending_messages()
        index_pending_messages()  # idempotent: wraps once
        patched = InMemoryLinkState.get_message_ins
        assert patched is not flower_original and patched.indexed_by_uedp
        state = SimpleNamespace(lock=threading.RLock(), message_ins_store={})

        def msg(dst):
            return SimpleNamespace(metadata=SimpleNamespace(dst_node_id=dst, delivered_at=""))

        state.message_ins_store.update({"a": msg(3), "b": msg(7)})
        got = {n: patched(state, n, 1) for n in range(10)}
        assert calls == [3, 7]  # only the nodes with a message reached Flower's method
        assert [len(got[n]) for n in range(10)] == [0, 0, 0, 1, 0, 0, 0, 1, 0, 0]
        assert all(patched(state, n, 1) == [] for n in range(10))  # delivered once
        state.message_ins_store["c"] = msg(5)  # a new message is seen at once
        assert len(patched(state, 5, 1)) == 1 and calls == [3, 7, 5]
    finally:
        InMemoryLinkState.get_message_ins = saved


def test_the_lora_benchmark_trains_only_the_adapters_both_ways(tmp_path, one_torch_thread):
    """`python -m experiments.benchmark --only lora` at a tiny size: the checkpoint it saves loads as model hf,
    and both loops train the same adapters (ours and the plain one each change only the trainable weights)."""
    from studies.benchmark import bench_lora, lora_config, lora_table
    from uedp.pipeline import new_model, prepare

    cfg = tiny_config(tmp_path / "run")
    small = {"rank": 2, "base": '{"n_layer": 1, "n_embd": 16, "n_head": 2}'}
    lora = lora_config(cfg, tmp_path / "base", **small)
    model = new_model(lora, prepare(lora), seed=0)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert 0 < trainable < sum(p.numel() for p in model.parameters()) / 2
    result = bench_lora(cfg, tmp_path / "base2", 1, **small)
    assert result["steps"] > 0 and result["client_update_s"] > 0 and result["plain_pytorch_s"] > 0
    assert "LoRA client update" in lora_table(result)
