"""Flower's own `Strategy.start` drives the component in the Flower simulation (Ray): a bare ServerApp that
wires `uedp.flower.UserEntityDP` around FedAvg by hand runs uedp, user_dp and noiseless FedAvg one after the
other in ONE simulation (one Ray start), and each equals the project's app run in process at the same fixed
seed: the same places sampled each round, the same ledger, the same final weights.

The simulation gives its nodes random ids and partition-ids in creation order; the places are its node ids,
sorted. The in-process twin runs the project's app (run_server) on a grid with the SAME node ids and the same
node-to-partition map (recorded by the simulation's ClientApp), so both sample the same places with the same
data behind them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from client.app import TrainFunction
from runtime.local_grid import LocalGrid, set_local_task_identity
from server.app import run_server
from tests.helpers import tiny_config
from uedp.flower.mod import uedp_mod
from uedp.flower.store import RunStore
from uedp.flower.strategy import MissingClientMod, UserEntityDP
from uedp.models.base import get_weights
from uedp.pipeline import new_model, prepare
from uedp.training import LocalTraining

MECHANISMS = ("uedp", "user_dp", "fedavg")
SEED = 9


class MappedGrid(LocalGrid):
    """The in-process grid with the simulation's node ids and node-to-partition map."""

    def __init__(self, cfg: Any, partition_of: dict[int, int]) -> None:
        super().__init__(cfg, len(partition_of))
        self.partition_of = partition_of

    def get_node_ids(self):
        return sorted(self.partition_of)

    def context(self, node: int) -> Context:
        return Context(run_id=0, node_id=node, node_config={"partition-id": self.partition_of[node]},
                       state=RecordDict(), run_config={})


class Recording:
    """The simulation's ServerApp grid, recording each round's destinations (by group id)."""

    def __init__(self, grid: Grid) -> None:
        self.grid, self.sent = grid, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.grid, name)

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        self.sent.extend((int(m.metadata.group_id), m.metadata.dst_node_id) for m in messages)
        return self.grid.send_and_receive(messages, timeout=timeout)


def _bare_server_app(cfg: Any, out: Path) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        import dataclasses
        import time

        while len(list(grid.get_node_ids())) < 8:  # a simulation's nodes register after the ServerApp starts
            time.sleep(0.2)
        results = {}
        for mechanism in MECHANISMS:
            run_cfg = dataclasses.replace(cfg, strategy=dataclasses.replace(cfg.strategy, name=mechanism))
            manifest = prepare(run_cfg)
            arrays = ArrayRecord(get_weights(new_model(run_cfg, manifest, seed=SEED)))
            dp = UserEntityDP.from_run_config(  # as a Flower app reads its run config's uedp. keys
                FedAvg(), {f"uedp.{k}": v for k, v in run_cfg.to_flat().items()}, places=len(manifest.users),
                num_rounds=run_cfg.federation.rounds, store=RunStore(out / mechanism))
            rec = Recording(grid)
            result = dp.start(rec, arrays, run_cfg.federation.rounds,
                              train_config=ConfigRecord(LocalTraining.from_config(run_cfg.train).to_record()))
            np.save(out / mechanism / "weights.npy", np.concatenate([a.ravel() for a in
                                                                    result.arrays.to_numpy_ndarrays()]))
            results[mechanism] = {"sent": rec.sent, "nodes": sorted(grid.get_node_ids())}
        (out / "bare.json").write_text(json.dumps(results))

    return app


