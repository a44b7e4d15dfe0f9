"""The ClientApp: the data owner's side of a round (client/update.py) behind Flower's Message API, with UeDP's
client mod (uedp.flower.mod) around it.

Per query message (strategy=dp_bart): client/rewrite.py rewrites this owner's sentences under local DP and
replies with the rewrites only. Per training message: decode the round's instructions ("uedp" record) and
local training settings ("config" record) (uedp.protocol), run `client_update` on this node's data
(federation.data = "corpus": user partition-id of the run's corpus; "owners": only the file node config `data-
path` names, encoded with the tokenizer the message carries; a model started from a checkpoint only if this
node's copy of it, node config `model-path` or the run config's, has the base digest the message carries:
uedp.models.checkpoints.check_base), and return the new model (plus training metrics in non-private runs), as
any Flower train function does; the mod turns it into the reply: the update, clipped once as a whole, and
nothing else in private runs. Nothing about the round is logged.

`read_node_config(cfg, node_config)` reads and checks what a node's config says its data is (ConfigError
naming the entry: a missing, mistyped or out-of-range partition-id, a data-path that names no file).
`make_client_app(cfg)` binds a RunConfig (Hydra entry point, tests); the module-level `app` reads the config
from `context.run_config` (`flwr run`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp

from client.rewrite import client_rewrite
from client.update import SplitModels, client_update
from uedp.config import RunConfig
from uedp.errors import ConfigError
from uedp.flower.mod import UeDPMod, decoded, uedp_mod
from uedp.models.checkpoints import check_base
from uedp.owners import shipped_tokenizer
from uedp.protocol import (
    ARRAYS_RECORD,
    BASE_RECORD,
    CONFIG_RECORD,
    INSTRUCTIONS_RECORD,
    REWRITE_RECORD,
    REWRITES_RECORD,
    TOKENIZER_RECORD,
    RoundInstructions,
)
from uedp.training import LocalTraining

# A client round: (cfg, partition id, global weights, instructions, local training) -> (new model, metrics)
ClientFn = Callable[[RunConfig, int, list[np.ndarray], RoundInstructions, LocalTraining],
                    tuple[list[np.ndarray] | SplitModels, dict[str, float]]]


def inject_fault(fault: str) -> None:
    """Fault injection for the fault-tolerance tests (runtime/federation.py), set per node with node
    config `fault`: "raise" (the ClientApp raises: an error reply) or "hang:SECONDS" (it sleeps past the
    round time-out: a missing reply). Empty (the default): nothing. Either way the server treats the
    user as a zero contribution under the fixed denominator, so the privacy accounting is unchanged."""
    if not fault:
        return
    kind, _, arg = fault.partition(":")
    if fault == "raise":
        raise RuntimeError("injected fault (node config fault='raise')")
    if kind == "hang":
        try:
            seconds = float(arg or 3600)
        except ValueError:
            seconds = math.nan
        if 0 <= seconds < math.inf:
            time.sleep(seconds)
            return
    raise ConfigError(f"node config fault={fault!r}: expected 'raise' or 'hang:SECONDS' (SECONDS >= 0)")


@dataclass(frozen=True)
class NodeData:
    """What this node's config says its data is: `partition_id` (federation.data = corpus: user i of the
    run's corpus; None where the node config has none and the message needs none) or `data_path`
    (federation.data = owners: the owner's own JSONL file; "" in corpus mode)."""

    partition_id: int | None
    data_path: str


def _node_int(node_config: Mapping[str, Any], key: str) -> int | None:
    """Node config `key` as an integer (Flower passes an int, or a str from --node-config); None if absent."""
    value = node_config.get(key)
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]{1,19}", value.strip()):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"node config {key} must be an integer, got {value!r}")
    return value


