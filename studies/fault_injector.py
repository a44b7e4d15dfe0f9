"""The fault injector of the fault study (studies/faults.py): `Injector` arms each fault of a schedule
(studies/fault_schedule.py) when `Federation.run` reports its round and fires it from a timer thread;
`run_with_faults` submits the run again with federation.resume = true after each server fault.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from runtime.federation import Federation, kill_process
from studies.fault_schedule import (
    FAULT_KINDS,
    SERVER_FAULT_KINDS,
    SERVERAPP_KILL,
    SUPERLINK_KILL,
    SUPERNODE_KILL,
    SUPERNODE_RESTART,
    Fault,
    Schedule,
)


@dataclass
class Injector:
    """Fires a schedule's faults at a federation. `on_round` is Federation.run's callback; each run of
    `flwr run` is one attempt (`begin_attempt` / `end_attempt`): a server fault ends its attempt, and one
    that comes due when its attempt has ended already (or lost its server) waits for the next round line.
    A restart that is not due yet when the run is over is cancelled (`cancelled`): it would test nothing."""

    fed: Federation
    schedule: Schedule
    log: Callable[[str], None] = print
    events: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    cancelled: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting = [f for f in self.schedule.faults if f.kind != SUPERNODE_RESTART]  # not armed yet
        self._at_start = [f for f in self._waiting if f.after_round == 0]  # armed with the first attempt
        self._waiting = [f for f in self._waiting if f.after_round != 0]
        self._restarts = {f.node: f for f in self.schedule.faults if f.kind == SUPERNODE_RESTART}
        self._timers: list[threading.Timer] = []
        self._workers: list[threading.Thread] = []
        self._attempt = 0
        self._server_fault: str | None = None
        self._handled = threading.Event()  # the current server fault has been dealt with
        self._armed: dict[object, Fault] = {}  # armed, not fired yet: by token
        self._last_round = 0
        self._closed = False
        self._t0 = time.monotonic()

    # the attempts --------------------------------------------------------------------------------------
    def begin_attempt(self) -> int:
        with self._lock:
            self._attempt += 1
            self._server_fault = None
            for f in self._at_start:
                self._arm(f, f.delay)
            self._at_start = []
            return self._attempt

    def end_attempt(self, timeout: float = 60.0) -> str | None:
        """Close the current attempt; returns the server fault that ended it (None: it ended by itself),
        once its processes are killed."""
        with self._lock:
            fault = self._server_fault
            self._attempt += 1  # a timer of the ended attempt finds it over
        if fault is not None:
            self._handled.wait(timeout)
        with self._lock:
            self._server_fault = None
        return fault

    def on_round(self, rnd: int) -> None:
        with self._lock:
            self._last_round = max(self._last_round, rnd)
            due = [f for f in self._waiting if f.after_round <= rnd]
            self._waiting = [f for f in self._waiting if f.after_round > rnd]
            for f in due:
                self._arm(f, f.delay if f.after_round == rnd else 0.0)

    def _arm(self, fault: Fault, delay: float) -> None:
        token = object()
        timer = threading.Timer(delay, self._fire, (fault, self._attempt, token))
        timer.daemon = True
        self._timers.append(timer)
        self._armed[token] = fault
        timer.start()

    # firing ---------------------------------------------------------------------------------------------
    def _fire(self, fault: Fault, attempt: int, token: object) -> None:
        with self._lock:
            if self._closed:
                return
            self._armed.pop(token, None)
        try:
            self._do(fault, attempt)
        except Exception as exc:  # a timer thread: report it with the run
            self.errors.append(f"{fault.kind} node={fault.node}: {type(exc).__name__}: {exc}\n"
                               f"{traceback.format_exc(limit=3)}")
            self.log(f"*** fault {fault.kind} failed: {exc}")

    def _do(self, fault: Fault, attempt: int) -> None:
        with self._lock:
            if self._closed:
                return
            if fault.kind in SERVER_FAULT_KINDS:
                if attempt != self._attempt or self._server_fault is not None:
                    self._waiting.append(replace(fault, after_round=0))  # at the next round line
                    return
                if fault.kind == SERVERAPP_KILL and not self.fed.serverapps():
                    self._waiting.append(replace(fault, after_round=0))  # no ServerApp (yet): try again
                    return
                self._server_fault = fault.kind
                self._handled.clear()
                cli = self.fed.procs.get("flwr-run")  # this attempt's `flwr run`, not a later one
            during = self._last_round + 1
        t = time.monotonic() - self._t0
        event: dict[str, Any] = {"kind": fault.kind, "node": fault.node, "after_round": self._last_round,
                                 "t_s": round(t, 1)}
        if fault.kind in SERVER_FAULT_KINDS:
            try:
                if fault.kind == SUPERLINK_KILL:
                    self.fed.kill("superlink")  # its SuperExec and ServerApp with it
                else:
                    event["pids"] = self.fed.kill_serverapp()
                if cli is not None:  # the operator's log stream of the run that lost its server
                    kill_process(cli)
            finally:
                self._handled.set()
        elif fault.kind == SUPERNODE_KILL:
            self.fed.kill(f"supernode-{fault.node}")
            restart = self._restarts.get(fault.node)
            if restart is not None:
                with self._lock:
                    if not self._closed:
                        self._arm(restart, max(0.0, restart.delay - fault.delay))
        elif fault.kind == SUPERNODE_RESTART:
            t_start = time.monotonic()
            event["starts"] = self.fed.restart_node(fault.node)
            event["activated_after_s"] = round(time.monotonic() - t_start, 1)
        else:  # pragma: no cover - make_schedule makes only FAULT_KINDS
            raise ValueError(f"unknown fault kind {fault.kind!r}")
        self.events.append(event)
        self.log(f"*** {fault.kind}{'' if fault.node is None else f' node {fault.node}'} at {t:.1f} s (after "
                 f"round {event['after_round']}, during round {during}){_extra(event)}")

    def close(self, timeout: float = 200.0) -> None:
        """Cancel the faults not fired yet; wait for those firing (a restart waits for its activation)."""
        with self._lock:
            self._closed = True
            timers = list(self._timers)
            self.cancelled = [asdict(f) for f in [*self._armed.values(), *self._waiting, *self._at_start]]
        for timer in timers:
            timer.cancel()
        deadline = time.monotonic() + timeout
        for timer in timers:
            timer.join(timeout=max(0.1, deadline - time.monotonic()))

    def counts(self) -> dict[str, int]:
        return {k: sum(e["kind"] == k for e in self.events) for k in FAULT_KINDS}


def _extra(event: dict[str, Any]) -> str:
    if "starts" in event:
        return f": activated after {event['activated_after_s']} s, {event['starts']} start(s)"
    return f": pids {event['pids']}" if event.get("pids") else ""


def run_with_faults(fed: Federation, overrides: dict[str, Any], injector: Injector, *, timeout: float = 900.0,
                    log: Callable[[str], None] = print,
                    echo: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """`flwr run` the app, and after each server fault (restarting a killed SuperLink) again with
    federation.resume = true, until a run ends by itself; returns the attempts (exit status, the fault)."""
    attempts: list[dict[str, Any]] = []
    resume = bool(overrides.get("federation.resume", False))
    most = 1 + injector.schedule.count(SUPERLINK_KILL) + injector.schedule.count(SERVERAPP_KILL)
    while True:
        injector.begin_attempt()
        t0 = time.monotonic()
        rc = fed.run({**overrides, "federation.resume": resume}, timeout=timeout, on_round=injector.on_round,
                     echo=echo)
        fault = injector.end_attempt()
        attempts.append({"rc": rc, "ended_by": fault, "seconds": round(time.monotonic() - t0, 1)})
        if fault is None:
            return attempts
        if len(attempts) >= most:
            raise RuntimeError(f"{len(attempts)} attempts for {most - 1} server faults: {attempts}")
        if fault == SUPERLINK_KILL:
            fed.restart_superlink()
        log(f"*** {fault}: submitting the run again with federation.resume=true (attempt {len(attempts) + 1})")
        resume = True
