"""A local Ray cluster on loopback, for running the simulation against an existing cluster by address.

    python -m experiments.ray_cluster --cpus 2 -- python -m experiments.run federation.ray_address=ADDRESS ...
    python -m experiments.ray_cluster --cpus 1 --worker-cpus 1 --report OUT.json -- python -m experiments.run ...

What it does, and how to read its output: studies/ray_cluster.py and runtime/ray_cluster.py.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from experiments import UsageError, command
from studies.ray_cluster import run_on_cluster


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 2, help="the head node's CPUs")
    ap.add_argument("--worker-cpus", type=int, action="append", default=[], metavar="C",
                    help="add a worker node with C CPUs (repeatable)")
    ap.add_argument("--report", type=Path, help="write the client actors per node here (JSON) after the command")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="command to run; ADDRESS is replaced")


def run(options: argparse.Namespace) -> int:
    words = [c for c in options.command if c != "--"]
    if not words:
        raise UsageError("give a command to run against the cluster")
    return run_on_cluster(words, cpus=options.cpus, workers=tuple(options.worker_cpus), report=options.report)


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
