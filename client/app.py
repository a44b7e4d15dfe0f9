"""The ClientApp: the data owner's side of a round (client/update.py), a Flower ClientApp with UeDP's client mod
mounted (`ClientApp(mods=[uedp_mod])`, uedp.flower.mod), as any user of the component builds it.

Per query message (strategy=dp_bart): client/rewrite.py rewrites this owner's sentences under local DP and
replies with the rewrites only. Per training message: decode the round's instructions ("uedp" record) and
local training settings ("config" record) (uedp.protocol), run the client round (`client_update`) on this
node's data (federation.data = "corpus": user partition-id of the run's corpus; "owners": only the file node
config `data-path` names, encoded with the tokenizer the message carries; a model started from a checkpoint
only if this node's copy of it, node config `model-path` or the run config's, has the base digest the message
carries: uedp.models.checkpoints.check_base), and return the NEW model ("arrays", and "arrays_entity" for a
split update; "metrics" in non-private runs only), as any Flower train function does. The mounted mod makes
the reply: the update, clipped once as a whole, and nothing else in private runs; it answers the server's
probe itself. Nothing about the round is logged.

The node's own log: before its first training of a run, once per node (marker NODE_STATE_RECORD in
`context.state`, which Flower keeps per node and run), the client round logs the node's expected trainable
share to logger "uedp.node" (client/update.py: counts of its own sentences, never in a reply). It is printed
on the node's stderr by the app `flwr run` starts (`app`: the config from context.run_config) where the node
runs in a process of its own, not a Ray worker (client.update.node_log_to_stderr); an app bound to a RunConfig
(`make_client_app(cfg)`: the simulations and the in-process grid, whose nodes share the server's output)
attaches nothing, so there the line reaches only a handler someone attaches to that logger.

`read_node_config(cfg, node_config)` reads and checks what a node's config says its data is (ConfigError
naming the entry: a missing, mistyped or out-of-range partition-id, a data-path that names no file).
`make_client_app(cfg)` binds a RunConfig, as it is when the app is made (Hydra entry point, simulations, the
in-process grid); the
module-level `app` reads the config from `context.run_config` (`flwr run`). `make_client_app(cfg, update=...,
mods=[...])`: another client round or other mods (the audit's broken controls; studies/ mount their own mods
beside `uedp_mod`); the mods must include a `UeDPMod`.

Shipped by reference. A Ray simulation pickles the ClientApp with every message, and Flower's mod wrapping
(`make_ffn`) builds closures that cloudpickle would send by value (~2 ms a message). The app
`make_client_app` returns pickles as a call of the module-level `restore_client_app` on the pickled bytes of
what it was built from (its `AppSpec`: the RunConfig, the client round, the mods, each by reference or as
plain fields); a process rebuilds the app once and keeps it for the same bytes.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import pickle
import re
import stat
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from client.rewrite import client_rewrite
from client.update import ClientRound, SplitModels, client_update, node_log_to_stderr
from uedp.checks import integer
from uedp.config import RunConfig
from uedp.errors import ConfigError
from uedp.flower.mod import UeDPMod, decoded, received, uedp_mod
from uedp.models.checkpoints import check_base
from uedp.owners import shipped_tokenizer
from uedp.privacy.replies import NUMPY_STYPE
from uedp.protocol import (
    ARRAYS_RECORD,
    BASE_RECORD,
    CONFIG_RECORD,
    ENTITY_ARRAYS_RECORD,
    INSTRUCTIONS_RECORD,
    METRICS_RECORD,
    REWRITE_RECORD,
    REWRITES_RECORD,
    TOKENIZER_RECORD,
    RoundInstructions,
)
from uedp.training import LocalTraining

# A client round: (cfg, partition id, global weights, instructions, local training) -> (new model, metrics)
ClientFn = Callable[[RunConfig, int, list[np.ndarray], RoundInstructions, LocalTraining],
                    tuple[list[np.ndarray] | SplitModels, dict[str, float]]]
# A Flower client mod (flwr.clientapp.typing.Mod): (message, context, call_next) -> reply
Mod = Callable[[Message, Context, Callable[[Message, Context], Message]], Message]


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
    return integer(f"node config {key}", value)


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


_NPY_HEADERS: dict[tuple[str, tuple[int, ...]], bytes] = {}  # (dtype, shape) -> np.save's header for them


def _array(a: np.ndarray) -> Array:
    """Array(a) (np.save's .npy; byte for byte where `a` is C-ordered, else of its C-ordered copy), with np.save's
    header made once per dtype and shape: a model's arrays have the same ones every round (half the time of
    Array(a) here)."""
    if not a.flags.c_contiguous:
        a = np.array(a, order="C")
    key = (a.dtype.str, a.shape)
    header = _NPY_HEADERS.get(key)
    if header is None or a.dtype.hasobject:
        array = Array(a)  # np.save (allow_pickle=False): refuses object arrays as Flower does
        if len(_NPY_HEADERS) < 256:
            _NPY_HEADERS[key] = array.data[: len(array.data) - a.nbytes]
        return array
    return Array(dtype=str(a.dtype), shape=tuple(a.shape), stype=NUMPY_STYPE, data=b"".join((header, a.data)))


def model_record(keys: Sequence[str], arrays: Sequence[np.ndarray]) -> ArrayRecord:
    """An ArrayRecord of `arrays` under the global record's `keys` (what the mod reads the new model by)."""
    return ArrayRecord({k: _array(np.asarray(a)) for k, a in zip(keys, arrays, strict=True)})


