"""DP-BART (local DP) beside UeDP and user-level DP on the same data, through the same server loop.

    python -m experiments.dp_bart [--dataset synthetic] [--task classification] [--epsilons 100 1000 10000]
                                  [--variants clv pr pr+ adept] [--pr-plus-epsilons 1000] [--replicates 1]
                                  [--out docs/figures]

What it does, and how to read its output: studies/dp_bart.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import UsageError, command
from studies.dp_bart import Comparison, compare


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--dataset", default="synthetic")
    ap.add_argument("--path", default="", help="--dataset jsonl: the bring-your-own JSONL corpus")
    ap.add_argument("--task", default="classification", choices=("classification", "next_word"))
    ap.add_argument("--epsilons", type=float, nargs="+", default=[100.0, 1000.0, 10000.0])
    ap.add_argument("--variants", nargs="+", default=["clv", "pr", "pr+", "adept"],
                    choices=("clv", "pr", "pr+", "adept"))
    ap.add_argument("--pr-plus-epsilons", type=float, nargs="+", default=[1000.0])
    ap.add_argument("--pr-epsilons", type=float, nargs="+", default=None, help="PR's epsilons (default --epsilons)")
    ap.add_argument("--adept-epsilons", type=float, nargs="+", default=None,
                    help="the ADePT mechanism's epsilons (default --epsilons)")
    ap.add_argument("--users", type=int, default=200, help="synthetic: num_users; bbc_news: max_users / 2")
    ap.add_argument("--report-only", action="store_true",
                    help="run nothing: tables and plot of the finished jobs (their run directories, else the "
                         "comparison's JSON in --out)")
    ap.add_argument("--replicates", type=int, default=1, help="runs of each CLV and PR+ setting (fresh noise)")
    ap.add_argument("--out", type=Path, default=Path("docs/figures"))
    ap.add_argument("--runs", type=Path, default=Path("outputs"))


def run(options: argparse.Namespace) -> int:
    if options.users < 2:
        raise UsageError(f"--users must be >= 2, got {options.users}")
    if options.replicates < 1:
        raise UsageError(f"--replicates must be >= 1, got {options.replicates}")
    if options.dataset == "jsonl" and not options.path:
        raise UsageError("--dataset jsonl needs --path FILE")
    comparison = Comparison(
        dataset=options.dataset, path=options.path, task=options.task, epsilons=tuple(options.epsilons),
        variants=tuple(options.variants), pr_plus_epsilons=tuple(options.pr_plus_epsilons),
        pr_epsilons=_optional(options.pr_epsilons), adept_epsilons=_optional(options.adept_epsilons),
        users=options.users, replicates=options.replicates, out=options.out, runs=options.runs)
    print(compare(comparison, report_only=options.report_only))
    return 0


def _optional(values: list[float] | None) -> tuple[float, ...] | None:
    return None if values is None else tuple(values)


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
