"""The audit's outputs from its results.json: report.md (one row per variant and canary frequency, then one
per variant) and exposure.png (mean exposure of planted secrets against canary frequency)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from uedp.audit.verdicts import CHANCE_P, CONFIDENCE, EXPOSURE_GAP, GroupResult
from uedp.markdown import table
from uedp.plotting import pyplot, save


def _fmt(x: float) -> str:
    return "inf" if x == math.inf else f"{x:.2f}"


def _group_flag(g: GroupResult) -> str:
    if g.violation:
        return "VIOLATION"
    if g.leak:
        return "leak (group privacy only)" if g.group_privacy else "leak"
    return ""


def _group_row(g: GroupResult) -> list[str]:
    return [g.variant, str(g.frequency), g.kind, f"{g.members}/{g.non_members}",
            f"{g.exposure_mean:.2f} ({g.exposure_median:.2f})", f"{g.exposure_nonmember_mean:.2f}",
            f"{g.chance_p:.1e}", f"{g.tpr:.2f}/{g.fpr:.2f}", g.one_run, _fmt(g.eps_lb_cp), _fmt(g.eps_lb_one_run),
            _fmt(g.eps_lb_rank), _fmt(g.claimed_eps), _group_flag(g)]


def _run_row(name: str, run: Mapping[str, Any]) -> list[str]:
    if "status" in run:
        return [name, run["status"], *[""] * 7]
    details = {k: run[k] for k in ("sigma_claimed", "sigma_used", "update_norm_max", "update_norm_median", "beta")
               if k in run}
    return [name, str(run["flagged"]), run.get("reference") or "", f"{run['sigma']:.4g}", _fmt(run["eps_uedp"]),
            _fmt(run["eps_user"]), f"{run['final'].get('perplexity', float('nan')):.1f}", json.dumps(details),
            str(run["seconds"])]


def write_report(out: Path, results: Mapping[str, Any], command: str) -> None:
    groups = [GroupResult.from_dict(g) for g in results["groups"]]
    legend = ("flag: VIOLATION = a lower bound above the claim; leak = exposure far above chance (p < "
              f"{CHANCE_P:g}, members > non-members + {EXPOSURE_GAP:g} bits); \"group privacy only\" = a user-level "
              "DP claim of f * eps_user, which allows the leak. A variant is flagged by a violation, or by a leak "
              "its claim should prevent (for a control: one its sound reference does not show); see `flagged`.")
    parts = [
        f"# Privacy audit ({'quick' if results['quick'] else 'full'})", "",
        f"Command: `{command}`; {results['num_candidates']} candidates per secret; confidence "
        f"{CONFIDENCE}; delta {results.get('delta')}; total {results['seconds']:.0f} s.", "",
        table(["variant", "freq", "kind", "in/out", "exposure mean (median)", "non-member exposure", "chance p",
               "TPR/FPR", "one-run", "eps_lb CP", "eps_lb one-run", "eps_lb rank", "claimed eps", "flag"],
              [_group_row(g) for g in groups], fmt=str),
        "", legend, "",
        table(["variant", "flagged", "reference", "sigma", "eps_uedp", "eps_user", "test perplexity",
               "control details", "seconds"],
              [_run_row(name, run) for name, run in results["runs"].items()], fmt=str),
    ]
    (out / "report.md").write_text("\n".join(parts) + "\n")


def plot(out: Path, results: Mapping[str, Any]) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in results["runs"]:
        gs = [g for g in results["groups"] if g["variant"] == name]
        ax.plot([g["frequency"] for g in gs], [g["exposure_mean"] for g in gs], marker="o", label=name)
    n = results["num_candidates"]
    ax.axhline(1 / math.log(2), color="grey", ls="--", label="chance (1.44 bits)")
    ax.axhline(math.log2(n + 1), color="grey", ls=":", label=f"max (log2 {n + 1})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("canary frequency (users holding it)")
    ax.set_ylabel("mean exposure of planted secrets (bits)")
    ax.legend(fontsize=8)
    save(fig, out / "exposure.png")