NODE_STATE_RECORD = "uedp-node"  # this node's own marker in context.state: {"share_logged": True}


def first_training(state: RecordDict) -> bool:
    """True exactly once per node state (Flower's `context.state`, kept per node and run): this node's first
    training message; marks the state."""
    record = state.config_records.get(NODE_STATE_RECORD)
    if record is not None and record.get("share_logged"):
        return False
    state[NODE_STATE_RECORD] = ConfigRecord({"share_logged": True})
    return True


@dataclass(frozen=True)
class NodeSetup:
    """What the run config and a node's config say of this node's training, resolved once per node and run: the
    run config with this node's checkpoint (`with_node_checkpoint`), its data (`read_node_config`), and what a
    training message needs of them (the RunConfig stops here: a round reads these values, never the config)."""

    cfg: RunConfig
    data: NodeData
    owners: bool  # federation.data = owners (cfg.owners, read once: a round never calls into the config)
    key: tuple  # the run config's flat items, sorted: the client round's cache key (client.update)
    model_name: str
    model_options: dict[str, Any]  # cfg.model's options, parsed once

    @classmethod
    def of(cls, cfg: RunConfig, node_config: Mapping[str, Any]) -> NodeSetup:
        data = read_node_config(cfg, node_config)
        cfg = with_node_checkpoint(cfg, node_config)
        return cls(cfg=cfg, data=data, owners=cfg.owners, key=tuple(sorted(cfg.to_flat().items())),
                   model_name=cfg.model.name, model_options=cfg.model.option_dict())


class NodeSetups:
    """The NodeSetup of each node this ClientApp serves (a simulation's actor serves many), made on a node's
    first message: for an app bound to a RunConfig, by node config; for the app `flwr run` starts, by run config
    and node config (the RunConfig is read from `context.run_config` once, not with every message). A node config
    that fails its checks fails every message (nothing is kept of it)."""

    MAX = 4096  # nodes per process (USER_CACHE_SIZE's population), oldest dropped first

    def __init__(self) -> None:
        self._setups: dict[tuple, NodeSetup] = {}
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:  # a pickled app's nodes resolve their setups again
        return NodeSetups, ()

    def setup(self, cfg: RunConfig | None, context: Context) -> NodeSetup:
        key = (None if cfg is not None else tuple(sorted(context.run_config.items())),
               tuple(sorted(context.node_config.items())))
        found = self._setups.get(key)
        if found is None:
            found = NodeSetup.of(cfg if cfg is not None else RunConfig.from_run_config(context.run_config),
                                 context.node_config)
            with self._lock:
                if len(self._setups) >= self.MAX:
                    self._setups.pop(next(iter(self._setups)))
                self._setups[key] = found
        return found


