"""A local Ray cluster on loopback, for running the simulation against an existing cluster by address.

    python -m experiments.ray_cluster --cpus 2 -- python -m experiments.run federation.ray_address=ADDRESS ...
    python -m experiments.ray_cluster --cpus 1 --worker-cpus 1 --report OUT.json -- python -m experiments.run ...

starts `ray start --head` (its own temporary directory and port) and, per `--worker-cpus C`, one more node
joined to it (`ray start --address=...`, a separate raylet with C CPUs: the way a user outgrows one
machine, here both on loopback), replaces ADDRESS in the command with the cluster's address
(127.0.0.1:PORT), runs the command, and stops the cluster's processes by process id (never `ray stop`,
which would stop every Ray cluster of this user). With `--report`, it then reads the cluster's actor table
(GCS, before stopping it) and writes, per node, its CPUs and how many Flower client actors
(ClientAppActor) ran there: the simulation's clients were scheduled on every node. On a real cluster, skip
this: set `federation.ray_address=HEAD:PORT` (or RAY_ADDRESS) and run `python -m experiments.run` on the
head node.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from runtime.federation import executable, free_port
from runtime.processes import pids_matching


def _cluster_pids(markers: tuple[str, ...]) -> list[int]:
    """Processes whose command line contains a marker; the line ends in a space, so that a marker ending in a
    space (an argument ending in ":PORT") also matches the last argument."""
    return pids_matching(lambda cmd: any(m in cmd + " " for m in markers))


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


@contextlib.contextmanager
def ray_cluster(*, cpus: int = 2, temp_dir: Path | None = None, workers: tuple[int, ...] = ()) -> Iterator[str]:
    """Start a Ray head on loopback with `cpus` CPUs, and one worker node per entry of `workers` (its CPUs);
    yield the head's address; stop all their processes on exit."""
    temp = Path(temp_dir or tempfile.mkdtemp(prefix="uedp-ray-", dir="/tmp"))  # short: AF_UNIX paths <= 107 bytes
    port = free_port()
    markers = (str(temp), f":{port} ", f":{port}\n", f"--gcs-address=127.0.0.1:{port}", f"--address=127.0.0.1:{port}")
    ray = executable("ray", install="pip install 'flwr[simulation]'")
    cmd = [ray, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", f"--num-cpus={cpus}",
           "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats"]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    try:
        address = f"127.0.0.1:{port}"
        joins = [[ray, "start", f"--address={address}", "--node-ip-address=127.0.0.1", f"--num-cpus={c}",
                  "--disable-usage-stats"] for c in workers]
        for argv in (cmd, *joins):
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(argv[1:3])} failed ({proc.returncode}):\n{proc.stdout[-2000:]}"
                                   f"{proc.stderr[-2000:]}")
        yield address
    finally:
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):  # gcs_server may outlive SIGTERM
            _signal_all(_cluster_pids(markers), sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _cluster_pids(markers):
                time.sleep(0.2)


CLIENT_ACTOR = "ClientAppActor"  # Flower's simulation actor (flwr.simulation.ray_transport.ray_actor)


def actors_per_node(address: str) -> list[dict]:
    """Per node of the cluster at `address`: its id, CPUs, and how many Flower client actors it hosted
    (alive or finished: the GCS actor table keeps dead actors)."""
    import ray
    import ray._private.state as ray_state

    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # as runtime/simulate.py: no GPU here
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        nodes = {n["NodeID"]: {"node": n["NodeID"][:12], "head": bool(n["Resources"].get("node:__internal_head__")),
                               "cpus": n["Resources"].get("CPU", 0), "client_actors": 0} for n in ray.nodes()}
        for actor in ray_state.actors().values():
            node = (actor.get("Address") or {}).get("NodeID")
            if actor.get("ActorClassName") == CLIENT_ACTOR and node in nodes:
                nodes[node]["client_actors"] += 1
    finally:
        ray.shutdown()
    return list(nodes.values())
