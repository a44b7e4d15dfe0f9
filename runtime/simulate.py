"""Run one configuration as a Ray-backed Flower simulation in this process, and return its summary.

    summary = simulate(RunConfig.from_nested({...}))

Uses flwr.simulation.run_simulation with the ServerApp and ClientApp bound to the config (under it
`context.run_config` is empty, so the config travels by closure). One virtual SuperNode per participating
user; `client_cpus` CPUs per client (2 clients train at once on 2 cores with the default 1). With
`federation.ray_address` (or $RAY_ADDRESS) set, the simulation joins that Ray cluster instead of starting
one (runtime/ray_cluster.py starts a local one on loopback).

Where federation.device resolves to cuda here, each client also asks Ray for a share of a GPU (`num_gpus`:
`client_gpus`, or by default this machine's GPUs divided among the clients that train at once, CPUs /
client_cpus, at most one GPU each), and a Ray started here is given the GPUs; otherwise clients ask for CPUs
only (`backend_config`).

The ServerApp is server/app.py's, except that Flower's in-memory grid pulls replies every
SIMULATION_PULL_INTERVAL seconds instead of its default 0.1 s (studies/benchmark.py measured ~10% of a
round's time here: the last reply waited for the next pull, and answered messages stay in the simulated
SuperLink, where Flower's dispatcher scans them for each of the N nodes every 0.1 s, until a pull removes them).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from client.app import make_client_app
from server.app import make_server_app
from uedp.checks import positive
from uedp.config import RunConfig
from uedp.devices import resolve_device
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


def backend_config(cfg: RunConfig, *, client_cpus: int = 1, client_gpus: float | None = None) -> dict[str, Any]:
    """Flower's Ray backend config for `cfg`: each client's resources and Ray's start arguments (the module
    docstring). `num_gpus` only where federation.device resolves to cuda on this machine: `client_gpus` (> 0),
    or None for this machine's GPUs shared among the clients that run at once."""
    resources: dict[str, float] = {"num_cpus": client_cpus}
    address = cfg.federation.ray_address or os.environ.get("RAY_ADDRESS")
    init: dict[str, Any] = {"address": address} if address else {"num_cpus": os.cpu_count() or 2,
                                                                 "include_dashboard": False,
                                                                 "logging_level": logging.ERROR,
                                                                 "_system_config": RAY_SYSTEM_CONFIG}
    if resolve_device(cfg.federation.device).type == "cuda":
        import torch

        gpus = torch.cuda.device_count()
        if client_gpus is None:
            at_once = max(1, (os.cpu_count() or 2) // max(1, client_cpus))
            client_gpus = min(1.0, gpus / at_once)
        resources["num_gpus"] = positive("client_gpus", client_gpus)
        if not address:  # a cluster joined by address keeps its own resources
            init["num_gpus"] = gpus
    return {"client_resources": resources, "init_args": init}


def simulate(cfg: RunConfig, *, client_cpus: int = 1, client_gpus: float | None = None, verbose: bool = False,
             server_app: ServerApp | None = None, client_app: ClientApp | None = None) -> dict[str, Any]:
    """`client_gpus`: each client's share of a GPU where federation.device resolves to cuda (None: automatic,
    backend_config). `server_app` / `client_app`: apps to run instead of make_simulation_server_app(cfg) /
    make_client_app(cfg) (the benchmark's instrumented ones); they must run `cfg`."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    from flwr.simulation import run_simulation

    _quiet_libraries()
    index_pending_messages()

    manifest = prepare(cfg)  # before Ray starts: clients only read the prepared files
    backend = backend_config(cfg, client_cpus=client_cpus, client_gpus=client_gpus)
    if not verbose:
        logging.getLogger("flwr").setLevel(logging.WARNING)
        logging.getLogger("flwr.uedp").setLevel(logging.INFO)  # UeDP's own set-up and resume lines stay
    summary_path = Path(cfg.federation.out_dir) / SUMMARY
    summary_path.unlink(missing_ok=True)
    run_simulation(server_app=make_simulation_server_app(cfg) if server_app is None else server_app,
                   client_app=make_client_app(cfg) if client_app is None else client_app,
                   num_supernodes=len(manifest.users), backend_config=backend, verbose_logging=verbose)
    if not summary_path.is_file():
        raise RuntimeError(f"the simulation ended without a summary ({summary_path}); see the log above")
    return read_summary(summary_path)
