"""Experiments 2-4 of docs/results.md (paper Figs. 2, 3a, 3b and our entity-cap study): run the jobs, collect them,
draw the figures. One command per figure; rerunning skips every job that already finished.

    python -m experiments.figures FIGURE [FIGURE ...] [--reps 3] [--workers 2]
                                  [--runs outputs/figures] [--out docs/figures] [--dry-run]

What it does, and how to read its output: studies/figures.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import command
from studies.figure_settings import FIGURES
from studies.figures import make_figures


def add_parser(ap: argparse.ArgumentParser) -> None:
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


def run(options: argparse.Namespace) -> int:
    names = list(FIGURES) if "all" in options.figures else list(options.figures)
    make_figures(names, reps=options.reps, workers=options.workers, runs=options.runs, out=options.out,
                 overrides=tuple(options.override), collect_only=options.collect_only, only=tuple(options.only),
                 dry_run=options.dry_run)
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
