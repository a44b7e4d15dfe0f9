"""What brings a Flower simulation round near an in-process one, checked by behaviour: the actors share the users
they encode (client/shared_users.py) and get exactly what a fresh read gives, never a stale entry, and the
simulated SuperLink's dispatcher hands each pushed message out promptly and once (runtime.simulate.
dispatch_promptly)."""

from __future__ import annotations

import os
import queue
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from client import update as client_update_module
from client.shared_users import SHARED_USERS_ENV, entry_key, read_entry, shared_user_cache, shared_user_data
from client.update import client_update
from tests.helpers import instructions, tiny_config
from uedp.models.base import get_weights
from uedp.pipeline import UserData, load_manifest, load_user_data, new_model, prepare

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A prepared run of 8 users (tests.helpers.tiny_config)."""
    prepare(cfg := tiny_config(tmp_path_factory.mktemp("shared")))
    return cfg


def _same(a: UserData, b: UserData) -> bool:
    ea, eb = a.encoded, b.encoded
    return (a.user == b.user and np.array_equal(a.sids, b.sids) and a.entities == b.entities
            and np.array_equal(a.stable_ids, b.stable_ids) and ea.ids.equal(eb.ids) and ea.mask.equal(eb.mask)
            and (ea.labels is None) == (eb.labels is None) and np.array_equal(ea.full_lengths, eb.full_lengths)
            and ea.max_len == eb.max_len and ea.ids.dtype == eb.ids.dtype)


class Loads:
    """load_user_data, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args, **kwargs) -> UserData:
        self.calls += 1
        return load_user_data(*args, **kwargs)


def test_a_shared_entry_equals_a_fresh_encoding_and_spares_the_second_process_the_work(tiny):
    with shared_user_cache() as directory:
        assert os.environ[SHARED_USERS_ENV] == str(directory)
        assert directory.stat().st_mode & 0o077 == 0  # this user's processes only
        first, second = Loads(), Loads()
        for deidentified in (False, True):
            written = shared_user_data(tiny, 2, deidentified, first)  # the first actor: encodes and writes
            read = shared_user_data(tiny, 2, deidentified, second)  # another actor: reads it back
            assert _same(read, load_user_data(tiny, 2, deidentified=deidentified))
            assert _same(written, read)
        assert (first.calls, second.calls) == (2, 0)
        assert len(list(directory.iterdir())) == 2  # one entry per (user, de-identification)
        assert shared_user_data(tiny, 3, False, second).user != read.user and second.calls == 1  # per user
    assert not directory.exists() and SHARED_USERS_ENV not in os.environ


def test_a_client_round_on_a_shared_entry_trains_exactly_like_one_on_its_own_read(tiny):
    weights = get_weights(new_model(tiny, load_manifest(tiny), seed=0))
    ins = instructions(round=1, mechanism="user_dp", q_e=0.5, q_s=0.5, k_cap=0, m_max=6, slot=-1, beta=0.5,
                       w_u=1.0, private=True, seed=7)
    client_update_module._user_data.cache_clear()
    own, _ = client_update(tiny, 4, weights, *ins)
    with shared_user_cache():
        for _ in range(2):  # written by one process, then read back by a process with an empty cache of its own
            client_update_module._user_data.cache_clear()
            shared, _ = client_update(tiny, 4, weights, *ins)
            assert all(np.array_equal(a, b) for a, b in zip(own, shared))
    client_update_module._user_data.cache_clear()


def test_a_changed_corpus_tokenizer_or_config_never_hits_an_old_entry(tiny, tmp_path):
    manifest = load_manifest(tiny)
    key = entry_key(tiny, 1, False)
    assert entry_key(tiny, 1, False) == key
    assert len({key, entry_key(tiny, 0, False), entry_key(tiny, 1, True)}) == 3
    for path in (manifest.tokenizer, manifest.annotations, Path(manifest.corpus_dir) / "sentences.parquet"):
        st = os.stat(path)
        try:
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # the file was rewritten
            assert entry_key(tiny, 1, False) != key, path
        finally:
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert entry_key(tiny, 1, False) == key
    other = tiny_config(Path(tiny.federation.out_dir), task={"max_len": 12})
    prepare(other)
    assert entry_key(other, 1, False) != entry_key(tiny, 1, False)  # another encoding setting


