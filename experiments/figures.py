"""Experiments 2-4 of docs/results.md (paper Figs. 2, 3a, 3b and our entity-cap study): run the jobs, collect them,
draw the figures. One command per figure; rerunning skips every job that already finished.

    python -m experiments.figures FIGURE [FIGURE ...] [--reps 3] [--workers 2] [--rounds 30]
                                  [--runs outputs/figures] [--out docs/figures] [--dry-run]

What it does, and how to read its output: studies/figures.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from studies.figures import FIGURES, collect, command, jobs, markdown, run_jobs, write_outputs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("figures", nargs="+", choices=[*FIGURES, "all"])
    ap.add_argument("--reps", type=int, default=3, help="independent replicates per setting (default 3)")
    ap.add_argument("--workers", type=int, default=2, help="jobs at a time (each uses one torch thread)")
    ap.add_argument("--runs", type=Path, default=Path("outputs/figures"), help="where the jobs' directories go")
    ap.add_argument("--out", type=Path, default=Path("docs/figures"), help="where PNG/CSV/MD go")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="extra Hydra override for every job (e.g. federation.rounds=5); changes the job ids")
    ap.add_argument("--collect-only", action="store_true", help="do not run jobs; collect what finished")
    ap.add_argument("--only", action="append", default=[], metavar="OVERRIDE",
                    help="run only the jobs with this override (repeatable: all of them); the outputs still "
                         "collect every finished job of the figure")
    ap.add_argument("--dry-run", action="store_true", help="print the job commands and exit")
    args = ap.parse_args(argv)
    names = list(FIGURES) if "all" in args.figures else args.figures
    for name in names:
        fig = FIGURES[name]
        todo = jobs(fig, args.reps, tuple(args.override))
        run_dir = args.runs / "jobs"  # shared by all figures (see job_id)
        if args.dry_run:
            print("\n".join(" ".join(command(j, run_dir)[1:]) for j in todo))
            continue
        if not args.collect_only:
            run_jobs(fig, [j for j in todo if all(o in j["overrides"] for o in args.only)], run_dir, args.workers)
        summary = write_outputs(fig, collect(fig, todo, run_dir), args.out)
        print(f"\n{fig.title}\n{markdown(summary)}\n(written {args.out / fig.name}.png/.csv/.md)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
