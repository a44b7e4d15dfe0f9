"""One run of the fault study (studies/faults.py): its settings (`Settings`), the owners' files and the run
config, a real-process federation run with or without faults (`run_one`: the federation, the injector of
studies/fault_injector.py, the checks of studies/fault_checks.py, a row of the table) or the fault-free
reference in this process (`reference_in_process`), and the memory of the federation's processes sampled
meanwhile (`MemorySampler`).
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runtime.federation import TASK_POLL, Federation, Owners, federation
from runtime.processes import descendants, kill_all, running
from studies.fault_checks import OutputCheck, check_outputs, last_run_problem
from studies.fault_injector import Injector, run_with_faults
from studies.fault_schedule import FAULT_KINDS, RESTART_AFTER, SUPERNODE_RESTART, Schedule
from studies.scaling import tree_memory
from uedp.flower.resume import LEDGER
from uedp.privacy.ledger import Ledger, RoundRecord

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# server/setup.py's line when a run resumes: the ledger's last round, the checkpoint's, the rounds between
RESUMED = re.compile(r"resuming after round (\d+) \(checkpoint of round (\d+); (\d+) round\(s\) after it stay charged")


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


@dataclass(frozen=True)
class Settings:
    nodes: int = 20
    rounds: int = 5
    q_u: float | None = None  # None: 3 expected nodes per round (a round's ClientApp starts fit on 2 cores)
    node_kills: int | None = None  # None: make_schedule's default
    restarts: int | None = None
    max_delay: float = 3.0
    restart_after: float = RESTART_AFTER
    target_epsilon: float | None = 6.0  # z calibrated to it (cached on disk); None: z = noise_multiplier
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


@dataclass
class RunLog:
    """A run's log stream (the `echo` of Federation.run): each line through `log`, less Flower's empty INFO
    lines and DEBUG lines; the "resuming after round R" lines server/setup.py writes are kept in `resumes`."""

    name: str
    log: Callable[[str], None] = print
    resumes: list[dict[str, int]] = field(default_factory=list)

    def __call__(self, line: str) -> None:
        text = ANSI.sub("", line).strip()
        if m := RESUMED.search(text):
            self.resumes.append({"after_round": int(m[1]), "checkpoint_round": int(m[2]),
                                 "charged_not_applied": int(m[3])})
        if text and not text.startswith("DEBUG") and text.rstrip(": ") not in ("INFO", "INFO:flwr"):
            self.log(f"[{self.name}]   {text}")


def run_problems(error: str | None, check: OutputCheck, injector: Injector | None,
                 attempts: Sequence[dict[str, Any]], leftovers: Sequence[str]) -> list[str]:
    """What went wrong in one run: its error, the checks' problems, the injector's errors and faults that did
    not happen as scheduled (a restart that was not due yet when the run ended is cancelled: every other fault
    must have happened), how its last `flwr run` ended, and processes left running."""
    problems = ([error] if error else []) + check.problems
    if injector is not None:
        problems += injector.errors
        counts, schedule = injector.counts(), injector.schedule
        cancelled = sum(c["kind"] == SUPERNODE_RESTART for c in injector.cancelled)
        problems += [f"{k}: {counts[k]} injected, {schedule.count(k)} scheduled" for k in FAULT_KINDS
                     if counts[k] + (cancelled if k == SUPERNODE_RESTART else 0) != schedule.count(k)]
    if (ended := last_run_problem(attempts)) is not None:
        problems.append(ended)
    if leftovers:
        problems.append(f"processes left running after stop: {leftovers}")
    return problems


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
    stream = RunLog(name, log)
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
                rc = fed.run(cfg, timeout=settings.timeout, echo=stream)
                attempts = [{"rc": rc, "ended_by": None}]
            else:
                injector = Injector(fed, schedule, log=lambda s: log(f"[{name}] {s}"))
                try:
                    attempts = run_with_faults(fed, cfg, injector, timeout=settings.timeout,
                                               log=lambda s: log(f"[{name}] {s}"), echo=stream)
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
    problems = run_problems(error, check, injector, attempts, leftovers)
    row.update({**counts, "flwr_runs": len(attempts), "rounds_completed": check.rounds,
                "records_lost": check.records_lost if reference is not None else None,
                "ledger_intact": check.ledger_intact, "outputs_intact": check.outputs_intact,
                "updates_lost": sum(r["charged_not_applied"] for r in stream.resumes),
                "temporaries_left": len(check.temporaries), "leftover_processes": len(leftovers), "wall_s": wall,
                **_memory_row(sampler),
                "status": "ok" if not problems else "FAILED"})
    detail = {"row": dict(row), "problems": problems, "attempts": attempts, "resumes": stream.resumes,
              "events": injector.events if injector is not None else [],
              "cancelled": injector.cancelled if injector is not None else [],
              "schedule": schedule.to_dict() if schedule is not None else None,
              "pss_peak_mib": {k: v / 2**20 for k, v in sampler.peak.items()}}
    (base / "result.json").write_text(json.dumps(detail, indent=1, default=str))
    for p in problems:
        log(f"[{name}] problem: {p}")
    row["_detail"] = detail
    return row, records


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
