"""Collect a Hydra sweep directory into one table (Markdown and CSV).

    python -m experiments.collect multirun/2026-11-30_00-30-00 [--out table]

One row per job: the job's overrides (from .hydra/overrides.yaml), rounds, eps_uedp, eps_user,
eps_undetected, the final metric, and "FAILED: ..." for a job that wrote error.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path
from typing import Any


def _overrides(job: Path) -> str:
    path = job / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return ""
    items = [line.strip()[2:] for line in path.read_text().splitlines() if line.strip().startswith("- ")]
    return " ".join(i for i in items if not i.startswith("hydra."))


def collect(sweep: Path) -> list[dict[str, Any]]:
    rows = []
    jobs = sorted((p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    for job in jobs:
        row: dict[str, Any] = {"job": job.name, "overrides": _overrides(job)}
        if (job / "summary.json").is_file():
            s = json.loads((job / "summary.json").read_text())
            row.update({k: s[k] for k in ("strategy", "rounds", "noise_multiplier", "eps_uedp", "eps_user",
                                          "eps_undetected")})
            row[s["metric"]] = s["final"][s["metric"]]
            row["initial_" + s["metric"]] = s["initial"][s["metric"]]
        else:
            err = job / "error.json"
            row["status"] = "FAILED: " + (json.loads(err.read_text())["error"] if err.is_file() else "no summary")
        rows.append(row)
    return rows


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:.4g}"
    return "" if v is None else str(v)


def markdown(rows: list[dict[str, Any]]) -> str:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="write OUT.md and OUT.csv (default: in the sweep)")
    args = ap.parse_args(argv)
    rows = collect(args.sweep)
    out = args.out or args.sweep / "table"
    text = markdown(rows)
    out.with_suffix(".md").write_text(text + "\n")
    cols = list(dict.fromkeys(k for r in rows for k in r))
    with out.with_suffix(".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