def read_node_config(cfg: RunConfig, node_config: Mapping[str, Any], *, need_partition: bool = True) -> NodeData:
    """This node's data, from its node config, checked (ConfigError naming the entry): with federation.data =
    corpus, `partition-id` (required unless `need_partition` is false) an integer in 0..num-partitions-1 where
    `num-partitions` (an integer >= 1) is given; with federation.data = owners, `data-path` naming a regular
    file. Nothing is read but the file's metadata (the ClientApp reads the file later, uedp.owners)."""
    if not isinstance(node_config, Mapping):
        raise ConfigError(f"node config must be a mapping, got {type(node_config).__name__}")
    if cfg.owners:
        path = node_config.get("data-path", "")
        if not isinstance(path, str) or not path.strip():
            raise ConfigError("federation.data = owners: start this SuperNode with node config data-path naming "
                              f"the owner's JSONL file (got {path!r})")
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise ConfigError(f"node config data-path {path!r}: no such file") from None
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
            raise ConfigError(f"node config data-path {path!r}: cannot be read ({exc})") from None
        if not stat.S_ISREG(mode):
            raise ConfigError(f"node config data-path {path!r}: not a regular file (a directory, pipe or device)")
        return NodeData(partition_id=None, data_path=path)
    partition, partitions = _node_int(node_config, "partition-id"), _node_int(node_config, "num-partitions")
    if partitions is not None and partitions < 1:
        raise ConfigError(f"node config num-partitions must be >= 1, got {partitions}")
    if partition is None:
        if need_partition:
            raise ConfigError("federation.data = corpus: start this SuperNode with node config partition-id "
                              "(the user it holds: 0, 1, ...)")
        return NodeData(partition_id=None, data_path="")
    if partition < 0:
        raise ConfigError(f"node config partition-id must be >= 0, got {partition}")
    if partitions is not None and partition >= partitions:
        raise ConfigError(f"node config partition-id must lie in 0..{partitions - 1} (num-partitions "
                          f"{partitions}), got {partition}")
    return NodeData(partition_id=partition, data_path="")


