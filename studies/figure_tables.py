"""A figure's tables: its jobs' rows aggregated per setting (mean, standard deviation and n over replicates:
`summarize`), the Markdown table of that summary (`markdown`), and for the scaling figures each method's mean
against noiseless FedAvg's (`gap_table`). Jobs that failed are counted in the table and have no mean.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from uedp.commands.options import parse_options
from uedp.markdown import table

LABELS = {"uedp": "UeDP f_E+", "uedp_naive": "UeDP f_E", "user_dp": "user-level DP", "deid": "de-identification",
          "deid_dp": "de-identification + user-level DP", "fedavg": "FedAvg (noiseless)"}
GAP_METHODS = ("fedavg", "user_dp", "uedp")  # the columns of a gap table (FedAvg first: the others' divisor)
# the figure kinds with a gap table: the setting key of its rows, and that column's title
GAP_TABLES = {"population": ("dataset.options.num_users", "N"), "public_start": ("model.init", "initial model"),
              "cohort": ("privacy.q_u", "q_u (expected cohort q_u N)")}


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean, standard deviation and n over replicates, per setting (first-seen order)."""
    out = []
    for setting in dict.fromkeys(r["setting"] for r in rows):
        group = [r for r in rows if r["setting"] == setting]
        ok = [r for r in group if "value" in r]
        agg: dict[str, Any] = {"setting": setting, **parse_options(setting.split(), value=str)}
        agg["n"] = len(ok)
        agg["failed"] = sum(str(r.get("status", "")).startswith("FAILED") for r in group)  # not run: neither
        if ok:
            vals = [r["value"] for r in ok]
            agg.update({"metric": ok[0]["metric"], "mean": statistics.fmean(vals),
                        "sd": (statistics.stdev(vals) if len(vals) > 1 else 0.0)
                        if all(map(math.isfinite, vals)) else math.nan,  # a diverged run (inf) has no sd
                        "z": statistics.fmean(r["z"] for r in ok),
                        **{k: statistics.fmean(r[k] for r in ok) for k in ("eps_uedp", "eps_user", "eps_undetected")},
                        **({"eps_holders": statistics.fmean(r["eps_holders"] for r in ok)}
                           if all("eps_holders" in r for r in ok) else {}),
                        "initial": statistics.fmean(r["initial"] for r in ok)})
        out.append(agg)
    return out


def method_label(setting: dict[str, Any]) -> str:
    return LABELS.get(str(setting.get("strategy", "uedp")), str(setting.get("strategy", "uedp")))


def metric_of(summary: list[dict[str, Any]]) -> str:
    """The metric the summary's settings report (the first one that has one)."""
    return next((s["metric"] for s in summary if "metric" in s), "metric")


def finite_mean(s: dict[str, Any]) -> bool:
    """A setting with a plottable mean (a diverged model's inf perplexity is in the table, not the plot)."""
    return "mean" in s and math.isfinite(s["mean"])


def markdown(summary: list[dict[str, Any]]) -> str:
    cols = ["method", "setting", "n", "failed", "z", "eps_uedp", "eps_user", "eps_undetected", "mean", "sd"]
    if any("eps_holders" in s for s in summary):  # the epsilon for an entity with target_holders other holders
        cols.insert(cols.index("mean"), "eps_holders")
    metric = metric_of(summary)
    head = [c if c not in ("mean", "sd") else f"{metric} {c}" for c in cols]
    rows = [{**s, "method": method_label(s),
             "setting": " ".join(p for p in s["setting"].split() if not p.startswith("strategy="))} for s in summary]
    return table(head, [[r.get(c) for c in cols] for r in rows])


def gap_rows(summary: list[dict[str, Any]], key: str) -> list[list[Any]]:
    """Per value of `key` (population, start): each method's mean and its ratio to noiseless FedAvg's."""
    rows = []
    for value in dict.fromkeys(s.get(key) for s in summary):
        group = {str(s.get("strategy")): s for s in summary if s.get(key) == value and finite_mean(s)}
        base = group.get("fedavg", {}).get("mean")
        row: list[Any] = [value if value is not None else "scratch"]
        for m in GAP_METHODS:
            mean = group.get(m, {}).get("mean")
            row.append("-" if mean is None else f"{mean:.4g}" + (f" ({mean / base:.2f}x)" if base and m != "fedavg"
                                                                   else ""))
        inits = [s["initial"] for s in group.values() if "initial" in s]
        row.append(f"{statistics.fmean(inits):.4g}" if inits else "-")
        rows.append(row)
    return rows


def gap_table(summary: list[dict[str, Any]], key: str, first: str) -> str:
    return table([first, f"FedAvg {metric_of(summary)}", "user-level DP (x FedAvg)", "UeDP (x FedAvg)",
                  "before private training"], gap_rows(summary, key), fmt=str)
