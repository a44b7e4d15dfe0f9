"""Scale and deployment overhead (docs/performance.md), measured side by side in one run.

    python -m experiments.scaling users [--users 100 1000 5000] [--rounds 4] [--out docs/figures/scaling]
    python -m experiments.scaling overhead [--nodes 3] [--rounds 4] [--out docs/figures/overhead]

`users`: the Ray-backed simulation (one virtual SuperNode per user) for each population size, with a small
model (LSTM 16/16, vocabulary 300, 5-10 sentences per user) and a FIXED expected cohort of 20 users per round
(q_u = 20 / N), so what grows with N is the engine's per-user cost, not the training work. Peak memory is the
largest sum of resident set sizes over the job's whole process tree (the driver, Ray's GCS, raylet and
workers), sampled every 0.25 s: shared pages are counted in every process, so it is an upper bound. Seconds
per round are the median over rounds 2..T (round 1 includes Ray's start-up).

`overhead`: one workload (N users, q_u = 1, the tiny model) run three ways: in-process (no Flower), as a Ray-
backed Flower simulation and as real processes (a SuperLink and N SuperNodes on loopback,
runtime/federation.py). Seconds per round, median over rounds 2..T. The real processes run with 1 and N
nodes, each twice in the same command: with Flower 1.42's defaults (the ServerApp's grid waits 3 s between
pulls for replies, a node's SuperExec looks for tasks every 1 s) and with the project's levers on (`LEVERS`:
federation.poll_interval 0.1 s, task poll TASK_POLL s, one OpenMP thread per node process). With `--baseline-
rev REV` the real processes also run with the code at git revision REV (a worktree), first, with its own
SuperNode launcher when REV has one (else with the levers only); `x_first_real` is
each real-process row's seconds per round over the first real-process row of the same number of nodes.

Both write OUT.md and OUT.json.
"""

from __future__ import annotations

import contextlib
import csv
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from runtime.federation import SLEEP_CAP, TASK_POLL
from runtime.processes import GONE
from uedp.markdown import dict_table

ROOT = Path(__file__).resolve().parents[1]
TINY = ["tokenizer.vocab_size=300", "model.options.emb_dim=16", "model.options.hidden_dim=16",
        "+dataset.options.min_sentences=5", "+dataset.options.max_sentences=10", "privacy.delta=1e-5",
        "privacy.target_epsilon=8"]


def _tree_rss(root: int) -> int:
    """Sum of resident set sizes (bytes) over `root` and all of its descendants; processes that exit while
    they are read count 0."""
    return tree_memory(root, pss=False)


def tree_memory(root: int, *, pss: bool = True) -> int:
    """Sum over `root` and all of its descendants (whatever their session) of their proportional set sizes
    (bytes; `pss`: each shared page divided among the processes that map it, so sums over processes do not
    count a page twice; /proc/PID/smaps_rollup) or resident set sizes; processes that exit while they are read
    count 0."""
    try:
        proc = psutil.Process(root)
        tree = [proc, *proc.children(recursive=True)]
    except GONE:
        return 0
    total = 0
    for p in tree:
        with contextlib.suppress(*GONE):
            total += p.memory_full_info().pss if pss else p.memory_info().rss
    return total


def run_measured(argv: list[str], *, log: Path) -> tuple[int, float, int]:
    """Run `argv`; return (exit status, wall seconds, peak process-tree RSS in bytes)."""
    peak = 0
    with log.open("w") as f:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, _tree_rss(proc.pid))
                done.wait(0.25)

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        rc = proc.wait()
        done.set()
        t.join()
    return rc, time.perf_counter() - t0, peak


def round_seconds(out_dir: Path) -> tuple[float, float]:
    """(median seconds of rounds 2..T, seconds of round 1) from the run's metrics.csv."""
    with (out_dir / "metrics.csv").open() as f:
        secs = [float(r["seconds"]) for r in csv.DictReader(f)]
    return statistics.median(secs[1:] or secs), secs[0]


PROGRESS = re.compile(r"^\[round\s+\d+/\d+\].*\(\s*([\d.]+)s\)\s*$", re.M)  # server/metrics.py's progress line