@dataclass(frozen=True)
class TrainFunction:
    """The train function: decode the instructions and training settings, run the client round (`update`) on
    this node's data, return the new model. The mounted client mod makes the reply of it (uedp.flower.mod).

    `update`: the client round (default client.update.client_update; the audit injects a broken control, tests
    a failing one), called as update(cfg, partition_id, weights, ins, training) on the run's corpus and
    update.owner(cfg, data_path, tokenizer, weights, ins, training, identity=node id) on an owner's file; a
    `ClientRound` (client_update, the audit's controls) also with the node's config key (`key=`, NodeSetup) and
    with log_share=True on the node's first training message (`first_training`), so that it logs the node's
    expected trainable share (module docstring). The node's setup (`NodeSetup`) is resolved on its first message
    and kept."""

    cfg: RunConfig | None = None
    update: ClientFn = client_update
    _nodes: NodeSetups = dataclasses.field(default_factory=lambda: NodeSetups(), compare=False, repr=False)

    def __call__(self, msg: Message, context: Context) -> Message:
        torch.set_num_threads(1)
        node = self._nodes.setup(self.cfg, context)
        training = LocalTraining.from_record(msg.content[CONFIG_RECORD])
        record = msg.content.array_records.get(ARRAYS_RECORD)
        got = received(msg)  # the mod's reading of this message: instructions and arrays, read once on a node
        if got is not None:
            ins, arrays = got.instructions, got.arrays
        else:
            ins, arrays = RoundInstructions.from_record(msg.content[INSTRUCTIONS_RECORD]), decoded(record)
        if record is None or arrays is None:
            raise ValueError(f"a training message without its global model ({ARRAYS_RECORD!r} ArrayRecord)")
        weights = [np.array(a) for a in arrays]  # writable copies of the message's read-only views
        base = msg.content.config_records.get(BASE_RECORD)
        if base is not None:  # the model starts from a public checkpoint: this node's own copy must be the server's
            check_base(node.model_name, node.model_options, str(base.get("digest", "")))
        ours = isinstance(self.update, ClientRound)
        share: dict[str, bool] = {}  # the client round logs the node's expected trainable share, once
        if ours and first_training(context.state):
            share["log_share"] = True
            if self.cfg is None:  # the app `flwr run` starts: print the node's log where it runs alone
                node_log_to_stderr()
        if node.owners:  # this owner's own file, the tokenizer the server shipped
            if not hasattr(self.update, "owner"):
                raise TypeError(f"federation.data = owners needs a client round with .owner, got {self.update!r}")
            tokenizer = shipped_tokenizer(dict(msg.content[TOKENIZER_RECORD]))
            new, metrics = self.update.owner(node.cfg, node.data.data_path, tokenizer, weights, ins, training,  # type: ignore[attr-defined]
                                             identity=str(context.node_id), **share)
        else:
            assert node.data.partition_id is not None  # read_node_config requires it
            key = {"key": node.key} if ours else {}  # the run config's flat items, computed once per node
            new, metrics = self.update(node.cfg, node.data.partition_id, weights, ins, training, **share, **key)  # type: ignore[call-arg]
        keys = list(record.keys())
        if isinstance(new, SplitModels):
            content = RecordDict({ARRAYS_RECORD: model_record(keys, new.free),
                                  ENTITY_ARRAYS_RECORD: model_record(keys, new.entity)})
        else:
            content = RecordDict({ARRAYS_RECORD: model_record(keys, new)})
        if metrics and not ins.private:  # a private run's train function returns its model only
            content[METRICS_RECORD] = MetricRecord(dict(metrics))
        return Message(content, reply_to=msg)


