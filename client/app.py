"""The ClientApp: the data owner's side of a round (client/update.py) behind Flower's Message API.

Per query message (strategy=dp_bart): client/rewrite.py rewrites this owner's sentences under local DP and
replies with the rewrites only. Per training message: decode the instructions (uedp.protocol), run
`client_update` on this node's data
(federation.data = "corpus": user partition-id of the run's corpus; "owners": only the file node config `data-
path` names, encoded with the tokenizer the message carries), and reply with the update only (plus training
metrics in non-private runs). In private runs nothing about the round is logged.

`make_client_app(cfg)` binds a RunConfig (Hydra entry point, tests); the module-level `app` reads the config
from `context.run_config` (`flwr run`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp

from client.rewrite import client_rewrite
from client.update import client_update
from uedp.config import RunConfig
from uedp.owners import shipped_tokenizer
from uedp.protocol import REWRITES_RECORD, TOKENIZER_RECORD, TrainInstructions, reply_content

# A client round: (cfg, partition id, global weights, instructions) -> (update, training metrics)
ClientFn = Callable[[RunConfig, int, list[np.ndarray], TrainInstructions], tuple[list[np.ndarray], dict[str, float]]]


def inject_fault(fault: str) -> None:
    """Fault injection for the fault-tolerance tests (runtime/federation.py), set per node with node
    config `fault`: "raise" (the ClientApp raises: an error reply) or "hang:SECONDS" (it sleeps past the
    round time-out: a missing reply). Empty (the default): nothing. Either way the server treats the
    user as a zero contribution under the fixed denominator, so the privacy accounting is unchanged."""
    if not fault:
        return
    kind, _, arg = fault.partition(":")
    if kind == "raise":
        raise RuntimeError("injected fault (node config fault='raise')")
    if kind == "hang":
        time.sleep(float(arg or 3600))
        return
    raise ValueError(f"node config fault={fault!r}: expected 'raise' or 'hang:SECONDS'")


class _Laps:
    """Benchmark-only timing of one training message (make_client_app's `timings_dir`): seconds spent
    decoding the message, in client_update, and encoding the reply, the message's CPU seconds and the
    process's CPU seconds so far; one JSON line per message in TIMINGS_DIR/client-PID.jsonl. Durations and
    the round number only: nothing about the user or the data."""

    def __init__(self, directory: str, sink: Callable[[dict[str, float]], None] | None = None) -> None:
        self.directory = directory
        self.sink = sink
        self.laps: dict[str, float] = {}
        self.t = time.perf_counter()
        self.cpu = time.thread_time()

    def lap(self, name: str, **extra: float) -> None:
        now = time.perf_counter()
        self.laps[name] = now - self.t
        self.laps.update(extra)
        self.t = now

    def write(self) -> None:
        self.laps["cpu"] = time.thread_time() - self.cpu  # this message's CPU seconds in the app
        if self.sink is not None:  # the in-process grid keeps them in memory (its process is the server's:
            self.sink(dict(self.laps))  # no separate client process CPU)
            return
        self.laps["process_cpu"] = time.process_time()  # the process's CPU seconds so far (all its threads)
        with open(Path(self.directory) / f"client-{os.getpid()}.jsonl", "a") as f:
            f.write(json.dumps(self.laps) + "\n")


@dataclass(frozen=True)
class TrainHandler:
    """The train function: decode the instructions, run client_update, reply with the update only.

    A module-level class rather than a closure, because the Ray simulation pickles the ClientApp with every
    message: cloudpickle sends a closure by value (with a scan of its globals' submodules, ~2 ms a message
    here), an instance of this class by reference plus its few fields. `timings_dir` (or `lap_sink`, which
    receives each message's laps instead of a file: the in-process grid): benchmark only. `update`: the
    client round (default client.update.client_update; the audit injects a broken control, the in-process
    grid's tests a failing one): called as update(cfg, partition_id, weights, ins) on the run's corpus and
    update.owner(cfg, data_path, tokenizer, weights, ins, identity=node id) on an owner's file."""

    cfg: RunConfig | None = None
    timings_dir: str = ""
    update: ClientFn = client_update
    lap_sink: Callable[[dict[str, float]], None] | None = None

    def __call__(self, msg: Message, context: Context) -> Message:
        timed = self.timings_dir or self.lap_sink is not None
        laps = _Laps(self.timings_dir, self.lap_sink) if timed else None
        torch.set_num_threads(1)
        run_cfg = self.cfg if self.cfg is not None else RunConfig.from_flat(dict(context.run_config))
        inject_fault(str(context.node_config.get("fault", "")))
        ins = TrainInstructions.from_record(msg.content["config"])
        weights = msg.content["arrays"].to_numpy_ndarrays()
        if laps:
            laps.lap("decode", round=ins.round)
        data_path = str(context.node_config.get("data-path", ""))
        if run_cfg.owners:  # this owner's own file, the tokenizer the server shipped
            if not data_path:
                raise ValueError("federation.data = owners: start this SuperNode with node config data-path")
            if not hasattr(self.update, "owner"):
                raise TypeError(f"federation.data = owners needs a client round with .owner, got {self.update!r}")
            tokenizer = shipped_tokenizer(dict(msg.content[TOKENIZER_RECORD]))
            update, metrics = self.update.owner(run_cfg, data_path, tokenizer, weights, ins,  # type: ignore[attr-defined]
                                                identity=str(context.node_id))
        else:
            update, metrics = self.update(run_cfg, int(context.node_config["partition-id"]), weights, ins)
        if laps:
            laps.lap("compute")
        reply = Message(reply_content(update, metrics), reply_to=msg)
        if laps:
            laps.lap("encode")
            laps.write()
        return reply


@dataclass(frozen=True)
class QueryHandler:
    """The query function (strategy=dp_bart): rewrite this owner's sentences under local DP; reply with the
    rewrites only. A module-level class for the same reason as TrainHandler."""

    cfg: RunConfig | None = None

    def __call__(self, msg: Message, context: Context) -> Message:
        torch.set_num_threads(1)
        run_cfg = self.cfg if self.cfg is not None else RunConfig.from_flat(dict(context.run_config))
        inject_fault(str(context.node_config.get("fault", "")))
        partition = context.node_config.get("partition-id")
        record = client_rewrite(run_cfg, partition_id=None if partition is None else int(partition),
                                data_path=str(context.node_config.get("data-path", "")))
        return Message(RecordDict({REWRITES_RECORD: record}), reply_to=msg)


def make_client_app(cfg: RunConfig | None = None, *, timings_dir: str = "") -> ClientApp:
    """The ClientApp bound to `cfg` (None: read it from `context.run_config`). `timings_dir` (benchmark only,
    studies/benchmark.py): time each training message's decoding, client_update and reply encoding into
    that folder; empty (every real run): no timing, nothing written."""
    app = ClientApp()
    app.train()(TrainHandler(cfg, timings_dir))
    app.query()(QueryHandler(cfg))
    return app


app = make_client_app()
