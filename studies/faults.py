"""Load and faults at once (the README's "Reliability"): a real-process federation of data owners who keep their own
files, over TLS with SuperNode authentication, while a fault injector SIGKILLs random SuperNodes during
rounds, restarts some of them, and kills the SuperLink (restarted) and the ServerApp alone once each; after
each server fault the run is continued with a new `flwr run` and federation.resume = true. Over several
runs with different seeds, every run must finish its rounds with an intact ledger whose records equal those
of a fault-free run of the same settings, and leave no private output half-written.

    python -m experiments.faults [--nodes 20] [--runs 3] [--rounds 5] [--seed 0] [--out docs/figures/faults]

The parts: the faults (studies/fault_schedule.py), the injector (studies/fault_injector.py), the checks
(studies/fault_checks.py), one run (studies/fault_runs.py) and the table (studies/fault_report.py).

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

import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from studies.fault_report import markdown, public_row, write_results
from studies.fault_runs import Settings, reference_in_process, run_one, write_owners
from studies.fault_schedule import make_schedule

REFERENCES = ("in-process", "processes")  # where the fault-free reference runs


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


def command_line(*, nodes: int, runs: int, rounds: int, seed: int, out: Path, work: Path, reference: str,
                 q_u: float | None = None, node_kills: int | None = None, restarts: int | None = None) -> str:
    """The `python -m experiments.faults` command of these values, every option written out."""
    args = ["--nodes", nodes, "--runs", runs, "--rounds", rounds, "--seed", seed, "--out", out, "--work", work,
            "--reference", reference]
    for flag, value in (("--q-u", q_u), ("--node-kills", node_kills), ("--restarts", restarts)):
        args += [flag, value] if value is not None else []
    return "python -m experiments.faults " + shlex.join(map(str, args))


def fault_study(*, nodes: int, runs: int, rounds: int, seed: int, out: Path, work: Path, reference: str,
                q_u: float | None = None, node_kills: int | None = None, restarts: int | None = None) -> bool:
    """The study as `python -m experiments.faults` runs it: `runs` runs with faults of `nodes` SuperNodes and
    `rounds` rounds (Settings' defaults otherwise) after the fault-free `reference`, log lines timed from its
    start, the runs' folders in `work`; OUT.md and OUT.json written (with `command_line`) and the table
    printed. Whether every run is ok."""
    settings = Settings(nodes=nodes, rounds=rounds, q_u=q_u, node_kills=node_kills, restarts=restarts)
    command = command_line(nodes=nodes, runs=runs, rounds=rounds, seed=seed, out=out, work=work,
                           reference=reference, q_u=q_u, node_kills=node_kills, restarts=restarts)
    t0 = time.perf_counter()

    def log(line: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f} s] {line}", flush=True)

    rows = study(work.resolve(), settings, runs=runs, seed=seed, reference=reference, log=log)
    write_results(rows, settings, out, command=command)
    print(markdown(rows, settings))
    print(f"wrote {out.with_suffix('.md')} and {out.with_suffix('.json')}")
    return all(r["status"] == "ok" for r in rows)
