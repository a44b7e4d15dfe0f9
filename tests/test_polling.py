"""server/polling.py: the ServerApp pulls replies every poll_interval, with Flower's end conditions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from server.polling import PollingGrid, fast_polling


class FakeGrid:
    """Replies to message i arrive at pull number arrive[i] (never if None)."""

    def __init__(self, arrive: list[int | None]) -> None:
        self.arrive = arrive
        self.pulls = 0

    def get_node_ids(self):
        return [1, 2, 3]

    def push_messages(self, messages):
        return [f"m{i}" for i, _ in enumerate(messages)]

    def pull_messages(self, ids):
        self.pulls += 1
        return [SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=f"m{i}"))
                for i, at in enumerate(self.arrive) if at == self.pulls and f"m{i}" in set(ids)]


def test_pulls_until_every_reply_is_in():
    grid = FakeGrid([1, 3, 2])
    replies = PollingGrid(grid, 0.001).send_and_receive(["a", "b", "c"], timeout=10)
    assert sorted(r.metadata.reply_to_message_id for r in replies) == ["m0", "m1", "m2"] and grid.pulls == 3
    assert PollingGrid(grid, 0.001).get_node_ids() == [1, 2, 3]  # everything else is the grid's


def test_stops_at_the_timeout_with_what_came():
    grid = FakeGrid([1, None])
    replies = PollingGrid(grid, 0.01).send_and_receive(["a", "b"], timeout=0.05)
    assert [r.metadata.reply_to_message_id for r in replies] == ["m0"] and 3 <= grid.pulls <= 10


def test_no_message_no_pull():
    grid = FakeGrid([])
    assert PollingGrid(grid, 0.01).send_and_receive([], timeout=5) == [] and grid.pulls == 0


def test_only_a_real_grid_is_wrapped():
    from flwr.superlink.grid.inmemory_grid import InMemoryGrid

    memory = InMemoryGrid.__new__(InMemoryGrid)  # the simulation's grid already pulls every 0.1 s
    assert fast_polling(memory, 0.1) is memory
    grid = FakeGrid([])
    assert fast_polling(grid, None) is grid and isinstance(fast_polling(grid, 0.1), PollingGrid)
    with pytest.raises(ValueError):
        PollingGrid(grid, 0.0)
