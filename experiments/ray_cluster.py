"""A local Ray cluster on loopback, for running the simulation against an existing cluster by address.

    python -m experiments.ray_cluster --cpus 2 -- python -m experiments.run federation.ray_address=ADDRESS ...

starts `ray start --head` (its own temporary directory and port), replaces ADDRESS in the command with the
cluster's address (127.0.0.1:PORT), runs the command, and stops the cluster's processes by process id
(never `ray stop`, which would stop every Ray cluster of this user). On a real cluster, skip this: set
`federation.ray_address=HEAD:PORT` (or RAY_ADDRESS) and run `python -m experiments.run` on the head node.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from experiments.federation import executable, free_port
from experiments.processes import pids_matching


def _cluster_pids(markers: tuple[str, ...]) -> list[int]:
    """Processes whose command line contains a marker; the line ends in a space, so that a marker ending in a
    space (an argument ending in ":PORT") also matches the last argument."""
    return pids_matching(lambda cmd: any(m in cmd + " " for m in markers))


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


@contextlib.contextmanager
def ray_cluster(*, cpus: int = 2, temp_dir: Path | None = None) -> Iterator[str]:
    """Start a single-node Ray head on loopback; yield its address; stop its processes on exit."""
    temp = Path(temp_dir or tempfile.mkdtemp(prefix="uedp-ray-", dir="/tmp"))  # short: AF_UNIX paths <= 107 bytes
    port = free_port()
    markers = (str(temp), f":{port} ", f":{port}\n", f"--gcs-address=127.0.0.1:{port}", f"--address=127.0.0.1:{port}")
    ray = executable("ray", install="pip install 'flwr[simulation]'")
    cmd = [ray, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", f"--num-cpus={cpus}",
           "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats"]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"ray start failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        yield f"127.0.0.1:{port}"
    finally:
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):  # gcs_server may outlive SIGTERM
            _signal_all(_cluster_pids(markers), sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _cluster_pids(markers):
                time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    ap.add_argument("command", nargs=argparse.REMAINDER, help="command to run; ADDRESS is replaced")
    args = ap.parse_args(argv)
    command = [c for c in args.command if c != "--"]
    if not command:
        ap.error("give a command to run against the cluster")
    with ray_cluster(cpus=args.cpus) as address:
        print(f"Ray cluster at {address}", flush=True)
        rc = subprocess.run([c.replace("ADDRESS", address) for c in command],
                            env={**os.environ, "RAY_ADDRESS": address}).returncode
    print(f"command exited {rc}; Ray cluster stopped", flush=True)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
