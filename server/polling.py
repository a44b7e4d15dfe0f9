"""Pull replies often: the ServerApp's side of the real-process round latency (docs/performance.md,
"Overhead and round latency").

Flower 1.42's HTTP grid (`flwr run` against a SuperLink) sends a round's messages, then pulls replies and
sleeps a fixed 3 s between pulls, so a round that is ready after 0.4 s waits until the next 3-s tick. Its
public `push_messages` / `pull_messages` let the ServerApp pull every `federation.poll_interval` seconds
instead (`PollingGrid`), with the same end conditions: every reply in, or the time-out. The simulation's
in-memory grid already pulls every 0.1 s and is left as it is.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from flwr.app import Message
from flwr.serverapp import Grid

# Flower 1.42's SuperLink lists a reply before its objects are all pushed, and the grid's `pull_objects` then
# waits PULL_INITIAL_BACKOFF = 1 s (doubling, capped at 10 s) before asking again: a PollingGrid starts that
# backoff at its own interval, capped at SERVER_PULL_CAP s, tries unlimited within Flower's max_time (7200 s). The
# same patch, for warm ClientApps and the SuperNodes, is in runtime/forkserver.py (a script that may import nothing of
# the app's own: hence a second copy; tests/test_supernode_launcher.py checks that both match).
PULL_MODULE = "flwr.supercore.inflatable.inflatable_utils"
PULL_FUNCTIONS = ("pull_objects", "pull_and_inflate_object_from_tree")
PULL_DEFAULTS = {"initial_backoff": 1, "backoff_cap": 10, "max_tries_per_object": 500}  # Flower 1.42's
SERVER_PULL_CAP = 1.0


def faster_object_pulls(initial: float, cap: float = SERVER_PULL_CAP) -> bool:
    """Object pulls of this process back off from `initial` to `cap` seconds, tries unlimited (within
    Flower's max_time); a second call changes nothing. On a Flower whose pulls are not where they were (another
    version) it warns, leaves Flower's own backoff and returns False: the grid still works, a little slower."""
    import importlib
    import warnings

    try:
        found = {name: getattr(importlib.import_module(PULL_MODULE), name).__kwdefaults__ or {}
                 for name in PULL_FUNCTIONS}
    except (ImportError, AttributeError) as e:
        found, moved = {}, f"{PULL_MODULE}: {e}"
    else:
        moved = next((f"{PULL_MODULE}.{name}'s defaults {d}" for name, d in found.items()
                      if d.get("max_tries_per_object") is not None
                      and {k: d.get(k) for k in PULL_DEFAULTS} != PULL_DEFAULTS), "")
    if moved:
        warnings.warn(f"server/polling.py: {moved} are not Flower 1.42's {PULL_DEFAULTS}: object pulls keep "
                      "Flower's own backoff", RuntimeWarning, stacklevel=2)
        return False
    for defaults in found.values():
        if defaults.get("max_tries_per_object") is not None:  # not yet patched in this process
            defaults.update(initial_backoff=initial, backoff_cap=max(initial, cap), max_tries_per_object=None)
    return True


class PollingGrid:
    """`grid` with a send_and_receive that pulls every `interval` seconds (everything else is the grid's)."""

    def __init__(self, grid: Grid, interval: float) -> None:
        if not interval > 0:
            raise ValueError(f"poll interval must be positive, got {interval!r}")
        self.grid = grid
        self.interval = float(interval)
        faster_object_pulls(self.interval)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.grid, name)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        waiting = set(self.grid.push_messages(messages))
        end = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while waiting:
            got = list(self.grid.pull_messages(waiting))
            replies += got
            waiting -= {m.metadata.reply_to_message_id for m in got}
            if not waiting or (end is not None and time.monotonic() >= end):
                break
            time.sleep(self.interval)
        return replies


def fast_polling(grid: Grid, interval: float | None) -> Grid | PollingGrid:
    """The grid the server loop uses: `grid` itself for the in-memory (simulation) grid or interval None
    (Flower's own 3-s wait), else a PollingGrid."""
    from flwr.superlink.grid.inmemory_grid import InMemoryGrid

    if interval is None or isinstance(grid, InMemoryGrid):
        return grid
    return PollingGrid(grid, interval)
