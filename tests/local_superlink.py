"""The environment of a test's `flwr run` on Flower's local connection, and the stop of what it started.

`flwr run` on the local connection first probes 127.0.0.1:$FLWR_LOCAL_SUPERLINK_HTTP_API_PORT (39091 by
default) and, if a SuperLink answers there, submits the run to it instead of starting its own. Two tests on the
default ports at once (pytest -n 2) would then run one test's app in the other's SuperLink, with that
SuperLink's interpreter and packages. So each test gets its own FLWR_HOME and its own two local ports.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from runtime.federation import free_port
from runtime.processes import pids_matching


def local_flwr_env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment with FLWR_HOME=`home`, two free local SuperLink ports, no per-run
    dependency installation, and `extra` on top."""
    return {**os.environ, "FLWR_HOME": str(home), "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
            "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            **extra}


def superlinks(home: Path) -> list[int]:
    """Process ids of the SuperLinks started for this FLWR_HOME (their log file lives under it)."""
    return pids_matching(lambda cmd: "flower-superlink" in cmd and str(home) in cmd)


def stop_superlinks(home: Path) -> None:
    for pid in superlinks(home):
        with contextlib.suppress(ProcessLookupError):  # it may exit between listing and signalling
            os.kill(pid, signal.SIGTERM)