def progress_seconds(log: Path) -> float:
    """Median wall-clock seconds between consecutive rounds' progress lines (rounds 2..T) in a run's log: the
    whole cycle of a round as the operator sees it (sampling, the budget check, the nodes, the release, the
    central evaluation), the same whatever each version's own round timer includes; nan without two lines."""
    times = [float(t) for t in PROGRESS.findall(log.read_text())] if log.is_file() else []
    gaps = [b - a for a, b in zip(times, times[1:])]
    return statistics.median(gaps) if gaps else float("nan")


def _job(runner: str, out: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "experiments.run", f"runner={runner}", *TINY, *extra,
            f"hydra.run.dir={out}"]


def bench_users(sizes: list[int], rounds: int, work: Path) -> list[dict[str, Any]]:
    rows = []
    for n in sizes:
        out = work / f"users-{n}"
        q_u = min(1.0, 20 / n)
        argv = _job("simulation", out, [f"dataset.options.num_users={n}", f"privacy.q_u={q_u:g}", "privacy.m_max=40",
                                        f"federation.rounds={rounds}", f"federation.eval_every={rounds}",
                                        "federation.wait_timeout=1200"])
        rc, wall, peak = run_measured(argv, log=work / f"users-{n}.log")
        row: dict[str, Any] = {"users": n, "q_u": q_u, "status": "ok" if rc == 0 else f"FAILED (rc {rc})",
                               "peak_rss_gib": peak / 2**30, "wall_s": wall}
        if rc == 0:
            row["s_per_round"], row["first_round_s"] = round_seconds(out)
        rows.append(row)
        print(f"users={n}: {row}", flush=True)
    return rows


def bench_overhead(nodes: int, rounds: int, work: Path, *, baseline_rev: str | None = None) -> list[dict[str, Any]]:
    common = [f"dataset.options.num_users={nodes}", "privacy.q_u=1.0", f"privacy.m_max={nodes}",
              f"federation.rounds={rounds}", f"federation.eval_every={rounds}"]
    rows = []
    for runner in ("local", "simulation"):
        out = work / f"overhead-{runner}"
        rc, wall, _ = run_measured(_job(runner, out, common), log=work / f"overhead-{runner}.log")
        med, first = round_seconds(out) if rc == 0 else (float("nan"), float("nan"))
        rows.append({"runner": {"local": "in-process (no Flower)", "simulation": "Flower simulation (Ray)"}[runner],
                     "s_per_round": med, "first_round_s": first, "wall_s": wall})
    for n in dict.fromkeys((1, nodes)):  # the code at baseline_rev, Flower's defaults, the levers (LEVERS)
        who = f"real processes ({n} SuperNode{'s' if n > 1 else ''})"
        if baseline_rev:
            with _worktree(baseline_rev, work) as tree:
                best = LAUNCHER if has_launcher(tree) else "levers on"
                rows.append(_real_processes(n, rounds, work / f"processes-{n}-baseline", **LEVERS[best],
                                            root=tree, label=f"{who}, code at {baseline_rev}, {best}"))
        for label, levers in LEVERS.items():
            slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
            rows.append(_real_processes(n, rounds, work / f"processes-{n}-{slug}", **levers,
                                        label=f"{who}, {label}"))
        first = next(r for r in rows if r["runner"].startswith(f"real processes ({n} "))
        for r in rows:
            if r["runner"].startswith(f"real processes ({n} ") and r is not first:
                r["x_first_real"] = r["s_per_round"] / first["s_per_round"]
    base = rows[0]["s_per_round"]
    for r in rows:
        r["x_in_process"] = r["s_per_round"] / base if base > 0 else float("nan")
    return rows