def test_outside_a_simulation_nothing_is_shared_and_a_torn_entry_is_a_miss(tiny, tmp_path, monkeypatch):
    monkeypatch.delenv(SHARED_USERS_ENV, raising=False)
    loads = Loads()
    shared_user_data(tiny, 0, False, loads)
    shared_user_data(tiny, 0, False, loads)
    assert loads.calls == 2
    monkeypatch.setenv(SHARED_USERS_ENV, str(tmp_path / "absent"))  # an actor on another machine
    shared_user_data(tiny, 0, False, loads)
    assert loads.calls == 3 and not (tmp_path / "absent").exists()
    monkeypatch.setenv(SHARED_USERS_ENV, str(tmp_path))
    (tmp_path / entry_key(tiny, 0, False)).write_bytes(b"\x80\x05torn")
    assert read_entry(tmp_path, entry_key(tiny, 0, False)) is None
    assert _same(shared_user_data(tiny, 0, False, loads), load_user_data(tiny, 0)) and loads.calls == 4
    assert read_entry(tmp_path, entry_key(tiny, 0, False)) is not None  # rewritten whole


def test_the_dispatcher_hands_out_each_pending_message_promptly_and_once(monkeypatch):
    from flwr.server.superlink.fleet.vce import vce_api

    from runtime.simulate import SIMULATION_DISPATCH_INTERVAL, dispatch_promptly

    monkeypatch.setattr(vce_api, "add_messages_to_queue", vce_api.add_messages_to_queue)  # restored after
    dispatch_promptly()
    dispatch_promptly()  # idempotent
    dispatch = vce_api.add_messages_to_queue
    assert dispatch.prompt_by_uedp and SIMULATION_DISPATCH_INTERVAL < 0.1
    asked: list[int] = []

    class State:  # Flower's in-memory link state, as far as the dispatcher sees it
        def __init__(self) -> None:
            self.lock = threading.RLock()
            self.message_ins_store: dict[str, SimpleNamespace] = {}

        def get_message_ins(self, node_id, limit):
            asked.append(node_id)
            out = []
            with self.lock:
                for m in self.message_ins_store.values():
                    if len(out) < limit and m.metadata.dst_node_id == node_id and not m.metadata.delivered_at:
                        m.metadata.delivered_at = "delivered"
                        out.append(m)
            return out

    class Stop(threading.Event):  # records how long the dispatcher waits between its passes
        waits: list[float] = []

        def wait(self, timeout=None):
            self.waits.append(timeout)
            return super().wait(timeout)

    state, out, stop = State(), queue.Queue(), Stop()
    nodes = {n: n for n in (11, 5, 8, 2)}
    thread = threading.Thread(target=dispatch, args=(state, out, nodes, stop))
    thread.start()
    try:
        time.sleep(0.05)
        assert asked == []  # nothing pending: no node is asked
        with state.lock:
            for i, dst in enumerate((8, 2)):
                state.message_ins_store[f"m{i}"] = SimpleNamespace(
                    metadata=SimpleNamespace(dst_node_id=dst, delivered_at=""))
        got = [out.get(timeout=5).metadata.dst_node_id for _ in range(2)]
        time.sleep(0.05)
        assert got == [8, 2] and out.empty() and asked == [8, 2]  # in the nodes' order, each once
    finally:
        stop.set()
        thread.join(timeout=5)
    assert stop.waits and set(stop.waits) == {SIMULATION_DISPATCH_INTERVAL}  # Flower's own pass waits 0.1 s
