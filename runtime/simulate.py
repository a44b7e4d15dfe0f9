"""Run one configuration as a Ray-backed Flower simulation in this process, and return its summary.

    summary = simulate(RunConfig.from_nested({...}))

Uses flwr.simulation.run_simulation with the ServerApp and ClientApp bound to the config (under it
`context.run_config` is empty, so the config travels by closure). One virtual SuperNode per participating
user; `client_cpus` CPUs per client (2 clients train at once on 2 cores with the default 1). With
`federation.ray_address` (or $RAY_ADDRESS) set, the simulation joins that Ray cluster instead of starting
one (runtime/ray_cluster.py starts a local one on loopback).

Where federation.device resolves to cuda here, each client also asks Ray for a share of a GPU (`num_gpus`,
`gpu_share`), and a Ray started here is given the GPUs; otherwise clients ask for CPUs only (`backend_config`).
The share is `client_gpus` where given (the argument, else federation.client_gpus), else ("auto") sized
by memory: 1 / uedp.devices.actors_per_gpu, the clients whose estimated need (the run's model at its dtype:
weights, a gradient and the local optimizer's states per trainable parameter, an activation and CUDA-context
allowance) fits in the smallest GPU's memory, at most the clients the CPUs run at once (CPUs / client_cpus)
per GPU. The simulation's start lines print the share and how it was chosen. Ray gives each client's actor
only its own GPU(s) (CUDA_VISIBLE_DEVICES), numbered from 0 there, so a simulation refuses federation.device
= cuda:N with N > 0 (the clients could not honour it: choose cuda, and pick the GPUs with
CUDA_VISIBLE_DEVICES); cuda:0 is cuda.

The ServerApp is server/app.py's, except that Flower's in-memory grid pulls replies every
SIMULATION_PULL_INTERVAL seconds instead of its default 0.1 s (studies/benchmark.py measured ~10% of a
round's time here: the last reply waited for the next pull, and answered messages stay in the simulated
SuperLink, where Flower's dispatcher scans them for each of the N nodes every 0.1 s, until a pull removes them).
That dispatcher, which hands the pushed messages to the actors, looks every SIMULATION_DISPATCH_INTERVAL seconds
instead of every 0.1 s, and only at the nodes with a pending message (`dispatch_promptly`); and the actors share
the users they encode (client/shared_users.py: each user is read and encoded once per simulation, not once per
actor that happens to serve it).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from client.app import make_client_app
from client.shared_users import shared_user_cache
from server.app import make_server_app
from uedp.config import AUTO, RunConfig
from uedp.devices import (
    OPTIMIZER_STATES,
    actors_per_gpu,
    client_gpu_bytes,
    cuda_index,
    model_memory,
    resolve_device,
)
from uedp.errors import ConfigError
from uedp.pipeline import prepare
from uedp.summary import SUMMARY, read_summary


class _DropRunSimulationDeprecation(logging.Filter):
    """Drops exactly one record: Flower 1.42's "DEPRECATED FEATURE: The `run_simulation` function is
    deprecated" warning. run_simulation is still Flower 1.42's only in-process simulation that takes the app
    objects (ours close over a RunConfig, which a Hydra sweep builds per job); its replacement, `flwr run`,
    starts a SuperLink and ships a FAB, and the project offers that path too (docs/running.md, "With flwr
    run"). Every other Flower warning passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()  # a single mapping argument is a dict
        return not (args and str(args[0]).startswith("The `run_simulation` function is deprecated"))


def _quiet_libraries() -> None:
    """What the simulation's libraries print that is not about this run (idempotent)."""
    flwr_logger = logging.getLogger("flwr")
    if not any(isinstance(f, _DropRunSimulationDeprecation) for f in flwr_logger.filters):
        flwr_logger.addFilter(_DropRunSimulationDeprecation())
    # Ray warns (FutureWarning) that it will stop overriding CUDA_VISIBLE_DEVICES for tasks with num_gpus=0;
    # choosing that future behaviour now is its documented way to turn the warning off (clients asking for
    # no GPU then see the machine's GPUs; they train on the CPU unless federation.device resolves to cuda, and
    # then backend_config asks for a GPU share)
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")


SIMULATION_PULL_INTERVAL = 0.02  # seconds between the ServerApp's pulls of replies (Flower's default 0.1)
SIMULATION_DISPATCH_INTERVAL = 0.005  # seconds between the dispatcher's looks for pushed messages (Flower's 0.1)
# A Ray started here passes task arguments and results up to 4 MiB inline (Ray's default: 100 kB, above which
# each goes through the shared-memory object store): every message carries the model (0.93 MB for the default
# LSTM) to an actor and an update back, and inline transfer cost the driver ~1 ms less a message (benchmark:
# ~10% of a round). A cluster joined by address keeps its own settings.
RAY_SYSTEM_CONFIG = {"max_direct_call_object_size": 4 * 1024 * 1024}


def make_simulation_server_app(cfg: RunConfig, *, wrap_grid: Callable[[Grid], Any] | None = None) -> ServerApp:
    """server/app.py's ServerApp for `cfg`, with the in-memory grid pulling every SIMULATION_PULL_INTERVAL
    seconds; `wrap_grid` (benchmark only): the grid the server loop sees, e.g. a timing wrapper."""
    return make_server_app(cfg, pull_interval=SIMULATION_PULL_INTERVAL, wrap_grid=wrap_grid)


def index_pending_messages() -> None:
    """Make Flower 1.42's simulated SuperLink hand out messages in time independent of the population.

    Every 0.1 s its dispatcher asks the in-memory link state, for EACH of the N virtual nodes in turn, for
    that node's undelivered messages (flwr/server/superlink/fleet/vce/vce_api.py, add_messages_to_queue), and
    each ask validates EVERY stored message (InMemoryLinkState.get_message_ins -> _check_stored_messages:
    expiry, federation membership): N x M validations a pass, under the state's lock. At 5,000 nodes and a
    cohort of 100 that is 500,000 validations a pass, and a round took ~100 s instead of seconds (docs/
    docs/results.md, "A two-node Ray cluster at 5,000 users"). The patch answers a node with no undelivered message
    addressed to it with []
    at once, from the set of pending destinations (recomputed whenever the stored messages change, dropped
    after each delivery); for a node that has one, Flower's own method runs unchanged. Idempotent."""
    from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState

    original = InMemoryLinkState.get_message_ins
    if getattr(original, "indexed_by_uedp", False):
        return

    def get_message_ins(self, node_id: int, limit: int | None, *, run_id: int | None = None) -> list:
        with self.lock:
            keys = tuple(self.message_ins_store)
            cached = self.__dict__.get("_uedp_pending")
            if cached is None or cached[0] != keys:
                cached = (keys, {m.metadata.dst_node_id for m in self.message_ins_store.values()
                                 if m.metadata.delivered_at == ""})
                self.__dict__["_uedp_pending"] = cached
            if node_id not in cached[1]:
                return []
            self.__dict__["_uedp_pending"] = None  # a delivery changes what is pending
            return original(self, node_id, limit, run_id=run_id)

    get_message_ins.indexed_by_uedp = True  # type: ignore[attr-defined]
    InMemoryLinkState.get_message_ins = get_message_ins  # type: ignore[method-assign]


def _pending_nodes(state: Any) -> set[int] | None:
    """The destinations of `state`'s undelivered messages (Flower 1.42's InMemoryLinkState), None for any other
    link state."""
    lock, store = getattr(state, "lock", None), getattr(state, "message_ins_store", None)
    if lock is None or not isinstance(store, dict):
        return None
    with lock:
        return {m.metadata.dst_node_id for m in store.values() if m.metadata.delivered_at == ""}


def dispatch_promptly() -> None:
    """Make Flower 1.42's simulation hand pushed messages to the actors within SIMULATION_DISPATCH_INTERVAL.

    Its dispatcher thread (flwr/server/superlink/fleet/vce/vce_api.py, add_messages_to_queue) asks the link state
    for each node's next message, then waits 0.1 s: a round's messages waited ~50 ms on average before the first
    actor saw one. The replacement looks every SIMULATION_DISPATCH_INTERVAL seconds and asks only the nodes that
    have an undelivered message (all nodes, every 0.1 s, where the link state is not the in-memory one); each
    message is still taken by Flower's own get_message_ins, at most one per node a pass. Idempotent."""
    from flwr.server.superlink.fleet.vce import vce_api

    if getattr(vce_api.add_messages_to_queue, "prompt_by_uedp", False):
        return

    def add_messages_to_queue(state: Any, queue: Any, nodes_mapping: Any, f_stop: Any) -> None:
        while not f_stop.is_set():
            pending = _pending_nodes(state)
            if pending is None:
                nodes = nodes_mapping.keys()
            else:  # in the nodes' order, as Flower's pass
                nodes = [n for n in nodes_mapping if n in pending] if pending else []
            for node_id in nodes:
                for msg in state.get_message_ins(node_id=node_id, limit=1):
                    queue.put(msg)
            f_stop.wait(0.1 if pending is None else SIMULATION_DISPATCH_INTERVAL)

    add_messages_to_queue.prompt_by_uedp = True  # type: ignore[attr-defined]
    vce_api.add_messages_to_queue = add_messages_to_queue


def optimizer_states(cfg: RunConfig) -> int:
    """Tensors the clients' local optimizer keeps per trainable parameter (uedp.devices.OPTIMIZER_STATES)."""
    t = cfg.train
    return OPTIMIZER_STATES["adam" if t.optimizer in ("adam", "adamw") else "sgd+momentum" if t.momentum else "sgd"]


def run_model_size(cfg: RunConfig) -> tuple[int, int]:
    """(bytes of the run's model, bytes of its trainable parameters): the model a client builds (uedp.devices.
    model_memory), built here once on the CPU from the prepared manifest."""
    from uedp.pipeline import load_manifest, new_model

    return model_memory(new_model(cfg, load_manifest(cfg)))


def gpu_share(cfg: RunConfig, *, client_cpus: int = 1, client_gpus: float | str | None = None,
              model_size: tuple[int, int] | None = None) -> tuple[float, str]:
    """(each client's share of a GPU, the line saying how it was chosen), where federation.device resolves to
    cuda (module docstring). `client_gpus`: None for federation.client_gpus; "auto" (or 0, its run-config
    spelling) sizes the share by memory (`model_size`: (model bytes, trainable bytes), None to build the run's
    model: run_model_size); a share > 0 is taken as given (at most 1, or a whole number of GPUs)."""
    import torch

    name = "federation.client_gpus" if client_gpus is None else "client_gpus"
    given = cfg.federation.client_gpus if client_gpus is None else client_gpus
    if given != AUTO:
        given = float(given)
        if not (math.isfinite(given) and given >= 0 and (given <= 1 or given.is_integer())):
            raise ConfigError(f'{name} must be "auto" (sized by the model\'s memory), a share in (0, 1] or a whole '
                              f"number of GPUs, got {given!r}")
        if given > 0:
            return given, f"GPU share: {given:g} GPU per client ({name})"
    gpus = torch.cuda.device_count()
    at_once = max(1, (os.cpu_count() or 2) // max(1, client_cpus))  # clients the CPUs run at once
    by_cpu = max(1, at_once // gpus)
    model_bytes, trainable_bytes = run_model_size(cfg) if model_size is None else model_size
    gpu_bytes = min(torch.cuda.get_device_properties(i).total_memory for i in range(gpus))
    states = optimizer_states(cfg)
    fit = actors_per_gpu(model_bytes, trainable_bytes, gpu_bytes, by_cpu, optimizer_states=states)
    need = client_gpu_bytes(model_bytes, trainable_bytes, optimizer_states=states)
    gib = 2.0**30
    if fit == 0:
        return 1.0, (f"GPU share: 1 GPU per client; WARNING: a client's estimated need, {need / gib:.2f} GiB, exceeds "
                     f"the usable memory of a GPU ({gpu_bytes / gib:.1f} GiB): it may not fit (a smaller model, "
                     "model.lora, or model.options.dtype)")
    share = math.floor(10_000 / fit) / 10_000  # Ray counts GPU shares in units of 1e-4
    return share, (f"GPU share: {share:g} GPU per client, {fit} client(s) per GPU on {gpus} GPU(s) (each needs "
                   f"~{need / gib:.2f} GiB of {gpu_bytes / gib:.1f} GiB; the CPUs run {by_cpu} per GPU at once; "
                   "federation.client_gpus sets it)")


def check_simulation_device(cfg: RunConfig) -> None:
    """ConfigError for federation.device = cuda:N with N > 0 (module docstring: a client's actor sees its own
    GPU as cuda:0)."""
    index = cuda_index(cfg.federation.device)
    if index:
        raise ConfigError(f"federation.device = {cfg.federation.device}: a Ray simulation gives each client's actor "
                          "only its own GPU, which it sees as cuda:0, so a simulation takes cuda (or cuda:0) only; "
                          f"to run on GPU {index}, set CUDA_VISIBLE_DEVICES={index} and federation.device=cuda")


def backend_config(cfg: RunConfig, *, client_cpus: int = 1, client_gpus: float | str | None = None,
                   model_size: tuple[int, int] | None = None) -> dict[str, Any]:
    """Flower's Ray backend config for `cfg`: each client's resources and Ray's start arguments (the module
    docstring). `num_gpus` only where federation.device resolves to cuda on this machine (gpu_share's, with
    `client_gpus` and `model_size`); a ConfigError for federation.device = cuda:N with N > 0."""
    check_simulation_device(cfg)
    resources: dict[str, float] = {"num_cpus": client_cpus}
    address = cfg.federation.ray_address or os.environ.get("RAY_ADDRESS")
    init: dict[str, Any] = {"address": address} if address else {"num_cpus": os.cpu_count() or 2,
                                                                 "include_dashboard": False,
                                                                 "logging_level": logging.ERROR,
                                                                 "_system_config": RAY_SYSTEM_CONFIG}
    if resolve_device(cfg.federation.device).type == "cuda":
        import torch

        resources["num_gpus"], _ = gpu_share(cfg, client_cpus=client_cpus, client_gpus=client_gpus,
                                             model_size=model_size)
        if not address:  # a cluster joined by address keeps its own resources
            init["num_gpus"] = torch.cuda.device_count()
    return {"client_resources": resources, "init_args": init}


def simulate(cfg: RunConfig, *, client_cpus: int = 1, client_gpus: float | str | None = None, verbose: bool = False,
             server_app: ServerApp | None = None, client_app: ClientApp | None = None) -> dict[str, Any]:
    """`client_gpus`: each client's share of a GPU where federation.device resolves to cuda (None:
    federation.client_gpus; "auto": sized by memory, gpu_share). `server_app` / `client_app`: apps to run instead of
    make_simulation_server_app(cfg) / make_client_app(cfg) (the benchmark's instrumented ones); they must run
    `cfg`."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    from flwr.simulation import run_simulation

    _quiet_libraries()
    index_pending_messages()
    dispatch_promptly()

    check_simulation_device(cfg)
    manifest = prepare(cfg)  # before Ray starts: clients only read the prepared files
    if resolve_device(cfg.federation.device).type == "cuda":
        client_gpus, line = gpu_share(cfg, client_cpus=client_cpus, client_gpus=client_gpus)
        print(line, flush=True)
    backend = backend_config(cfg, client_cpus=client_cpus, client_gpus=client_gpus)
    if not verbose:
        logging.getLogger("flwr").setLevel(logging.WARNING)
        logging.getLogger("flwr.uedp").setLevel(logging.INFO)  # UeDP's own set-up and resume lines stay
    summary_path = Path(cfg.federation.out_dir) / SUMMARY
    summary_path.unlink(missing_ok=True)
    with shared_user_cache():  # before Ray starts: its actors inherit the directory's name
        run_simulation(server_app=make_simulation_server_app(cfg) if server_app is None else server_app,
                       client_app=make_client_app(cfg) if client_app is None else client_app,
                       num_supernodes=len(manifest.users), backend_config=backend, verbose_logging=verbose)
    if not summary_path.is_file():
        raise RuntimeError(f"the simulation ended without a summary ({summary_path}); see the log above")
    return read_summary(summary_path)
