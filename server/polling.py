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


class PollingGrid:
    """`grid` with a send_and_receive that pulls every `interval` seconds (everything else is the grid's)."""

    def __init__(self, grid: Grid, interval: float) -> None:
        if not interval > 0:
            raise ValueError(f"poll interval must be positive, got {interval!r}")
        self.grid = grid
        self.interval = float(interval)

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


def fast_polling(grid: Grid, interval: float) -> Grid | PollingGrid:
    """The grid the server loop uses: `grid` itself for the in-memory (simulation) grid or interval 0
    (Flower's own 3-s wait), else a PollingGrid."""
    from flwr.superlink.grid.inmemory_grid import InMemoryGrid

    if interval <= 0 or isinstance(grid, InMemoryGrid):
        return grid
    return PollingGrid(grid, interval)
