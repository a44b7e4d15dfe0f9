"""Load and faults at once (the README's "Reliability"): a real-process federation of data owners who keep their own
files, over TLS with SuperNode authentication, while a fault injector SIGKILLs random SuperNodes during
rounds, restarts some of them, and kills the SuperLink (restarted) and the ServerApp alone once each; after
each server fault the run is continued with a new `flwr run` and federation.resume = true. Over several
runs with different seeds, every run must finish its rounds with an intact ledger whose records equal those
of a fault-free run of the same settings, and leave no private output half-written.

    python -m experiments.faults [--nodes 20] [--runs 3] [--rounds 5] [--seed 0] [--out docs/figures/faults]

The schedule (`make_schedule`, a pure function of the seed): the SuperLink and the ServerApp are each
killed once, after two different rounds before the last (SIGKILL `delay` seconds after the round's progress
line, so during the next round); `node_kills` distinct random SuperNodes are SIGKILLed after random rounds
before the last, and `restarts` of them are started again `RESTART_AFTER` s later (Flower 1.42 refuses to
activate a SIGKILLed node's key again until its heartbeat has expired, up to 2 x 30 s;
runtime/federation.py's `restart_node` retries until it is accepted). The injector (`Injector`) arms each
fault when `Federation.run` reports its round (the `on_round` callback) and fires it from a timer thread.
A SuperLink kill takes its SuperExec and ServerApp with it; it is started again on the same port and
database. A ServerApp kill leaves the SuperLink and the nodes running. Either way the operator's `flwr run`
(a log stream) is stopped and the run submitted again with federation.resume = true.

The checks (`check_outputs`): ledger.json loads (`Ledger.load`: contiguous rounds, hash chain), holds
exactly the run's rounds and its records equal the fault-free run's record for record (the public mechanism
parameters of each round: a resumed run neither repeats, skips nor changes a round; "records lost" counts
the reference's rounds that are missing or recorded differently); summary.json, checkpoint.pt, model.pt,
metrics.jsonl and metrics.csv parse, the checkpoint is of a charged round, metrics rows are of charged
rounds only, in order; no temporary file of an atomic write (`.*.tmp`) is left anywhere in the run's
folder; no process of the federation is left running after it stops; and the last `flwr run` ends with the
SuperLink's status "finished:completed" for its run (`last_run_problem`: `flwr run --stream` exits 0 also when
the ServerApp died, so Federation.run asks the SuperLink). A ServerApp killed after a
round's ledger save and before that round's checkpoint leaves the round charged while its update is lost:
the resumed run continues from the last checkpoint (uedp/flower/resume.py), and "updates lost" sums what its
"resuming after round R (checkpoint of round C; N round(s) after it stay charged" lines report (N); a round
lost that way has no metrics row, and if it was the last one, the run's final checkpoint and model are of
round C. The fault-free reference runs first, the same federation size and settings, either in this
process (`reference="in-process"`, the default of the command: runtime.local_grid, the same server loop and
client handlers without Flower, so equal records also say the real-process path records what the loop
does) or as real processes (`"processes"`); both read the owners' files of the study.

Memory: every `sample_every` s the proportional set size (PSS, studies/scaling.py's `tree_memory`) of each
SuperNode's whole process tree (its SuperExec and ClientApp processes included) and of the whole federation
(SuperLink, SuperExec, ServerApp, `flwr run` and all nodes); the table gives the largest per node, the mean
of the nodes' peaks and the federation's peak. PSS divides each shared page among the processes that map
it, so per-node figures add up to the machine's use.

Writes OUT.md and OUT.json (the rows, the settings, every fault injected with its time).
"""

from __future__ import annotations

import csv
import json
import math
import random
import re
import shutil
import statistics
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from runtime.federation import COMPLETED, TASK_POLL, Federation, Owners, federation, kill_process
from runtime.processes import descendants, kill_all, running
from studies.scaling import tree_memory
from uedp.errors import ConfigError
from uedp.flower.checkpoint import CHECKPOINT, load_checkpoint
from uedp.flower.resume import LEDGER, METRICS
from uedp.markdown import dict_table
from uedp.privacy.ledger import Ledger, RoundRecord
from uedp.summary import SUMMARY

