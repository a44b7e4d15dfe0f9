"""Experiment 1 (paper Fig. 4, with sound accounting): privacy spent against rounds at a FIXED noise
multiplier z, for user-level DP (DP-FedAvg), UeDP f_E and UeDP f_E+, with the entity cap k_cap = 1, 4 and
none overlaid. Pure accounting (uedp.privacy.accounting): no training.

    python -m experiments.privacy_curves [--z 2] [--q-u 0.05] [--q-e 0.5] [--q-s 0.1] [--m-max 100]
                                         [--num-users 1000] [--rounds 500] [--out docs/figures/privacy_vs_rounds]

N (`--num-users`) is the public number of places: the truncation at m_max is charged as delta_trunc
(docs/proofs.md section 4). Each method's claim is drawn under its own adjacency: eps_user for user-level DP,
eps_uedp for UeDP (plus eps_undetected for f_E+, the extended entities' guarantee). z is relative to each
method's own sensitivity, so equal z does NOT mean equal noise (see docs/mechanism.md section 5): this figure
shows what the paper's Fig. 4 compares, soundly accounted. Writes OUT.png, OUT.csv and OUT.md.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from uedp import markdown
from uedp.plotting import pyplot, save
from uedp.privacy.accounting import epsilon_of, mechanism


def curves(*, z: float, q_u: float, q_e: float, q_s: float, m_max: int, rounds: int, delta: float,
           num_users: int, points: int = 12) -> list[dict]:
    ts = sorted({int(t) for t in np.unique(np.geomspace(1, rounds, points).round())} | {rounds, min(100, rounds)})
    rows = []
    user = mechanism("user_dp", z=z, q_u=q_u, m_max=None)
    for t in ts:
        rows.append({"series": "user-level DP (eps_user)", "k_cap": "-", "rounds": t,
                     "epsilon": epsilon_of([(user, t)], "user", delta=delta, num_users=num_users)})
    for k_cap in (1, 4, None):
        cap = "none" if k_cap is None else str(k_cap)
        naive = mechanism("uedp_naive", z=z, q_u=q_u, q_e=q_e, q_s=0.0, m_max=m_max, k_cap=k_cap)
        plus = mechanism("uedp", z=z, q_u=q_u, q_e=q_e, q_s=q_s, m_max=m_max, k_cap=k_cap)
        for t in ts:
            rows.append({"series": "UeDP f_E (eps_uedp)", "k_cap": cap, "rounds": t,
                         "epsilon": epsilon_of([(naive, t)], "uedp", delta=delta, num_users=num_users)})
            rows.append({"series": "UeDP f_E+ (eps_uedp)", "k_cap": cap, "rounds": t,
                         "epsilon": epsilon_of([(plus, t)], "uedp", delta=delta, num_users=num_users)})
            rows.append({"series": "UeDP f_E+ (eps_undetected)", "k_cap": cap, "rounds": t,
                         "epsilon": epsilon_of([(plus, t)], "undetected", delta=delta, num_users=num_users)})
    return rows


def plot(rows: list[dict], path: Path, title: str) -> None:
    plt = pyplot()

    styles = {"1": "-", "4": "--", "none": ":", "-": "-"}
    colors = {"user-level DP (eps_user)": "black", "UeDP f_E (eps_uedp)": "tab:blue",
              "UeDP f_E+ (eps_uedp)": "tab:orange", "UeDP f_E+ (eps_undetected)": "tab:green"}
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for (series, cap) in dict.fromkeys((r["series"], r["k_cap"]) for r in rows):
        pts = [(r["rounds"], r["epsilon"]) for r in rows if r["series"] == series and r["k_cap"] == cap]
        label = series if cap == "-" else f"{series}, k_cap={cap}"
        ax.plot(*zip(*pts), styles[cap], color=colors[series], label=label, marker=".")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("rounds")
    ax.set_ylabel("epsilon (delta fixed)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, path)


def write_curves(out: Path, *, z: float, q_u: float, q_e: float, q_s: float, m_max: int, rounds: int,
                 delta: float, num_users: int) -> str:
    """The curves at these settings as OUT.png, OUT.csv and OUT.md (a table at T = 1, 10, 100 and `rounds`);
    returns the table."""
    rows = curves(z=z, q_u=q_u, q_e=q_e, q_s=q_s, m_max=m_max, rounds=rounds, delta=delta, num_users=num_users)
    out.parent.mkdir(parents=True, exist_ok=True)
    title = f"z={z}, q_u={q_u}, q_e={q_e}, q_s={q_s}, m_max={m_max}, delta={delta:g}"
    plot(rows, out.with_suffix(".png"), title)
    with out.with_suffix(".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["series", "k_cap", "rounds", "epsilon"])
        w.writeheader()
        w.writerows(rows)
    ts = sorted({r["rounds"] for r in rows})
    shown = [t for t in ts if t in (1, 10, 100, rounds)] or ts
    series = list(dict.fromkeys((r["series"], r["k_cap"]) for r in rows))
    body = []
    for s, cap in series:
        vals = {r["rounds"]: r["epsilon"] for r in rows if r["series"] == s and r["k_cap"] == cap}
        body.append([s, cap, *(f"{vals[t]:.3g}" for t in shown)])
    table = markdown.table(["series", "k_cap", *(f"T={t}" for t in shown)], body, fmt=str)
    out.with_suffix(".md").write_text(f"{title}\n\n{table}\n")
    return table
