"""Finding local processes by their command line (psutil), for the commands that start and stop them, and
the process trees of the processes a federation starts (Flower's SuperLink runs its SuperExec, and so every
ServerApp, in a session of its own: outside the SuperLink's process group)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable

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


def descendants(pid: int) -> list[psutil.Process]:
    """Every process below `pid` (children, their children, ...), whatever their process group or session;
    [] if `pid` is gone. Read them BEFORE stopping `pid`: an orphan is re-parented and no longer found."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except GONE:
        return []


def command_line(proc: psutil.Process) -> str:
    """The process's command line ("" once it has exited or cannot be read)."""
    try:
        return " ".join(proc.cmdline())
    except GONE:
        return ""


def running(proc: psutil.Process) -> bool:
    """Whether `proc` still runs: not exited, not a zombie (exited, not yet reaped by a parent that is not
    ours), and its pid not reused by another process."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except GONE:
        return False


def kill_all(procs: Iterable[psutil.Process], sig: int = signal.SIGKILL, *, timeout: float = 10.0) -> list[int]:
    """Send `sig` to each process still running (psutil refuses a pid reused by another process) and wait
    until none runs (or `timeout`); returns the pids that still run then."""
    procs = [p for p in procs if running(p)]
    for p in procs:
        with contextlib.suppress(*GONE):
            p.send_signal(sig)
    deadline = time.monotonic() + timeout
    while (left := [p for p in procs if running(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p.pid for p in left]
