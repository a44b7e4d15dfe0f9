"""Experiment 1 (paper Fig. 4, with sound accounting): privacy spent against rounds at a FIXED noise
multiplier z, for user-level DP (DP-FedAvg), UeDP f_E and UeDP f_E+, with the entity cap k_cap = 1, 4 and
none overlaid. Pure accounting (uedp.privacy.accounting): no training.

    python -m experiments.privacy_curves [--z 2] [--q-u 0.05] [--q-e 0.5] [--q-s 0.1] [--m-max 100]
                                         [--rounds 500] [--out docs/figures/privacy_vs_rounds]

What it does, and how to read its output: studies/privacy_curves.py.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from studies.privacy_curves import curves, plot
from uedp import markdown


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--z", type=float, default=2.0)
    ap.add_argument("--q-u", type=float, default=0.05)
    ap.add_argument("--q-e", type=float, default=0.5)
    ap.add_argument("--q-s", type=float, default=0.1)
    ap.add_argument("--m-max", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--out", type=Path, default=Path("docs/figures/privacy_vs_rounds"))
    args = ap.parse_args(argv)
    rows = curves(z=args.z, q_u=args.q_u, q_e=args.q_e, q_s=args.q_s, m_max=args.m_max, rounds=args.rounds,
                  delta=args.delta)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    title = (f"z={args.z}, q_u={args.q_u}, q_e={args.q_e}, q_s={args.q_s}, m_max={args.m_max}, "
             f"delta={args.delta:g}")
    plot(rows, args.out.with_suffix(".png"), title)
    with args.out.with_suffix(".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["series", "k_cap", "rounds", "epsilon"])
        w.writeheader()
        w.writerows(rows)
    ts = sorted({r["rounds"] for r in rows})
    shown = [t for t in ts if t in (1, 10, 100, args.rounds)] or ts
    series = list(dict.fromkeys((r["series"], r["k_cap"]) for r in rows))
    body = []
    for s, cap in series:
        vals = {r["rounds"]: r["epsilon"] for r in rows if r["series"] == s and r["k_cap"] == cap}
        body.append([s, cap, *(f"{vals[t]:.3g}" for t in shown)])
    table = markdown.table(["series", "k_cap", *(f"T={t}" for t in shown)], body, fmt=str)
    args.out.with_suffix(".md").write_text(f"{title}\n\n{table}\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
