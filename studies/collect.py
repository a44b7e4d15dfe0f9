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

import csv
import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from uedp.commands.options import parse_options
from uedp.markdown import dict_table
from uedp.plotting import pyplot, save
from uedp.summary import RUN, has_summary, read_summary

TARGET = "privacy.target_epsilon"


def _overrides(job: Path) -> str:
    path = job / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return ""
    items = OmegaConf.to_container(OmegaConf.load(path), resolve=False)  # a list of KEY=VALUE strings
    return " ".join(str(i) for i in items or () if not str(i).startswith("hydra."))


def collect(sweep: Path) -> list[dict[str, Any]]:
    rows = []
    jobs = sorted((p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    for job in jobs:
        row: dict[str, Any] = {"job": job.name, "overrides": _overrides(job)}
        if has_summary(job):
            s = read_summary(job, require=RUN)
            row.update({k: s[k] for k in ("strategy", "rounds", "noise_multiplier", "eps_uedp", "eps_user",
                                          "eps_undetected")})
            if "eps_local_document" in s:  # strategy=dp_bart: local epsilons, other units than the central ones
                row.update({k: s[k] for k in ("eps_local_document", "eps_local_user")})
            row[s["metric"]] = s["final"][s["metric"]]
            row["initial_" + s["metric"]] = s["initial"][s["metric"]]
        else:
            err = job / "error.json"
            row["status"] = "FAILED: " + (json.loads(err.read_text())["error"] if err.is_file() else "no summary")
        rows.append(row)
    return rows


def _setting(overrides: str) -> tuple[float | None, str]:
    """(privacy.target_epsilon or None, the job's other overrides) from its override line."""
    items = overrides.split()
    targets = [i for i in items if i.startswith(f"{TARGET}=")]
    eps = parse_options(targets, value=float).get(TARGET)
    return eps, " ".join(i for i in items if i not in targets)


def plot_vs_epsilon(rows: list[dict[str, Any]], path: Path, references: list[dict[str, Any]]) -> None:
    plt = pyplot()

    metric = next((k for r in rows + references for k in ("perplexity", "error") if k in r), None)
    if metric is None:
        raise SystemExit("no finished job to plot")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    lines: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        eps, setting = _setting(r.get("overrides", ""))
        if metric in r and eps is not None:
            lines.setdefault(setting or "default", []).append((eps, r[metric]))
    for label, pts in lines.items():
        ax.plot(*zip(*sorted(pts)), marker="o", label=label)
    for r in [r for r in rows if _setting(r.get("overrides", ""))[0] is None] + references:
        if metric in r:
            ax.axhline(r[metric], linestyle="--", color="gray")
            ax.annotate(f"{_setting(r.get('overrides', ''))[1] or r.get('strategy')} (no DP)",
                        (0.01, r[metric]), xycoords=("axes fraction", "data"), fontsize=7, va="bottom")
    ax.set_xlabel("target epsilon (each method calibrated to its own claim)")
    ax.set_ylabel(f"test {metric}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, path)


def write_table(sweep: Path, *, out: Path | None = None, references: list[Path] | None = None) -> str:
    """The sweep's table as OUT.md and OUT.csv (OUT defaults to SWEEP/table); with `references` (a list,
    possibly empty, of other sweeps) also the metric against privacy.target_epsilon as OUT.png."""
    rows = collect(sweep)
    out = out or sweep / "table"
    text = dict_table(rows)
    out.with_suffix(".md").write_text(text + "\n")
    cols = list(dict.fromkeys(k for r in rows for k in r))
    with out.with_suffix(".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    if references is not None:
        refs = [r for other in references for r in collect(other)]
        plot_vs_epsilon(rows, out.with_suffix(".png"), refs)
    return text
