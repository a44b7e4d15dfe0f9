"""A command run against a local Ray cluster on loopback (runtime/ray_cluster.py): the cluster started, the
command run with its address, then (optionally) the Flower client actors each node hosted, and the cluster's
processes stopped on the way out, a SIGTERM included.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from runtime.ray_cluster import actors_per_node, ray_cluster


def run_on_cluster(command: list[str], *, cpus: int, workers: tuple[int, ...] = (), report: Path | None = None
                   ) -> int:
    """Run `command` (each ADDRESS in it replaced by the cluster's address, RAY_ADDRESS set) on a cluster of a head
    node with `cpus` CPUs and a worker node per entry of `workers`; with `report`, the client actors per node
    as JSON there. Returns the command's exit status."""
    # a SIGTERM (kill PID) unwinds like Ctrl-C, so the cluster's processes are stopped on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with ray_cluster(cpus=cpus, workers=workers) as address:
        print(f"Ray cluster at {address} ({1 + len(workers)} node(s))", flush=True)
        rc = subprocess.run([c.replace("ADDRESS", address) for c in command],
                            env={**os.environ, "RAY_ADDRESS": address}).returncode
        if report:
            nodes = actors_per_node(address)
            report.parent.mkdir(parents=True, exist_ok=True)
            report.write_text(json.dumps(nodes, indent=1))
            for n in nodes:
                print(f"node {n['node']} ({'head' if n['head'] else 'worker'}, {n['cpus']:g} CPUs): "
                      f"{n['client_actors']} Flower client actor(s)", flush=True)
    print(f"command exited {rc}; Ray cluster stopped", flush=True)
    return rc
