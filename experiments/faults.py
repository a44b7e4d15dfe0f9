"""Load and faults at once: a real-process federation (TLS, SuperNode authentication, owners' own files) while
SuperNodes, the SuperLink and the ServerApp are killed and restarted; every run must finish with the
fault-free run's ledger and no half-written output.

    python -m experiments.faults [--nodes 20] [--runs 3] [--rounds 5] [--seed 0] [--out docs/figures/faults] \\
        [--work outputs/faults] [--reference in-process|processes] [--q-u Q] [--node-kills K] [--restarts R]

What it does, and how to read its output: studies/faults.py. Exit status 1 when a run failed.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from experiments import command
from studies.faults import REFERENCES, fault_study


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `minimum`."""

    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    parse.__name__ = "int"  # argparse's "invalid int value" for a word
    return parse


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--nodes", type=at_least(2), default=20)
    ap.add_argument("--runs", type=at_least(1), default=3, help="runs with faults, seeds SEED, SEED+1, ...")
    ap.add_argument("--rounds", type=at_least(3), default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("docs/figures/faults"), help="writes OUT.md and OUT.json")
    ap.add_argument("--work", type=Path, default=Path("outputs/faults"), help="the runs' folders and logs")
    ap.add_argument("--reference", choices=REFERENCES, default="in-process",
                    help="the fault-free run: in this process (default) or as real processes")
    ap.add_argument("--q-u", type=float, default=None, help="default: 3 expected nodes per round")
    ap.add_argument("--node-kills", type=int, default=None, help="default: nodes // 5 (at least 1)")
    ap.add_argument("--restarts", type=int, default=None, help="default: half of the killed nodes")


def run(options: argparse.Namespace) -> int:
    ok = fault_study(nodes=options.nodes, runs=options.runs, rounds=options.rounds, seed=options.seed,
                     out=options.out, work=options.work, reference=options.reference, q_u=options.q_u,
                     node_kills=options.node_kills, restarts=options.restarts)
    return 0 if ok else 1


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