SUPERNODE_KILL, SUPERNODE_RESTART = "supernode_kill", "supernode_restart"
SUPERLINK_KILL, SERVERAPP_KILL = "superlink_kill", "serverapp_kill"
FAULT_KINDS = (SUPERNODE_KILL, SUPERNODE_RESTART, SUPERLINK_KILL, SERVERAPP_KILL)
SERVER_FAULT_KINDS = (SUPERLINK_KILL, SERVERAPP_KILL)
# Flower 1.42: a node is "online" until 2 (HEARTBEAT_PATIENCE) x 30 s (its heartbeat interval) after its last
# heartbeat; a restart before then is refused, and restart_node starts it again every few seconds.
RESTART_AFTER = 60.0
METRICS_CSV = "metrics.csv"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# server/setup.py's line when a run resumes: the ledger's last round, the checkpoint's, the rounds between
RESUMED = re.compile(r"resuming after round (\d+) \(checkpoint of round (\d+); (\d+) round\(s\) after it stay charged")
MODEL = "model.pt"


# -- the schedule -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fault:
    kind: str  # one of FAULT_KINDS
    after_round: int  # armed when this round's progress line is seen (restarts: when their node is killed); 0:
    # when the run is first submitted (make_schedule never uses 0: its faults come during rounds)
    delay: float  # seconds after that line (restarts: after the line too, RESTART_AFTER past their kill)
    node: int | None = None  # the SuperNode (partition id) of a supernode_* fault


@dataclass(frozen=True)
class Schedule:
    seed: int
    nodes: int
    rounds: int
    faults: tuple[Fault, ...]

    def count(self, kind: str) -> int:
        return sum(f.kind == kind for f in self.faults)

    def to_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "nodes": self.nodes, "rounds": self.rounds,
                "faults": [asdict(f) for f in self.faults]}