def _client_app(cfg: Any, out: Path) -> ClientApp:
    """The project's train function with uedp_mod mounted, recording which partition each node id holds."""
    app = ClientApp(mods=[uedp_mod])
    handler = TrainFunction(cfg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        with open(out / f"nodes-{os.getpid()}.txt", "a") as f:
            f.write(f"{context.node_id} {context.node_config['partition-id']}\n")
        return handler(msg, context)

    return app


@pytest.mark.e2e
def test_flowers_start_in_the_simulation_equals_the_projects_app_in_process(tmp_path):
    from flwr.simulation import run_simulation

    from runtime.simulate import _quiet_libraries, index_pending_messages

    cfg = tiny_config(tmp_path / "unused", privacy={"seed": SEED, "q_u": 0.6},
                      federation={"rounds": 2, "eval_every": 2})
    prepare(cfg)
    out = tmp_path / "sim"
    out.mkdir()
    _quiet_libraries()
    index_pending_messages()
    run_simulation(server_app=_bare_server_app(cfg, out), client_app=_client_app(cfg, out), num_supernodes=8,
                   backend_config={"client_resources": {"num_cpus": 1},
                                   "init_args": {"num_cpus": 2, "include_dashboard": False}})
    bare = json.loads((out / "bare.json").read_text())
    partition_of = {int(n): int(p) for f in out.glob("nodes-*.txt") for n, p in
                    (line.split() for line in f.read_text().splitlines())}
    set_local_task_identity()
    for mechanism in MECHANISMS:
        import dataclasses

        nodes = bare[mechanism]["nodes"]
        assert set(partition_of) <= set(nodes)
        mapping = {n: partition_of.get(n, -1) for n in nodes}
        if -1 in mapping.values():
            free = sorted(set(range(8)) - set(partition_of.values()))
            for n in [n for n, p in mapping.items() if p == -1]:
                mapping[n] = free.pop(0)  # a node never sampled: its data never mattered
        run_cfg = dataclasses.replace(cfg, strategy=dataclasses.replace(cfg.strategy, name=mechanism),
                                      federation=dataclasses.replace(cfg.federation,
                                                                     out_dir=str(tmp_path / mechanism)))
        grid = MappedGrid(run_cfg, mapping)
        sent: list[tuple[int, int]] = []
        original = grid.send_and_receive

        def recording(messages, *, timeout=None, _sent=sent, _original=original):
            messages = list(messages)
            _sent.extend((int(m.metadata.group_id), m.metadata.dst_node_id) for m in messages)
            return _original(messages, timeout=timeout)

        grid.send_and_receive = recording  # type: ignore[method-assign]
        run_server(grid, run_cfg, stream=open(os.devnull, "w"))  # noqa: SIM115
        assert [tuple(x) for x in bare[mechanism]["sent"]] == sent, mechanism  # places and destinations
        ours = json.loads((tmp_path / mechanism / "ledger.json").read_text())["rounds"]
        theirs = json.loads((out / mechanism / "ledger.json").read_text())["rounds"]
        assert [{k: v for k, v in r.items() if k not in ("prev", "hash")} for r in ours] == \
            [{k: v for k, v in r.items() if k not in ("prev", "hash")} for r in theirs]
        want = np.concatenate([np.asarray(w).ravel() for w in
                               torch.load(tmp_path / mechanism / "model.pt", weights_only=False)["weights"]])
        # the same arithmetic on the same data in another process (one torch thread each): equal, up to what a
        # different BLAS code path in a Ray worker could change (float32 rounding of the last few steps)
        np.testing.assert_allclose(np.load(out / mechanism / "weights.npy"), want, rtol=0, atol=1e-6)


@pytest.mark.e2e
def test_a_clientapp_without_the_mod_is_refused_in_flowers_simulation(tmp_path):
    """Flower's own simulation (Ray, InMemoryGrid, which gives each pushed message its own id): a ClientApp
    without uedp_mod, whose train function fails on a message without a model as most do, is refused by the
    probe before round 1: nothing charged. (The probe's answers are tied to the ids the grid gave.)"""
    from flwr.simulation import run_simulation

    from runtime.simulate import _quiet_libraries, index_pending_messages

    cfg = tiny_config(tmp_path / "unused", federation={"rounds": 1})
    manifest = prepare(cfg)
    out = tmp_path / "run"
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        dp = UserEntityDP.from_run_config(FedAvg(), {f"uedp.{k}": v for k, v in cfg.to_flat().items()},
                                          places=len(manifest.users), num_rounds=1, store=RunStore(out))
        try:
            dp.start(grid, ArrayRecord(get_weights(new_model(cfg, manifest, seed=0))), 1)
        except MissingClientMod as exc:
            (tmp_path / "refused.txt").write_text(str(exc))

    client = ClientApp()  # no mods: the mistake

    @client.train()
    def train(msg: Message, context: Context) -> Message:
        arrays = msg.content["arrays"]  # a probe has none: KeyError, an error reply
        return Message(RecordDict({"arrays": arrays}), reply_to=msg)

    _quiet_libraries()
    index_pending_messages()
    run_simulation(server_app=server, client_app=client, num_supernodes=len(manifest.users),
                   backend_config={"client_resources": {"num_cpus": 1},
                                   "init_args": {"num_cpus": 2, "include_dashboard": False}})
    assert "uedp_mod" in (tmp_path / "refused.txt").read_text()
    assert not (out / "ledger.json").exists()
