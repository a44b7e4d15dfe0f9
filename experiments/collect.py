"""Collect a Hydra sweep directory into one table (Markdown and CSV).

    python -m experiments.collect multirun/2026-11-30_00-30-00 [--out table] [--plot-vs-epsilon SWEEP ...]

One row per job: the job's overrides (from .hydra/overrides.yaml), rounds, eps_uedp, eps_user,
eps_undetected (and for strategy=dp_bart the local eps_local_document and eps_local_user), the final metric,
and "FAILED: ..." for a job that wrote error.json.
`--plot-vs-epsilon` also draws the final metric against `privacy.target_epsilon` (OUT.png), one line per
setting of the other overrides; jobs without a target (noiseless baselines) and any extra sweep
directories given are drawn as horizontal reference lines.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from studies.collect import write_table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="write OUT.md and OUT.csv (default: in the sweep)")
    ap.add_argument("--plot-vs-epsilon", nargs="*", type=Path, default=None, metavar="SWEEP",
                    help="also plot the metric against privacy.target_epsilon (OUT.png)")
    args = ap.parse_args(argv)
    refs = None if args.plot_vs_epsilon is None else args.plot_vs_epsilon
    text = write_table(args.sweep, out=args.out, references=refs)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
