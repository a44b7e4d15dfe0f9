"""An in-process stand-in for Flower's Grid: messages are handled by calling the client's update function
directly, one after the other, in this process. Same strategy, same server loop, same client code as a
Flower run, without Ray or gRPC: used to tune defaults quickly and, side by side with a Flower
simulation, to measure Flower's round overhead (experiments/benchmark.py).

Node ids are partition ids. Each message is answered by `client_fn` (default: the real client round,
client.update.client_update; the audit passes a broken control). A node listed in `failing` raises (like
a crashing client) and comes back as an error reply; so does any exception the client code raises (as in
Flower, where a raising ClientApp yields an error reply and the round goes on). Only the exception's type
is kept: its message could hold data.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from flwr.app import Message, RecordDict

from client.rewrite import client_rewrite
from client.update import client_update
from server.setup import Components
from uedp.config import RunConfig
from uedp.owners import shipped_tokenizer
from uedp.protocol import REWRITES_RECORD, TOKENIZER_RECORD, TrainInstructions, reply_content

ClientFn = Callable[[RunConfig, int, list[np.ndarray], TrainInstructions], tuple[list[np.ndarray], dict[str, float]]]


@dataclass
class LocalReply:
    content: RecordDict
    error: str | None = None

    def has_error(self) -> bool:
        return self.error is not None


@dataclass
class LocalGrid:
    cfg: RunConfig
    num_nodes: int
    failing: frozenset[int] = frozenset()
    client_fn: ClientFn = client_update
    data_paths: Sequence[str] = ()  # federation.data = owners: node i reads only data_paths[i]
    calls: int = 0
    client_seconds: list[float] = field(default_factory=list)  # per answered training message, in this process
    # per answered training message: {"round", "decode", "compute", "encode", "cpu"} seconds (the benchmark's)
    client_laps: list[dict[str, float]] = field(default_factory=list)

    def get_node_ids(self) -> Iterable[int]:
        return range(len(self.data_paths) if self.data_paths else self.num_nodes)

    def _answer(self, node: int, msg: Message, ins: TrainInstructions, laps: dict[str, float]
                ) -> tuple[list, dict[str, float]]:
        t0 = time.perf_counter()
        weights = msg.content["arrays"].to_numpy_ndarrays()
        t1 = time.perf_counter()
        laps["decode"] = t1 - t0
        if not self.data_paths:
            out = self.client_fn(self.cfg, node, weights, ins)
        else:
            tokenizer = shipped_tokenizer(dict(msg.content[TOKENIZER_RECORD]))  # as client/app.py does
            out = client_update.owner(self.cfg, self.data_paths[node], tokenizer, weights, ins, identity=str(node))
        laps["compute"] = time.perf_counter() - t1
        return out

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[LocalReply]:
        replies = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            self.calls += 1
            if node in self.failing:
                replies.append(LocalReply(RecordDict(), error="client raised"))
                continue
            t0, cpu0 = time.perf_counter(), time.thread_time()
            if msg.metadata.message_type == "query":  # strategy=dp_bart: the owner's rewrites (client/rewrite.py)
                try:
                    record = client_rewrite(self.cfg, partition_id=None if self.data_paths else node,
                                            data_path=self.data_paths[node] if self.data_paths else "")
                except Exception as exc:
                    replies.append(LocalReply(RecordDict(), error=f"client raised {type(exc).__name__}"))
                    continue
                replies.append(LocalReply(RecordDict({REWRITES_RECORD: record})))
                continue
            ins = TrainInstructions.from_record(msg.content["config"])
            laps: dict[str, float] = {"round": ins.round}
            try:
                update, metrics = self._answer(node, msg, ins, laps)
            except Exception as exc:  # as in Flower: a raising ClientApp is an error reply, the round goes on
                replies.append(LocalReply(RecordDict(), error=f"client raised {type(exc).__name__}"))
                continue
            t1 = time.perf_counter()
            replies.append(LocalReply(reply_content(update, metrics)))
            laps["encode"] = time.perf_counter() - t1
            laps["cpu"] = time.thread_time() - cpu0
            self.client_seconds.append(time.perf_counter() - t0)
            self.client_laps.append(laps)
        return replies


def set_local_task_identity() -> None:
    """Building a flwr Message outside a running app needs a task identity (run 0, server node 0)."""
    from flwr.supercore.task_identity import TaskIdentity

    if TaskIdentity._run_id is None:
        TaskIdentity.run_id = 0
        TaskIdentity.node_id = 0
        TaskIdentity.task_id = 0


def run_local(cfg: RunConfig, *, components: Components | None = None, **grid_options) -> dict:
    """run_server over a LocalGrid with one node per participating user (`grid_options`: LocalGrid's
    failing, client_fn, data_paths; `components`: the server's injected parts, see server.setup.Components).
    With federation.data = owners the nodes are the owners whose files `data_paths` lists, and this process
    prepares no corpus."""
    from server.app import run_server
    from uedp.pipeline import prepare

    set_local_task_identity()
    import torch

    torch.set_num_threads(1)  # small per-client models: threads only contend (as in the Flower client)
    nodes = cfg.federation.num_nodes if cfg.federation.data == "owners" else len(prepare(cfg).users)
    return run_server(LocalGrid(cfg, nodes, **grid_options), cfg, components=components)