def make_schedule(seed: int, *, nodes: int, rounds: int, node_kills: int | None = None,
                  restarts: int | None = None, max_delay: float = 3.0,
                  restart_after: float = RESTART_AFTER) -> Schedule:
    """The faults of one run, from `seed` alone (see the module docstring). Defaults: nodes // 5 node kills
    (at least 1), half of them (rounded up) restarted; a node that is restarted is killed after a round of
    the first half of the run (so that it comes back while the run goes on)."""
    if rounds < 3:
        raise ValueError(f"at least 3 rounds (the SuperLink and the ServerApp are killed after two different "
                         f"rounds before the last), got {rounds}")
    node_kills = max(1, nodes // 5) if node_kills is None else node_kills
    if not 0 <= node_kills < nodes:
        raise ValueError(f"node_kills must be in [0, {nodes - 1}] (one node at least stays), got {node_kills}")
    restarts = math.ceil(node_kills / 2) if restarts is None else restarts
    if not 0 <= restarts <= node_kills:
        raise ValueError(f"restarts must be in [0, node_kills = {node_kills}], got {restarts}")
    if not max_delay >= 0 or not restart_after >= 0:
        raise ValueError("max_delay and restart_after must be non-negative")
    rng = random.Random(seed)
    link_round, app_round = rng.sample(range(1, rounds), 2)
    faults = [Fault(SUPERLINK_KILL, link_round, rng.uniform(0, max_delay)),
              Fault(SERVERAPP_KILL, app_round, rng.uniform(0, max_delay))]
    victims = rng.sample(range(nodes), node_kills)
    early = range(1, max(2, rounds // 2 + 1))  # a node that comes back is killed in the first half of the run
    for i, node in enumerate(victims):
        kill = Fault(SUPERNODE_KILL, rng.choice(early if i < restarts else range(1, rounds)),
                     rng.uniform(0, max_delay), node)
        faults.append(kill)
        if i < restarts:
            faults.append(replace(kill, kind=SUPERNODE_RESTART,
                                  delay=kill.delay + restart_after + rng.uniform(0, max_delay)))
    faults.sort(key=lambda f: (f.after_round, f.delay, FAULT_KINDS.index(f.kind)))
    return Schedule(seed, nodes, rounds, tuple(faults))


# -- the injector -------------------------------------------------------------------------------------------
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


# -- memory -------------------------------------------------------------------------------------------------
class MemorySampler(threading.Thread):
    """Peak PSS of each process of `fed` with its whole tree, and of the federation, every `every` s. Keeps
    every descendant it saw, to check afterwards that none is left running (`leftovers`)."""

    def __init__(self, fed: Federation, every: float = 3.0) -> None:
        super().__init__(daemon=True)
        self.fed, self.every = fed, every
        self.peak: dict[str, int] = {}
        self.peak_total = 0
        self.seen: dict[int, Any] = {}
        self._stop_event = threading.Event()

    def sample(self) -> None:
        total = 0
        for name, proc in list(self.fed.procs.items()):
            if proc.poll() is not None:
                continue
            for p in descendants(proc.pid):
                self.seen.setdefault(p.pid, p)
            size = tree_memory(proc.pid)
            self.peak[name] = max(self.peak.get(name, 0), size)
            total += size
        self.peak_total = max(self.peak_total, total)

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self.every)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=30)

    def leftovers(self) -> list[int]:
        """Descendants seen during the run that still run (killed here, by pid, after they are counted)."""
        left = [p for p in self.seen.values() if running(p)]
        kill_all(left)
        return [p.pid for p in left]

    def nodes(self) -> list[int]:
        return [v for k, v in self.peak.items() if k.startswith("supernode-")]


# -- the checks ---------------------------------------------------------------------------------------------
@dataclass
class OutputCheck:
    rounds: int = 0  # rounds in the ledger
    records_lost: int = 0  # reference rounds missing from the ledger or recorded differently
    ledger: list[str] = field(default_factory=list)  # what is wrong with the ledger (against the reference)
    outputs: list[str] = field(default_factory=list)  # ... with the other outputs (half-written, left behind)
    temporaries: list[str] = field(default_factory=list)  # temporaries of atomic writes left (also in outputs)

    @property
    def ledger_intact(self) -> bool:
        return not self.ledger

    @property
    def outputs_intact(self) -> bool:
        return not self.outputs

    @property
    def problems(self) -> list[str]:
        return self.ledger + self.outputs

    @property
    def ok(self) -> bool:
        return not self.problems


def check_outputs(out: Path, reference: Sequence[RoundRecord] | None, *, rounds: int) -> OutputCheck:
    """What a finished run left in `out` (see the module docstring), against the fault-free `reference`'s
    records (None: the reference run itself, checked on its own)."""
    check = OutputCheck()
    records: list[RoundRecord] = []
    try:
        records = list(Ledger.load(out / LEDGER).records)
    except ConfigError as exc:
        check.ledger.append(f"{LEDGER}: {exc}")
    check.rounds = len(records)
    if len(records) != rounds:
        check.ledger.append(f"{LEDGER} has {len(records)} rounds, not {rounds}")
    if reference is not None:
        if len(reference) != rounds:
            check.ledger.append(f"the reference has {len(reference)} rounds, not {rounds}")
        check.records_lost = sum(i >= len(records) or records[i] != ref for i, ref in enumerate(reference))
        if check.records_lost:
            check.ledger.append(f"{check.records_lost} of the reference's {len(reference)} records are missing or "
                                "different")
        if len(records) > len(reference):
            check.ledger.append(f"{LEDGER} has {len(records) - len(reference)} round(s) the reference lacks")
    problems = check.outputs
    try:
        summary = json.loads((out / SUMMARY).read_text())
        if summary.get("rounds") != rounds:
            problems.append(f"{SUMMARY}: rounds = {summary.get('rounds')!r}, not {rounds}")
    except (OSError, ValueError) as exc:
        problems.append(f"{SUMMARY}: {exc}")
    try:
        ckpt = load_checkpoint(out)
        if ckpt is None:
            problems.append(f"{CHECKPOINT} missing")
        elif not 1 <= ckpt.round <= len(records):  # older than the last round after a crash past its ledger save
            problems.append(f"{CHECKPOINT} is of round {ckpt.round}, outside {LEDGER}'s rounds 1..{len(records)}")
    except Exception as exc:  # torch.load of a truncated file raises several kinds
        problems.append(f"{CHECKPOINT}: {type(exc).__name__}: {exc}")
    try:
        import torch

        torch.load(out / MODEL, map_location="cpu", weights_only=False)
    except Exception as exc:
        problems.append(f"{MODEL}: {type(exc).__name__}: {exc}")
    problems += _check_metrics(out, [r.round for r in records])
    check.temporaries = [str(p.relative_to(out)) for p in sorted(out.rglob(".*.tmp"))]
    problems += [f"temporary file left: {t}" for t in check.temporaries]
    return check


def _check_metrics(out: Path, charged: list[int]) -> list[str]:
    """metrics.jsonl: every line a JSON row of a charged round, in increasing order (a round whose ServerApp
    died after its ledger save and before its row has none); metrics.csv: the same rounds."""
    problems: list[str] = []
    seen: list[int] = []
    try:
        lines = (out / METRICS).read_text().splitlines()
    except OSError as exc:
        return [f"{METRICS}: {exc}"]
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rnd = json.loads(line)["round"]
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"{METRICS} line {i}: not a row ({type(exc).__name__})")
            continue
        if rnd not in charged:
            problems.append(f"{METRICS} line {i}: round {rnd} is not in {LEDGER}")
        if seen and rnd <= seen[-1]:
            problems.append(f"{METRICS} line {i}: round {rnd} after round {seen[-1]}")
        seen.append(rnd)
    if not seen:
        problems.append(f"{METRICS}: no row")
    try:
        with (out / METRICS_CSV).open(newline="") as f:
            csv_rounds = [int(float(r["round"])) for r in csv.DictReader(f)]
        if csv_rounds != seen:
            problems.append(f"{METRICS_CSV}: rounds {csv_rounds} are not {METRICS}'s {seen}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        problems.append(f"{METRICS_CSV}: {type(exc).__name__}: {exc}")
    return problems


# -- one run ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    nodes: int = 20
    rounds: int = 5
    q_u: float | None = None  # None: 3 expected nodes per round (a round's ClientApp starts fit on 2 cores)
    node_kills: int | None = None  # None: make_schedule's default
    restarts: int | None = None
    max_delay: float = 3.0
    restart_after: float = RESTART_AFTER
    target_epsilon: float = 6.0  # z calibrated to it (cached on disk); 0: z = noise_multiplier, no calibration
    noise_multiplier: float = 1.0
    checkpoint_every: int = 2  # rounds charged after the last checkpoint stay charged on resume
    round_timeout: float = 45.0  # a round with a killed node that is still "online" waits this long at most
    wait_timeout: float = 5.0  # a resumed run waits this long for nodes that are down, then goes on
    task_poll: float | None = None  # a node's SuperExec task poll (s); None: TASK_POLL below 10 nodes, else 1.0
    sample_every: float = 3.0
    timeout: float = 900.0  # per `flwr run`

    @property
    def sampling(self) -> float:
        return min(1.0, 3.0 / self.nodes) if self.q_u is None else self.q_u

    @property
    def poll(self) -> float:
        """Many idle SuperExecs polling every 0.2 s cost the 2 cores more than the latency they save."""
        return self.task_poll if self.task_poll is not None else TASK_POLL if self.nodes < 10 else 1.0


def write_owners(work: Path, nodes: int) -> tuple[Path, Path]:
    """The owners' own files (one per node, work/owners/owner-*/data.jsonl) and a public evaluation file
    (work/eval), made once per study (each owner's cache next to its file persists across runs)."""
    from uedp.owner_files import write_owner_files

    small = {"min_sentences": 20, "max_sentences": 25}
    owners_dir = work / "owners"
    if len(list(owners_dir.glob("owner-*/data.jsonl"))) != nodes:
        shutil.rmtree(owners_dir, ignore_errors=True)
        write_owner_files(owners_dir, dataset="synthetic", options={"num_users": nodes, **small})
    evaluation = work / "eval" / "owner-000" / "data.jsonl"
    if not evaluation.is_file():
        write_owner_files(work / "eval", dataset="synthetic", splits=("test",),
                          options={"num_users": 1, "seed": 7, **small})
    return owners_dir, evaluation


def overrides(settings: Settings, owners: Owners, evaluation: Path, out: Path) -> dict[str, Any]:
    """The run config (tiny model, UeDP, owners' files, a public evaluation file)."""
    n = settings.nodes
    return {
        "dataset.options": json.dumps({"num_users": n, "min_sentences": 20, "max_sentences": 25}),
        "tokenizer.vocab_size": 300, "model.options": json.dumps({"emb_dim": 16, "hidden_dim": 16}),
        "entities.detector": "rules", "privacy.q_u": settings.sampling, "privacy.m_max": n,
        "privacy.delta": 1e-3, "privacy.target_epsilon": settings.target_epsilon,
        "privacy.noise_multiplier": settings.noise_multiplier, "federation.rounds": settings.rounds,
        "federation.eval_every": settings.rounds, "federation.checkpoint_every": settings.checkpoint_every,
        "federation.round_timeout": settings.round_timeout, "federation.wait_timeout": settings.wait_timeout,
        "federation.eval_data": str(evaluation), "federation.out_dir": str(out), **owners.overrides(),
    }


def _memory_row(sampler: MemorySampler) -> dict[str, Any]:
    per_node = sampler.nodes()
    return {"pss_node_max_mib": max(per_node, default=0) / 2**20,
            "pss_node_mean_mib": statistics.mean(per_node) / 2**20 if per_node else float("nan"),
            "pss_total_peak_gib": sampler.peak_total / 2**30}


def run_one(work: Path, settings: Settings, owners_dir: Path, evaluation: Path, *, schedule: Schedule | None,
            reference: Sequence[RoundRecord] | None, name: str,
            log: Callable[[str], None] = print) -> tuple[dict[str, Any], list[RoundRecord]]:
    """One run in work/NAME (fault-free when `schedule` is None); returns its table row and its ledger's
    records."""
    base = work / name
    shutil.rmtree(base, ignore_errors=True)
    out = base / "run"
    owners = Owners(Owners.from_dir(owners_dir, base).files, (work / "server-cache").resolve())
    cfg = overrides(settings, owners, evaluation, out)
    row: dict[str, Any] = {"run": name, "seed": None if schedule is None else schedule.seed,
                           "nodes": settings.nodes, "rounds": settings.rounds, "q_u": settings.sampling}
    t0 = time.perf_counter()
    injector = None
    attempts: list[dict[str, Any]] = []

    resumes: list[dict[str, int]] = []

    def echo(line: str) -> None:  # the run's log stream, less Flower's empty INFO lines and DEBUG lines
        text = ANSI.sub("", line).strip()
        if m := RESUMED.search(text):
            resumes.append({"after_round": int(m[1]), "checkpoint_round": int(m[2]), "charged_not_applied": int(m[3])})
        if text and not text.startswith("DEBUG") and text.rstrip(": ") not in ("INFO", "INFO:flwr"):
            log(f"[{name}]   {text}")

    error = None
    with federation(settings.nodes, base / "home", auth=True, node_config=owners.node_config(),
                    env=owners.env(), task_poll=settings.poll) as fed:
        sampler = MemorySampler(fed, settings.sample_every)
        sampler.start()
        try:
            waited = fed.wait_for_nodes(timeout=300)
            log(f"[{name}] {settings.nodes} SuperNodes activated {time.perf_counter() - t0:.0f} s after the start "
                f"(waited {waited:.0f} s)")
            if schedule is None:
                rc = fed.run(cfg, timeout=settings.timeout, echo=echo)
                attempts = [{"rc": rc, "ended_by": None}]
            else:
                injector = Injector(fed, schedule, log=lambda s: log(f"[{name}] {s}"))
                try:
                    attempts = run_with_faults(fed, cfg, injector, timeout=settings.timeout,
                                               log=lambda s: log(f"[{name}] {s}"), echo=echo)
                finally:
                    injector.close()
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log(f"[{name}] FAILED: {error}")
        finally:
            sampler.stop()
    wall = time.perf_counter() - t0
    if attempts:  # the SuperLink's status of the last attempt's run (None: not asked, its flwr run failed)
        attempts[-1]["run_status"] = None if fed.last_run is None else asdict(fed.last_run)
    leftovers = [str(pid) for pid in sampler.leftovers()] + fed.alive()
    check = check_outputs(out, reference, rounds=settings.rounds)
    records = list(Ledger.load(out / LEDGER).records) if (out / LEDGER).is_file() and check.ledger_intact else []
    counts = injector.counts() if injector is not None else dict.fromkeys(FAULT_KINDS, 0)
    problems = ([error] if error else []) + check.problems
    if injector is not None:
        problems += injector.errors
        # a restart that was not due yet when the run ended is cancelled: every other fault must have happened
        cancelled = sum(c["kind"] == SUPERNODE_RESTART for c in injector.cancelled)
        problems += [f"{k}: {counts[k]} injected, {schedule.count(k)} scheduled" for k in FAULT_KINDS
                     if counts[k] + (cancelled if k == SUPERNODE_RESTART else 0) != schedule.count(k)]
    if (ended := last_run_problem(attempts)) is not None:
        problems.append(ended)
    if leftovers:
        problems.append(f"processes left running after stop: {leftovers}")
    row.update({**counts, "flwr_runs": len(attempts), "rounds_completed": check.rounds,
                "records_lost": check.records_lost if reference is not None else None,
                "ledger_intact": check.ledger_intact, "outputs_intact": check.outputs_intact,
                "updates_lost": sum(r["charged_not_applied"] for r in resumes),
                "temporaries_left": len(check.temporaries), "leftover_processes": len(leftovers), "wall_s": wall,
                **_memory_row(sampler),
                "status": "ok" if not problems else "FAILED"})
    detail = {"row": dict(row), "problems": problems, "attempts": attempts, "resumes": resumes,
              "events": injector.events if injector is not None else [],
              "cancelled": injector.cancelled if injector is not None else [],
              "schedule": schedule.to_dict() if schedule is not None else None,
              "pss_peak_mib": {k: v / 2**20 for k, v in sampler.peak.items()}}
    (base / "result.json").write_text(json.dumps(detail, indent=1, default=str))
    for p in problems:
        log(f"[{name}] problem: {p}")
    row["_detail"] = detail
    return row, records


def last_run_problem(attempts: Sequence[dict[str, Any]]) -> str | None:
    """Why the run's last `flwr run` did not end well (None: it did): `flwr run --stream` exits 0 when the
    ServerApp died or failed (its run ends "finished:failed"), so its exit status alone says nothing;
    Federation.run then returns RUN_NOT_COMPLETED and the last attempt's "run_status" is what the SuperLink
    said of the run (runtime/federation.py)."""
    if not attempts:
        return "the last flwr run exited never ran"
    last = attempts[-1]
    status = last.get("run_status")
    if status is not None and status.get("status") != COMPLETED:
        details = f" ({status['details']})" if status.get("details") else ""
        return (f"the last flwr run exited 0 but the SuperLink's status of its run {status.get('run_id')} is "
                f"{status.get('status')}{details}, not {COMPLETED}")
    if last["rc"] != 0:
        return f"the last flwr run exited {last['rc']}"
    return None


def reference_in_process(work: Path, settings: Settings, owners_dir: Path, evaluation: Path,
                         log: Callable[[str], None] = print) -> tuple[dict[str, Any], list[RoundRecord]]:
    """The fault-free reference in this process (runtime.local_grid: the server loop and the client handlers
    a node runs, no Flower): same settings, same owners' files."""
    from runtime.local_grid import run_local
    from uedp.config import RunConfig

    base = work / "reference-in-process"
    shutil.rmtree(base, ignore_errors=True)
    owners = Owners.from_dir(owners_dir, base)
    cfg = RunConfig.from_flat(overrides(settings, owners, evaluation, base / "run"))
    t0 = time.perf_counter()
    run_local(cfg, data_paths=[str(f) for f in owners.files])
    records = list(Ledger.load(base / "run" / LEDGER).records)
    row = {"run": "fault-free (in-process)", "seed": None, "nodes": settings.nodes, "rounds": settings.rounds,
           "q_u": settings.sampling, **dict.fromkeys(FAULT_KINDS, 0), "flwr_runs": 0, "rounds_completed": len(records),
           "records_lost": None, "ledger_intact": True, "wall_s": time.perf_counter() - t0,
           "status": "ok" if len(records) == settings.rounds else "FAILED"}
    log(f"[reference] in-process: {len(records)} rounds in {row['wall_s']:.0f} s")
    return row, records


def study(work: Path, settings: Settings, *, runs: int, seed: int, reference: str = "in-process",
          log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """The fault-free reference, then `runs` runs with faults (seeds seed, seed + 1, ...); the rows."""
    work.mkdir(parents=True, exist_ok=True)
    owners_dir, evaluation = write_owners(work, settings.nodes)
    if reference == "processes":
        ref_row, ref = run_one(work, settings, owners_dir, evaluation, schedule=None, reference=None,
                               name="fault-free", log=log)
    elif reference == "in-process":
        ref_row, ref = reference_in_process(work, settings, owners_dir, evaluation, log=log)
    else:
        raise ValueError(f"reference must be 'processes' or 'in-process', got {reference!r}")
    rows = [ref_row]
    for k in range(runs):
        schedule = make_schedule(seed + k, nodes=settings.nodes, rounds=settings.rounds,
                                 node_kills=settings.node_kills, restarts=settings.restarts,
                                 max_delay=settings.max_delay, restart_after=settings.restart_after)
        row, _ = run_one(work, settings, owners_dir, evaluation, schedule=schedule, reference=ref,
                         name=f"run-{k + 1}", log=log)
        rows.append(row)
        log(f"[run-{k + 1}] {public_row(row)}")
    return rows


# -- the table ----------------------------------------------------------------------------------------------
COLUMNS = ("run", "seed", "nodes", "rounds", "q_u", *FAULT_KINDS, "flwr_runs", "rounds_completed", "records_lost",
           "updates_lost", "ledger_intact", "outputs_intact", "temporaries_left", "leftover_processes", "wall_s",
           "pss_node_max_mib", "pss_node_mean_mib", "pss_total_peak_gib", "status")


def public_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row.get(k) for k in COLUMNS}


def _cell(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
    return "" if v is None else str(v)


def totals(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The runs with faults together."""
    faulty = [r for r in rows if r.get("seed") is not None]
    return {"runs": len(faulty), "ok": sum(r["status"] == "ok" for r in faulty),
            **{k: sum(r.get(k, 0) for r in faulty) for k in FAULT_KINDS},
            "rounds_completed": sum(r.get("rounds_completed", 0) for r in faulty),
            "records_lost": sum(r.get("records_lost") or 0 for r in faulty),
            "wall_s": sum(r.get("wall_s", 0.0) for r in rows)}


def markdown(rows: Sequence[dict[str, Any]], settings: Settings) -> str:
    t = totals(rows)
    head = (f"{t['runs']} runs with faults ({t['ok']} ok) of {settings.nodes} SuperNodes (TLS, SuperNode "
            f"authentication, owners' own files), {settings.rounds} rounds each, q_u = {settings.sampling:.3g}: "
            f"{t[SUPERNODE_KILL]} SuperNode kills, {t[SUPERNODE_RESTART]} restarts, {t[SUPERLINK_KILL]} SuperLink "
            f"kills + restarts, {t[SERVERAPP_KILL]} ServerApp kills; {t['rounds_completed']} rounds completed, "
            f"{t['records_lost']} ledger records lost; {t['wall_s'] / 60:.1f} min in all (reference included).")
    return head + "\n\n" + dict_table([public_row(r) for r in rows], COLUMNS, fmt=_cell) + "\n\n" + LEGEND


LEGEND = ("Columns: faults injected by kind (a restart is activated by the SuperLink under the node's registered "
          "key); flwr_runs, submissions of the run (1 + one per server fault, each after the first with "
          "federation.resume = true); rounds_completed, rounds in ledger.json; records_lost, rounds of the "
          "fault-free run's ledger missing or recorded differently; updates_lost, rounds charged after the last "
          "checkpoint when the server died (they stay charged, their model updates are gone: checkpoints every "
          "federation.checkpoint_every rounds); outputs_intact, summary.json, checkpoint.pt, model.pt, "
          "metrics.jsonl and metrics.csv parse and agree with the ledger, and no temporary file of an atomic "
          "write is left (temporaries_left counts those); leftover_processes, processes of the federation still "
          "running after it stopped; wall_s, federation start to stop; pss_*, proportional set size: the largest "
          "and the mean of the SuperNodes' peaks (each node with its SuperExec and ClientApp processes) and the "
          "federation's peak (all processes, SuperLink and ServerApp included). Machine: 2 cores, 24 GiB, shared "
          "with other jobs.")


def write_results(rows: Sequence[dict[str, Any]], settings: Settings, out: Path, *, command: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(f"# Load and faults at once\n\n`{command}`\n\n{markdown(rows, settings)}\n")
    doc = {"command": command, "settings": asdict(settings), "totals": totals(rows),
           "rows": [public_row(r) for r in rows],
           "runs": [r["_detail"] for r in rows if "_detail" in r]}
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
