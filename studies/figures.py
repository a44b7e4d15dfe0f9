"""Experiments 2-4 of docs/results.md (paper Figs. 2, 3a, 3b and our entity-cap study): run the jobs, collect them,
draw the figures. One command per figure; rerunning skips every job that already finished.

    python -m experiments.figures FIGURE [FIGURE ...] [--reps 3] [--workers 2]
                                  [--runs outputs/figures] [--out docs/figures] [--dry-run]

FIGURE is a figure of studies/figure_settings.py's FIGURES (utility-synthetic, utility-bbc, utility-shakespeare,
qs, kcap, population, public-start, ...: every figure with its settings) or `all`.

Every job is one call of the Hydra entry point, `python -m experiments.run runner=local KEY=VALUE ...
replicate=R hydra.run.dir=RUNS/jobs/JOB`; the exact command of each job is in RUNS/FIGURE.jobs.txt. A job
shared by several figures (same overrides up to defaults) runs once (studies/figure_jobs.py).
Replicates are independent private runs (CSPRNG noise, sampling and initialisation). Each figure writes
OUT/FIGURE.png, OUT/FIGURE.csv (one row per job) and OUT/FIGURE.md (mean, standard deviation and n over
replicates per setting: studies/figure_tables.py; the plots: studies/figure_plots.py). Jobs that failed are
listed in the table as FAILED and left out of the plot.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from studies.figure_jobs import collect, command, jobs, run_jobs
from studies.figure_plots import PLOTS
from studies.figure_settings import FIGURES, Figure
from studies.figure_tables import GAP_TABLES, finite_mean, gap_table, markdown, summarize


def write_outputs(fig: Figure, rows: list[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    """OUT/FIGURE.csv (the jobs' rows), OUT/FIGURE.md (the summary's table, and the gap table of the kinds
    that have one) and OUT/FIGURE.png (the kinds with a plot, when a setting has a finite mean); the summary."""
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(rows)
    cols = list(dict.fromkeys(k for r in rows for k in r))
    with (out / f"{fig.name}.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    text = markdown(summary)
    if fig.kind in GAP_TABLES:
        text += "\n\n" + gap_table(summary, *GAP_TABLES[fig.kind])
    (out / f"{fig.name}.md").write_text(text + "\n")
    if any(finite_mean(s) for s in summary) and fig.kind in PLOTS:  # the cohort study is a table only
        PLOTS[fig.kind](fig, summary, out / f"{fig.name}.png")
    return summary


def make_figures(names: Sequence[str], *, reps: int, workers: int, runs: Path, out: Path,
                 overrides: Sequence[str] = (), collect_only: bool = False, only: Sequence[str] = (),
                 dry_run: bool = False) -> None:
    """Each figure of `names` in turn: its jobs (`reps` replicates, `overrides` added to every job) run
    `workers` at a time in RUNS/jobs (only those with every override of `only`; none with `collect_only`),
    then every finished job of the figure collected into OUT/FIGURE.png/.csv/.md and its table printed.
    With `dry_run` the job commands are printed and nothing runs."""
    run_dir = runs / "jobs"  # shared by all figures (see job_id)
    for name in names:
        fig = FIGURES[name]
        todo = jobs(fig, reps, tuple(overrides))
        if dry_run:
            print("\n".join(" ".join(command(j, run_dir)[1:]) for j in todo))
            continue
        if not collect_only:
            run_jobs(fig, [j for j in todo if all(o in j["overrides"] for o in only)], run_dir, workers)
        summary = write_outputs(fig, collect(fig, todo, run_dir), out)
        print(f"\n{fig.title}\n{markdown(summary)}\n(written {out / fig.name}.png/.csv/.md)", flush=True)
