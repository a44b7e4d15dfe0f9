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


def simulate(cfg: RunConfig, *, client_cpus: int = 1, verbose: bool = False) -> dict[str, Any]:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    from flwr.simulation import run_simulation

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
