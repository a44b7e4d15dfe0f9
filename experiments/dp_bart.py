"""DP-BART (local DP) beside UeDP and user-level DP on the same data, through the same server loop.

    python -m experiments.dp_bart [--dataset synthetic] [--task classification] [--epsilons 100 1000 10000]
                                  [--variants clv pr pr+] [--pr-plus-epsilons 1000] [--out docs/figures]

Runs in-process (runner=local: the same server loop and client code as a Flower run, without Ray), each job
in OUT/dp_bart-DATASET-TASK/<name>/:
- `dp_bart` (strategy=dp_bart: every owner rewrites its training sentences once, the server trains on the
  pooled rewrites for rewrite.epochs epochs) for each variant and per-document epsilon (PR+ only at
  --pr-plus-epsilons: one rewriter trained per epsilon), and at epsilon 1e9 (no meaningful noise: the
  rewriter's own loss of information);
- `uedp` and `user_dp` at their central target epsilon (8, the main job's), and noiseless `fedavg` on the
  original text;
- `central-original`: noiseless CENTRAL training on the pooled original training sentences with the same
  model, epochs and optimizer as a dp_bart job (not private; a reference only). DP-BART trains centrally on
  pooled text for rewrite.epochs epochs, the federated methods for federation.rounds rounds of sampled
  users: their numbers differ by training procedure too, and this job separates what the rewriting costs
  (dp_bart against central-original) from what federated training costs (fedavg against central-original).
Then, on 1,000 training sentences with gold entities (synthetic corpus) or detected ones, the rewrites' BLEU
against the originals and the fraction of entity strings that survive, per setting. Writes
OUT/dp_bart-DATASET-TASK.md/.json/.png. Local per-document epsilon and central eps_uedp are different
units: the table gives each job's own guarantee (per document, per user over rewrite.max_documents
documents, per entity in f documents) and never puts them on one axis.
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
    ap.add_argument("--out", type=Path, default=Path("docs/figures"))
    ap.add_argument("--runs", type=Path, default=Path("outputs"))
    args = ap.parse_args(argv)
    stem = f"dp_bart-{args.dataset}-{args.task}"
    t0 = time.monotonic()
    results = run_jobs(args, args.runs / stem)
    surv = survival(args, list(results))
    text = (f"{render(args, results, surv)}\n\nCommand: `python -m experiments.dp_bart --dataset {args.dataset} "
            f"--task {args.task} --epsilons {' '.join(f'{e:g}' for e in args.epsilons)} --variants "
            f"{' '.join(args.variants)} --pr-plus-epsilons {' '.join(f'{e:g}' for e in args.pr_plus_epsilons)}` "
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
