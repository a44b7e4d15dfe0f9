"""DP-BART (local DP) beside UeDP and user-level DP on the same data, through the same server loop.

    python -m experiments.dp_bart [--dataset synthetic] [--task classification] [--epsilons 100 1000 10000]
                                  [--variants clv pr pr+ adept] [--pr-plus-epsilons 1000] [--replicates 1]
                                  [--out docs/figures]

What it does, and how to read its output: studies/dp_bart.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from studies.dp_bart import compare


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    args = ap.parse_args(argv)
    if args.users < 2:
        ap.error(f"--users must be >= 2, got {args.users}")
    if args.replicates < 1:
        ap.error(f"--replicates must be >= 1, got {args.replicates}")
    if args.dataset == "jsonl" and not args.path:
        ap.error("--dataset jsonl needs --path FILE")
    print(compare(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