@dataclass(frozen=True)
class QueryFunction:
    """The query function (strategy=dp_bart): rewrite this owner's sentences under local DP; reply with the
    rewrites only."""

    cfg: RunConfig | None = None

    def __call__(self, msg: Message, context: Context) -> Message:
        torch.set_num_threads(1)
        run_cfg = self.cfg if self.cfg is not None else RunConfig.from_run_config(context.run_config)
        node = read_node_config(run_cfg, context.node_config, need_partition=False)
        asked = msg.content.config_records.get(REWRITE_RECORD)
        expected = asked.get("rewriter") if asked is not None else None
        record = client_rewrite(run_cfg, partition_id=node.partition_id, data_path=node.data_path,
                                expected=str(expected) if expected is not None else None)
        return Message(RecordDict({REWRITES_RECORD: record}), reply_to=msg)


@dataclass(frozen=True)
class AppSpec:
    """What the project's ClientApp is built from: the RunConfig (None: `context.run_config`), the client
    round, and the mods, outermost first."""

    cfg: RunConfig | None
    update: ClientFn
    mods: tuple[Mod, ...]


class ProjectClientApp(ClientApp):
    """A ClientApp built from an `AppSpec`: its train and query functions, `spec.mods` mounted around both.
    It pickles by reference: `restore_client_app` and the spec's pickled bytes (module docstring)."""

    def __init__(self, spec: AppSpec) -> None:
        super().__init__(mods=list(spec.mods))
        self.train()(TrainFunction(spec.cfg, spec.update))
        self.query()(QueryFunction(spec.cfg))
        self.spec = spec

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        try:  # the spec as it is now (its RunConfig is a mutable dataclass): ~30 us, no code by value
            return restore_client_app, (pickle.dumps(self.spec, protocol=pickle.HIGHEST_PROTOCOL),)
        except (pickle.PicklingError, AttributeError, TypeError):  # a local function (a test's client round)
            return ProjectClientApp, (self.spec,)  # cloudpickle sends the spec by value


_RESTORED: dict[bytes, ProjectClientApp] = {}  # this process's apps by the spec bytes they were built from
_RESTORED_MAX = 8
_RESTORING = threading.Lock()


def restore_client_app(pickled: bytes) -> ProjectClientApp:
    """The app of a pickled AppSpec, built once per process for the same bytes (a Ray actor gets the same app
    with every message: its functions and mods are built once)."""
    app = _RESTORED.get(pickled)
    if app is None:
        with _RESTORING:
            app = _RESTORED.get(pickled)
            if app is None:
                app = ProjectClientApp(pickle.loads(pickled))
                if len(_RESTORED) >= _RESTORED_MAX:
                    _RESTORED.pop(next(iter(_RESTORED)))
                _RESTORED[pickled] = app
    return app


def make_client_app(cfg: RunConfig | None = None, *, update: ClientFn = client_update,
                    mods: Sequence[Mod] = (uedp_mod,)) -> ProjectClientApp:
    """The project's ClientApp bound to `cfg` (None: read it from `context.run_config`): `mods` (default: UeDP's
    client mod alone) mounted around the train function (client round `update`) and the query function. The
    mods must include a UeDPMod (`uedp_mod`; the audit's controls pass one with a broken bound): without it a
    node would send its new model, unclipped."""
    mods = tuple(mods)
    if not any(isinstance(m, UeDPMod) for m in mods):
        raise ValueError(f"make_client_app: mods must include uedp_mod (a UeDPMod), got {mods!r}")
    # The app is bound to `cfg` as it is now: its nodes resolve their setup from it once (NodeSetup)
    return ProjectClientApp(AppSpec(None if cfg is None else copy.deepcopy(cfg), update, mods))


app = make_client_app()
