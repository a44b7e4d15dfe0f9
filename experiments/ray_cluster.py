"""A local Ray cluster on loopback, for running the simulation against an existing cluster by address.

    python -m experiments.ray_cluster --cpus 2 -- python -m experiments.run federation.ray_address=ADDRESS ...
    python -m experiments.ray_cluster --cpus 1 --worker-cpus 1 --report OUT.json -- python -m experiments.run ...

What it does, and how to read its output: runtime/ray_cluster.py.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from runtime.ray_cluster import actors_per_node, ray_cluster


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 2, help="the head node's CPUs")
    ap.add_argument("--worker-cpus", type=int, action="append", default=[], metavar="C",
                    help="add a worker node with C CPUs (repeatable)")
    ap.add_argument("--report", type=Path, help="write the client actors per node here (JSON) after the command")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="command to run; ADDRESS is replaced")
    args = ap.parse_args(argv)
    command = [c for c in args.command if c != "--"]
    # a SIGTERM (kill PID) unwinds like Ctrl-C, so the cluster's processes are stopped on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not command:
        ap.error("give a command to run against the cluster")
    with ray_cluster(cpus=args.cpus, workers=tuple(args.worker_cpus)) as address:
        print(f"Ray cluster at {address} ({1 + len(args.worker_cpus)} node(s))", flush=True)
        rc = subprocess.run([c.replace("ADDRESS", address) for c in command],
                            env={**os.environ, "RAY_ADDRESS": address}).returncode
        if args.report:
            nodes = actors_per_node(address)
            args.report.parent.mkdir(parents=True, exist_ok=True)
            args.report.write_text(json.dumps(nodes, indent=1))
            for n in nodes:
                print(f"node {n['node']} ({'head' if n['head'] else 'worker'}, {n['cpus']:g} CPUs): "
                      f"{n['client_actors']} Flower client actor(s)", flush=True)
    print(f"command exited {rc}; Ray cluster stopped", flush=True)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
