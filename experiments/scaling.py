"""Scale and deployment overhead (issue 6), measured side by side in one run.

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
experiments/federation.py). Seconds per round, median over rounds 2..T. The real processes run with 1 and N
nodes, each twice in the same command: with Flower 1.42's defaults (the ServerApp's grid waits 3 s between
pulls for replies, a node's SuperExec looks for tasks every 1 s) and with the project's levers on (`LEVERS`:
federation.poll_interval 0.1 s, task poll TASK_POLL s, one OpenMP thread per node process). With `--baseline-
rev REV` the real processes also run with the code at git revision REV (a worktree), first; `x_first_real` is
each real-process row's seconds per round over the first real-process row of the same number of nodes.

Both write OUT.md and OUT.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from studies.scaling import bench_overhead, bench_users, markdown


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["users", "overhead"])
    ap.add_argument("--users", type=int, nargs="+", default=[100, 1000, 5000])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--work", type=Path, default=None, help="run directories (default: a temporary one)")
    ap.add_argument("--baseline-rev", default=None, metavar="REV",
                    help="overhead: also run the real processes with the code at git revision REV (a worktree)")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="uedp-scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.what == "users":
        rows = bench_users(args.users, args.rounds, work)
    else:
        rows = bench_overhead(args.nodes, args.rounds, work, baseline_rev=args.baseline_rev)
    out = args.out or Path("docs/figures") / ("scaling" if args.what == "users" else "overhead")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    out.with_suffix(".md").write_text(markdown(rows) + "\n")
    print(markdown(rows))
    return 0 if all(r.get("status", "ok") == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
