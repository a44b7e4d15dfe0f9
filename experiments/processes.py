"""Finding local processes by their command line (/proc), for the commands that start and stop them."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def cmdline(pid: int) -> str:
    """The command line of process `pid`, arguments joined by spaces ("" if it is gone or unreadable)."""
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def pids_matching(match: Callable[[str], bool]) -> list[int]:
    """Ids of the processes (other than this one) whose command line satisfies `match`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            cmd = cmdline(int(proc.name))
            if cmd and match(cmd):
                pids.append(int(proc.name))
    return pids
