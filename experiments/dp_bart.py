"""DP-BART (local DP) beside UeDP and user-level DP on the same data, through the same server loop.

    python -m experiments.dp_bart [--dataset synthetic] [--task classification] [--epsilons 100 1000 10000]
                                  [--variants clv pr pr+] [--pr-plus-epsilons 1000] [--replicates 1]
                                  [--out docs/figures]

What it does, and how to read its output: studies/dp_bart.py.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from studies.dp_bart import plot, render, run_jobs, survival


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="synthetic")
    ap.add_argument("--task", default="classification", choices=("classification", "next_word"))
    ap.add_argument("--epsilons", type=float, nargs="+", default=[100.0, 1000.0, 10000.0])
    ap.add_argument("--variants", nargs="+", default=["clv", "pr", "pr+"], choices=("clv", "pr", "pr+"))
    ap.add_argument("--pr-plus-epsilons", type=float, nargs="+", default=[1000.0])
    ap.add_argument("--replicates", type=int, default=1, help="runs of each CLV and PR+ setting (fresh noise)")
    ap.add_argument("--out", type=Path, default=Path("docs/figures"))
    ap.add_argument("--runs", type=Path, default=Path("outputs"))
    args = ap.parse_args(argv)
    if args.replicates < 1:
        ap.error(f"--replicates must be >= 1, got {args.replicates}")
    stem = f"dp_bart-{args.dataset}-{args.task}"
    t0 = time.monotonic()
    results = run_jobs(args, args.runs / stem)
    surv = survival(args, list(results))
    text = (f"{render(args, results, surv)}\n\nCommand: `python -m experiments.dp_bart --dataset {args.dataset} "
            f"--task {args.task} --epsilons {' '.join(f'{e:g}' for e in args.epsilons)} --variants "
            f"{' '.join(args.variants)} --pr-plus-epsilons {' '.join(f'{e:g}' for e in args.pr_plus_epsilons)} "
            f"--replicates {args.replicates}` "
            f"({time.monotonic() - t0:.0f} s)\n")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.md").write_text(text)
    (args.out / f"{stem}.json").write_text(json.dumps({"results": results, "survival": surv}, indent=1,
                                                      default=str))
    plot(args, results, args.out / f"{stem}.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