# Real-process round latency: federation.poll_interval of the ServerApp, the SuperExec task poll and the
# OpenMP threads of each node; then the SuperNode launcher (runtime/supernode_launcher.py): the node's sleeps
# bounded (sleep_cap) and warm ClientApps forked from a per-node fork server (warm). Flower 1.42's defaults:
# the grid's fixed 3-s pull (poll 0), a 1-s task poll, the node's fixed 3-s and 0.5-s sleeps, a fresh
# `flwr-clientapp` per message.
OFF = {"sleep_cap": None, "warm": False}
_ON = {"poll": 0.1, "task_poll": TASK_POLL, "threads": 1}
LEVERS = {"Flower defaults": {"poll": 0.0, "task_poll": None, "threads": None, **OFF},
          "levers on": {**_ON, **OFF},
          "levers + sleeps capped": {**_ON, "sleep_cap": SLEEP_CAP, "warm": False},
          "levers + launcher (sleeps capped, warm ClientApps)": {**_ON, "sleep_cap": SLEEP_CAP, "warm": True}}
LAUNCHER = "levers + launcher (sleeps capped, warm ClientApps)"  # a baseline revision with a launcher runs with it


def has_launcher(root: Path) -> bool:
    """Whether the code at `root` has the SuperNode launcher (older revisions have none)."""
    return (root / "runtime" / "supernode_launcher.py").is_file()


@contextlib.contextmanager
def _worktree(rev: str, work: Path):
    """A git worktree of `rev` (the code before a change, run side by side with it), removed afterwards."""
    tree = work / f"tree-{rev}"
    subprocess.run(["git", "worktree", "add", "--force", "--detach", str(tree), rev], cwd=ROOT, check=True,
                   capture_output=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)


def _real_processes(nodes: int, rounds: int, out: Path, *, poll: float | None, task_poll: float | None,
                    threads: int | None, sleep_cap: float | None, warm: bool, label: str,
                    root: Path = ROOT) -> dict[str, Any]:
    from runtime.federation import federation

    overrides = {"dataset.options": json.dumps({"num_users": nodes, "min_sentences": 5, "max_sentences": 10}),
                 "tokenizer.vocab_size": 300, "model.options": json.dumps({"emb_dim": 16, "hidden_dim": 16}),
                 "privacy.q_u": 1.0, "privacy.m_max": nodes, "privacy.target_epsilon": 8.0,
                 "federation.rounds": rounds, "federation.eval_every": rounds, "federation.num_nodes": nodes,
                 "federation.out_dir": str(out)}
    if poll is not None:  # an older baseline commit's code has no such key
        overrides["federation.poll_interval"] = poll
    t0 = time.perf_counter()
    launcher = {"sleep_cap": sleep_cap, "warm": warm} if has_launcher(root) else OFF
    with federation(nodes, out.parent / f"{out.name}-home", task_poll=task_poll, threads=threads, root=root,
                    **launcher) as fed:
        rc = fed.run(overrides, timeout=1200)
    wall = time.perf_counter() - t0
    med, first = round_seconds(out) if rc == 0 else (float("nan"), float("nan"))
    return {"runner": label, "s_per_round": med, "first_round_s": first, "wall_s": wall,
            "wall_per_round_s": progress_seconds(out.parent / f"{out.name}-home" / "logs" / "flwr-run.log")}


def _cell(v: Any) -> str:
    """Floats to 3 significant digits, a cell a row lacks (None) as empty."""
    return f"{v:.3g}" if isinstance(v, float) else "" if v is None else str(v)


def markdown(rows: list[dict[str, Any]]) -> str:
    return dict_table(rows, fmt=_cell)  # every column any row has (a failed run lacks some: empty cells)


def scaling(what: str, *, users: list[int], nodes: int, rounds: int, out: Path | None = None,
            work: Path | None = None, baseline_rev: str | None = None) -> tuple[str, bool]:
    """`users` (`bench_users` at each population of `users`) or `overhead` (`bench_overhead` with `nodes` nodes),
    run in `work` (default: a temporary directory), written as OUT.json and OUT.md (default
    docs/figures/scaling or docs/figures/overhead); returns the table and whether every run succeeded."""
    work = work or Path(tempfile.mkdtemp(prefix="uedp-scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    if what == "users":
        rows = bench_users(users, rounds, work)
    else:
        rows = bench_overhead(nodes, rounds, work, baseline_rev=baseline_rev)
    out = out or Path("docs/figures") / ("scaling" if what == "users" else "overhead")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    out.with_suffix(".md").write_text(markdown(rows) + "\n")
    return markdown(rows), all(r.get("status", "ok") == "ok" for r in rows)
