"""Finding local processes by their command line (psutil), for the commands that start and stop them."""

from __future__ import annotations

import os
from collections.abc import Callable

import psutil

# What reading a process can raise: it exited (NoSuchProcess; ZombieProcess is a subclass), or it is not ours.
GONE = (psutil.NoSuchProcess, psutil.AccessDenied)


def pids_matching(match: Callable[[str], bool]) -> list[int]:
    """Ids of the processes (other than this one) whose command line satisfies `match`."""
    pids = []
    # process_iter skips a process that exits between listing and reading; one that cannot be read
    # (a zombie, or another user's) gets cmdline None and is skipped as "".
    for proc in psutil.process_iter(["cmdline"], ad_value=None):
        cmd = " ".join(proc.info["cmdline"] or ())
        if proc.pid != os.getpid() and cmd and match(cmd):
            pids.append(proc.pid)
    return pids
