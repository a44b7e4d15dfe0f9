"""The benchmark's per-message timing of the project's ClientApp (studies/benchmark.py), as a Flower client mod
mounted around UeDP's (`timed_client_app`): nothing of it is in client/ or in any real run.

    app = timed_client_app(cfg, directory="timings")        # a Flower run: DIR/client-PID.jsonl
    app = timed_client_app(cfg, sink=laps.append)           # in process (runtime.local_grid.LocalGrid(app=...))

Per UeDP training message (not the server's probe, not a query), seconds:
  decode   from the message reaching the app to the start of the client round: the client mod keeping the
           global arrays, the train function reading the instructions and decoding the model;
  compute  the client round (client.update.client_update, timed by `TimedRound` around it);
  encode   from the client round's end to the reply: the new model's ArrayRecord, and the client mod's part
           (theta_local - theta_t, ONE clip of the whole update, the reply);
  cpu      this message's CPU seconds in the app (this thread);
  round    the round number;
and, written to a directory only (a Flower client process), process_cpu: the process's CPU seconds so far.
Durations and the round number only: nothing about the user or the data.

`TimingMod` and `TimedRound` are module-level frozen dataclasses, so the app still pickles by reference
(client/app.py); the laps of the message in progress pass between them in a thread-local.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flwr.app import Context, Message

from client.app import ClientFn, ProjectClientApp, make_client_app
from client.update import client_update
from uedp.config import RunConfig
from uedp.flower.mod import uedp_mod
from uedp.protocol import INSTRUCTIONS_RECORD, RoundInstructions

LAPS = ("decode", "compute", "encode")
_current = threading.local()  # .laps: the _Laps of the message this thread is answering, or None


class _Laps:
    def __init__(self, round_number: int) -> None:
        self.round = round_number
        self.start = time.perf_counter()
        self.cpu = time.thread_time()
        self.compute: tuple[float, float] | None = None  # the client round's (start, end)

    def result(self, end: float) -> dict[str, float]:
        begin, done = self.compute if self.compute is not None else (end, end)
        return {"round": self.round, "decode": begin - self.start, "compute": done - begin, "encode": end - done,
                "cpu": time.thread_time() - self.cpu}


@dataclass(frozen=True)
class TimingMod:
    """The client mod that times each UeDP training message (module docstring): one JSON line per message in
    `directory`/client-PID.jsonl (with process_cpu), or, with `sink`, a dict to it (in process: no file)."""

    directory: str = ""
    sink: Callable[[dict[str, float]], None] | None = None

    def __post_init__(self) -> None:
        if not self.directory and self.sink is None:
            raise ValueError("TimingMod: give a directory or a sink for the laps")

    def __call__(self, msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        record = msg.content.config_records.get(INSTRUCTIONS_RECORD) if msg.metadata.message_type == "train" else None
        if record is None:  # the probe, a query, any other message: not timed
            return call_next(msg, context)
        laps = _Laps(RoundInstructions.from_record(record).round)
        _current.laps = laps
        try:
            reply = call_next(msg, context)
        finally:
            _current.laps = None
        self.write(laps.result(time.perf_counter()))
        return reply

    def write(self, laps: dict[str, float]) -> None:
        if self.sink is not None:  # in process: the server's process, no separate client process CPU
            self.sink(laps)
            return
        laps["process_cpu"] = time.process_time()  # the process's CPU seconds so far (all its threads)
        with open(Path(self.directory) / f"client-{os.getpid()}.jsonl", "a") as f:
            f.write(json.dumps(laps) + "\n")


@dataclass(frozen=True)
class TimedRound:
    """A client round (`inner`, default client_update) that marks its start and end in the message's laps."""

    inner: ClientFn = client_update

    def _timed(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        laps: _Laps | None = getattr(_current, "laps", None)
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            if laps is not None:
                laps.compute = (start, time.perf_counter())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed(self.inner, *args, **kwargs)

    def owner(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed(self.inner.owner, *args, **kwargs)  # type: ignore[attr-defined]


def timed_client_app(cfg: RunConfig, *, directory: str = "",
                     sink: Callable[[dict[str, float]], None] | None = None) -> ProjectClientApp:
    """The project's ClientApp (client.app.make_client_app) with the timing mod mounted outside uedp_mod and
    the client round timed: laps to `directory` (a Flower run) or to `sink` (in process)."""
    return make_client_app(cfg, update=TimedRound(), mods=[TimingMod(directory, sink), uedp_mod])
