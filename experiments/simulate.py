"""Run one configuration as a Ray-backed Flower simulation in this process, and return its summary.

    summary = simulate(RunConfig.from_nested({...}))

Uses flwr.simulation.run_simulation with the ServerApp and ClientApp bound to the config (under it
`context.run_config` is empty, so the config travels by closure). One virtual SuperNode per participating
user; `client_cpus` CPUs per client (2 clients train at once on 2 cores with the default 1). With
`federation.ray_address` (or $RAY_ADDRESS) set, the simulation joins that Ray cluster instead of starting
one (experiments/ray_cluster.py starts a local one on loopback).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from client.app import make_client_app
from server.app import SUMMARY, make_server_app
from uedp.config import RunConfig
from uedp.pipeline import prepare


class _DropRunSimulationDeprecation(logging.Filter):
    """Drops exactly one record: Flower 1.42's "DEPRECATED FEATURE: The `run_simulation` function is
    deprecated" warning. run_simulation is still Flower 1.42's only in-process simulation that takes the app
    objects (ours close over a RunConfig, which a Hydra sweep builds per job); its replacement, `flwr run`,
    starts a SuperLink and ships a FAB, and the project offers that path too (README, "flwr run"). Every
    other Flower warning passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.args and str(record.args[0]).startswith("The `run_simulation` function is deprecated"))


def _quiet_libraries() -> None:
    """What the simulation's libraries print that is not about this run (idempotent)."""
    flwr_logger = logging.getLogger("flwr")
    if not any(isinstance(f, _DropRunSimulationDeprecation) for f in flwr_logger.filters):
        flwr_logger.addFilter(_DropRunSimulationDeprecation())
    # Ray warns (FutureWarning) that it will stop overriding CUDA_VISIBLE_DEVICES for tasks with num_gpus=0;
    # choosing that future behaviour now is its documented way to turn the warning off (clients asking for
    # no GPU then see the machine's GPUs; our clients train on the CPU unless a model is moved explicitly)
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")


def simulate(cfg: RunConfig, *, client_cpus: int = 1, verbose: bool = False) -> dict[str, Any]:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    from flwr.simulation import run_simulation

    _quiet_libraries()

    manifest = prepare(cfg)  # before Ray starts: clients only read the prepared files
    backend: dict[str, Any] = {"client_resources": {"num_cpus": client_cpus}}
    address = cfg.federation.ray_address or os.environ.get("RAY_ADDRESS")
    backend["init_args"] = {"address": address} if address else {"num_cpus": os.cpu_count() or 2,
                                                                  "include_dashboard": False,
                                                                  "logging_level": logging.ERROR}
    if not verbose:
        logging.getLogger("flwr").setLevel(logging.WARNING)
    summary_path = Path(cfg.federation.out_dir) / SUMMARY
    summary_path.unlink(missing_ok=True)
    run_simulation(server_app=make_server_app(cfg), client_app=make_client_app(cfg),
                   num_supernodes=len(manifest.users), backend_config=backend, verbose_logging=verbose)
    if not summary_path.is_file():
        raise RuntimeError(f"the simulation ended without a summary ({summary_path}); see the log above")
    return json.loads(summary_path.read_text())
