"""The public round schedule of UeDP's wrapper (uedp.flower.strategy.UserEntityDP's round_period, seconds): round t
of `start` starts at `start` plus t periods, waits for its replies until its deadline (its due time plus
`start`'s timeout; `ScheduledGrid`) and returns its release at a public time (`RoundSchedule.hold_release`), so
that the rounds' timing depends on no one's data or presence. Before round 1 the period is checked against the
timeout, a grid's lateness after it and the server's measured work (`RoundSchedule.check`). With round_period None
the rounds run back to back and none of this applies (the timing is then outside the guarantee).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flwr.app import ArrayRecord, Message, MetricRecord

from uedp.errors import ConfigError
from uedp.flower.places import IN_PROCESS, SIMULATION
from uedp.protocol import is_probe

SCHEDULE_MARGIN = 1.25  # round_period must exceed the timeout plus this many times the measured server work
GRID_POLL_MARGIN = 3.0  # ... plus this: how late a grid may return after its time-out (HttpGrid: 3 s polls)
SIMULATION_POLL_MARGIN = 0.2  # ... on a simulation's or in-process grid (Flower's InMemoryGrid: 0.1 s polls)
SCHEDULED_POLL = 0.1  # a scheduled round pulls its replies this often, until its deadline


class RoundSchedule:
    """The schedule's state: the period, the clock, when it began (`begin`: `start`, or the first round),
    `start`'s timeout, the evaluate_fn time measured at round 0 (`timed`), whether the period was checked, the
    release's slack after a round's deadline, and the round whose replies the scheduled grid waits for."""

    def __init__(self, period: float | None, *, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
        self.period = period  # None: no schedule (rounds back to back)
        self.clock = clock
        self.sleep = sleep
        self.start: float | None = None
        self.timeout: float | None = None  # `start`'s timeout (None: driven without `start`)
        self.eval_seconds = 0.0  # evaluate_fn at round 0 (start), for the check
        self.checked = False
        self.release_slack = 0.0  # a scheduled round's release: its deadline plus this (`check`)
        self.scheduled_round = 0  # the round whose replies the scheduled grid waits for (its deadline)

    def begin(self) -> None:
        if self.start is None:
            self.start = self.clock()

    def due(self, server_round: int) -> float:
        """When round `server_round` (of this process's `start`) is due to start: `start` + server_round periods."""
        self.begin()
        assert self.start is not None and self.period is not None
        return self.start + server_round * self.period

    def check(self, measure: Callable[[], float], kind: str) -> None:
        """round_period against the timeout, a grid's lateness after it (GRID_POLL_MARGIN; on a grid of `kind`)
        and the server's work, `measure()`d on a worst-case synthetic round, and `evaluate_fn` at round 0. Once."""
        if self.period is None or self.checked:
            return
        self.checked = True
        work = measure()
        poll = GRID_POLL_MARGIN if kind not in (SIMULATION, IN_PROCESS) else SIMULATION_POLL_MARGIN
        self.release_slack = poll + SCHEDULE_MARGIN * work
        need = (self.timeout or 0.0) + poll + SCHEDULE_MARGIN * (work + self.eval_seconds)
        if self.period <= need:
            raise ConfigError(
                f"round_period {self.period:g} s is too short: a round needs up to the timeout "
                f"({self.timeout or 0:g} s) plus {poll:g} s (the grid's lateness after it) plus "
                f"{SCHEDULE_MARGIN:g} x (a worst-case round's server work, {work:.2f} s, and evaluate_fn, "
                f"{self.eval_seconds:.2f} s, measured now) = {need:.1f} s; with a shorter period some rounds "
                "would start late, and when depends on who was sampled. Nothing was sampled, sent or charged")

    def keep(self, server_round: int) -> bool:
        """With a round_period, wait until round `server_round`'s public start: `start` plus server_round
        periods (the period before round 1 holds the preflight). A round that is due already starts at once and
        is counted late (its start then depends on the rounds before it), with no grace. Returns lateness."""
        if self.period is None:
            return False
        due = self.due(server_round)
        now = self.clock()
        if now > due:  # counted with the round (aggregate_train), or alone if the round never ends
            return True
        self.sleep(due - now)
        return False

    def hold_release(self, server_round: int) -> bool:
        """A scheduled round (under `start`) returns its release at a public time: its deadline plus the grid's
        lateness and 1.25 times the worst-case server work measured before round 1, so that when Flower prints
        the round's MetricRecord (and anything after it) does not tell how many replies it had to decode and
        sum. Returns whether the release was later than that (the round is then counted late)."""
        if self.period is None or self.timeout is None or not self.checked:
            return False
        release = self.due(server_round) + self.timeout + self.release_slack
        now = self.clock()
        if now > release:
            return True
        self.sleep(release - now)
        return False

    def timed(self, evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None
              ) -> Callable[[int, ArrayRecord], MetricRecord | None] | None:
        """`evaluate_fn`, its longest call recorded for the check when the run is scheduled."""
        if evaluate_fn is None or self.period is None:
            return evaluate_fn

        def timed(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            t0 = self.clock()
            try:
                return evaluate_fn(server_round, arrays)
            finally:
                self.eval_seconds = max(self.eval_seconds, self.clock() - t0)

        return timed


class ScheduledGrid:
    """The grid of a scheduled run (a round_period). A round's messages are pushed and its replies pulled every
    SCHEDULED_POLL seconds until its public deadline, its due time plus `start`'s timeout (never longer for a
    round that started late; a last pull at the deadline), through the grid's own `push_messages` /
    `pull_messages` (a grid of one's own without them: its send_and_receive, to the deadline); then the round
    waits for the deadline, however early the replies came, a round with no one sampled included. (Flower's
    HttpGrid.send_and_receive would sleep 3 s between pulls and return up to 3 s after its time-out, later when
    a sampled node had not answered: adversarial read #5.) The probe and Flower's evaluation step (the send
    after a round's) pass through."""

    def __init__(self, grid: Any, schedule: RoundSchedule) -> None:
        self.grid = grid  # (uedp.flower.places.grid_kind reads it)
        self.schedule = schedule

    def __getattr__(self, name: str) -> Any:
        return getattr(self.grid, name)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        messages = list(messages)
        s = self.schedule
        if not s.scheduled_round or any(is_probe(m) for m in messages):  # not a round's send (evaluation)
            return list(self.grid.send_and_receive(messages, timeout=timeout))
        rnd, s.scheduled_round = s.scheduled_round, 0  # a round's send, once, empty (no one sampled) or not
        deadline = s.due(rnd) + (s.timeout or 0.0)
        push, pull = getattr(self.grid, "push_messages", None), getattr(self.grid, "pull_messages", None)
        if not messages:
            replies: list[Message] = []
        elif callable(push) and callable(pull):
            replies = self._pull_until(deadline, push, pull, messages)
        else:
            replies = list(self.grid.send_and_receive(messages, timeout=max(0.0, deadline - s.clock())))
        s.sleep(max(0.0, deadline - s.clock()))
        return replies

    def _pull_until(self, deadline: float, push: Callable[..., Any], pull: Callable[..., Any],
                    messages: list[Message]) -> list[Message]:
        clock, sleep = self.schedule.clock, self.schedule.sleep
        pending = {i for i in push(messages) if i}
        replies: list[Message] = []
        while pending:
            got = list(pull(list(pending)))
            replies.extend(got)
            pending -= {r.metadata.reply_to_message_id for r in got}
            now = clock()
            if not pending or now >= deadline:
                break
            sleep(min(SCHEDULED_POLL, deadline - now))
        return replies
