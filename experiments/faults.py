"""Load and faults at once: a real-process federation (TLS, SuperNode authentication, owners' own files) while
SuperNodes, the SuperLink and the ServerApp are killed and restarted; every run must finish with the
fault-free run's ledger and no half-written output.

    python -m experiments.faults [--nodes 20] [--runs 3] [--rounds 5] [--seed 0] [--out docs/figures/faults] \\
        [--work outputs/faults] [--reference in-process|processes] [--q-u Q] [--node-kills K] [--restarts R]

What it does, and how to read its output: studies/faults.py.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from studies.faults import Settings, markdown, study, write_results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3, help="runs with faults, seeds SEED, SEED+1, ...")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("docs/figures/faults"), help="writes OUT.md and OUT.json")
    ap.add_argument("--work", type=Path, default=Path("outputs/faults"), help="the runs' folders and logs")
    ap.add_argument("--reference", choices=("in-process", "processes"), default="in-process",
                    help="the fault-free run: in this process (default) or as real processes")
    ap.add_argument("--q-u", type=float, default=None, help="default: 3 expected nodes per round")
    ap.add_argument("--node-kills", type=int, default=None, help="default: nodes // 5 (at least 1)")
    ap.add_argument("--restarts", type=int, default=None, help="default: half of the killed nodes")
    args = ap.parse_args(argv)
    if args.nodes < 2 or args.runs < 1 or args.rounds < 3:
        ap.error("--nodes >= 2, --runs >= 1 and --rounds >= 3")
    settings = Settings(nodes=args.nodes, rounds=args.rounds, q_u=args.q_u, node_kills=args.node_kills,
                        restarts=args.restarts)
    t0 = time.perf_counter()

    def log(line: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f} s] {line}", flush=True)

    rows = study(args.work.resolve(), settings, runs=args.runs, seed=args.seed, reference=args.reference, log=log)
    command = "python -m experiments.faults " + shlex.join(sys.argv[1:] if argv is None else argv)
    write_results(rows, settings, args.out, command=command)
    print(markdown(rows, settings))
    print(f"wrote {args.out.with_suffix('.md')} and {args.out.with_suffix('.json')}")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