def with_node_checkpoint(cfg: RunConfig, node_config: Mapping[str, Any]) -> RunConfig:
    """`cfg` with this node's own copy of the model's checkpoint: node config `model-path`, where it names one
    (model hf: options.path; gpt2/bert: options.pretrained), else the run config's path. The copy must be the
    server's base (its digest is checked with every training message: uedp.models.checkpoints.check_base)."""
    path = node_config.get("model-path")
    if path is None or path == "":
        return cfg
    if not isinstance(path, str):
        raise ConfigError(f"node config model-path must be a directory path (a string), got {path!r}")
    options = cfg.model.option_dict()
    key = "path" if cfg.model.name == "hf" else "pretrained" if options.get("pretrained") is not None else None
    if key is None:
        raise ConfigError(f"node config model-path names a checkpoint, but model {cfg.model.name!r} starts from "
                          "none (model hf, or gpt2/bert with options.pretrained)")
    model = dataclasses.replace(cfg.model, options=json.dumps({**options, key: path}, sort_keys=True))
    return dataclasses.replace(cfg, model=model)


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
    """The train function: decode the instructions and training settings, run client_update, reply with the
    new model (the client mod makes the update of it: uedp.flower.mod).

    A module-level class rather than a closure, because the Ray simulation pickles the ClientApp with every
    message: cloudpickle sends a closure by value (with a scan of its globals' submodules, ~2 ms a message
    here), an instance of this class by reference plus its few fields. `timings_dir` (or `lap_sink`, which
    receives each message's laps instead of a file: the in-process grid): benchmark only. `update`: the
    client round (default client.update.client_update; the audit injects a broken control, the in-process
    grid's tests a failing one): called as update(cfg, partition_id, weights, ins, training) on the run's
    corpus and update.owner(cfg, data_path, tokenizer, weights, ins, training, identity=node id) on an owner's
    file. `mod`: UeDP's client mod (the audit's per-step control passes one with its broken bound)."""

    cfg: RunConfig | None = None
    timings_dir: str = ""
    update: ClientFn = client_update
    lap_sink: Callable[[dict[str, float]], None] | None = None
    mod: UeDPMod = uedp_mod

    def __call__(self, msg: Message, context: Context) -> Message:
        """The reply the node sends: the train function below, guarded by UeDP's client mod (an exception is an
        error reply naming no text), which also makes the reply from the models' arrays (uedp.flower.mod: the
        one clip of the whole update). The mod's parts are called here rather than through
        ClientApp(mods=[...]): the models are numpy arrays here already (no ArrayRecord of the new model to
        build and decode again), and Flower's mod wrapping is a closure Ray would pickle by value with every
        message."""
        return self.mod.guarded(msg, lambda: self.train(msg, context))

    def train(self, msg: Message, context: Context) -> Message:
        timed = self.timings_dir or self.lap_sink is not None
        laps = _Laps(self.timings_dir, self.lap_sink) if timed else None
        torch.set_num_threads(1)
        run_cfg = self.cfg if self.cfg is not None else RunConfig.from_run_config(context.run_config)
        inject_fault(str(context.node_config.get("fault", "")))
        node = read_node_config(run_cfg, context.node_config)
        run_cfg = with_node_checkpoint(run_cfg, context.node_config)
        ins = RoundInstructions.from_record(msg.content[INSTRUCTIONS_RECORD])
        training = LocalTraining.from_record(msg.content[CONFIG_RECORD])
        arrays = decoded(msg.content[ARRAYS_RECORD])
        if arrays is None:
            raise ValueError("a training message without its global model")
        weights = [np.array(a) for a in arrays]  # writable copies of the message's read-only views
        base = msg.content.config_records.get(BASE_RECORD)
        if base is not None:  # the model starts from a public checkpoint: this node's own copy must be the server's
            check_base(run_cfg.model.name, run_cfg.model.option_dict(), str(base.get("digest", "")))
        if laps:
            laps.lap("decode", round=ins.round)
        if run_cfg.owners:  # this owner's own file, the tokenizer the server shipped
            if not hasattr(self.update, "owner"):
                raise TypeError(f"federation.data = owners needs a client round with .owner, got {self.update!r}")
            tokenizer = shipped_tokenizer(dict(msg.content[TOKENIZER_RECORD]))
            new, metrics = self.update.owner(run_cfg, node.data_path, tokenizer, weights, ins, training,  # type: ignore[attr-defined]
                                             identity=str(context.node_id))
        else:
            assert node.partition_id is not None  # read_node_config requires it
            new, metrics = self.update(run_cfg, node.partition_id, weights, ins, training)
        if laps:
            laps.lap("compute")
        parts = [new.free, new.entity] if isinstance(new, SplitModels) else [new]
        reply = self.mod.reply(msg, ins, weights, parts, metrics)
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
        run_cfg = self.cfg if self.cfg is not None else RunConfig.from_run_config(context.run_config)
        inject_fault(str(context.node_config.get("fault", "")))
        node = read_node_config(run_cfg, context.node_config, need_partition=False)
        asked = msg.content.config_records.get(REWRITE_RECORD)
        expected = asked.get("rewriter") if asked is not None else None
        record = client_rewrite(run_cfg, partition_id=node.partition_id, data_path=node.data_path,
                                expected=str(expected) if expected is not None else None)
        return Message(RecordDict({REWRITES_RECORD: record}), reply_to=msg)


def make_client_app(cfg: RunConfig | None = None, *, timings_dir: str = "") -> ClientApp:
    """The ClientApp bound to `cfg` (None: read it from `context.run_config`). `timings_dir` (benchmark only,
    studies/benchmark.py): time each training message's decoding, client_update and reply encoding into
    that folder; empty (every real run): no timing, nothing written."""
    app = ClientApp()
    app.train()(TrainHandler(cfg, timings_dir))  # UeDP's client mod inside (TrainHandler.__call__)
    app.query()(QueryHandler(cfg))
    return app


app = make_client_app()
