"""Experiment 1 (paper Fig. 4, with sound accounting): privacy spent against rounds at a FIXED noise
multiplier z, for user-level DP (DP-FedAvg), UeDP f_E and UeDP f_E+, with the entity cap k_cap = 1, 4 and
none overlaid. Pure accounting (uedp.privacy.accounting): no training.

    python -m experiments.privacy_curves [--z 2] [--q-u 0.05] [--q-e 0.5] [--q-s 0.1] [--m-max 100]
                                         [--num-users 1000] [--rounds 500] [--out docs/figures/privacy_vs_rounds]

What it does, and how to read its output: studies/privacy_curves.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import command
from studies.privacy_curves import write_curves


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--z", type=float, default=2.0)
    ap.add_argument("--q-u", type=float, default=0.05)
    ap.add_argument("--q-e", type=float, default=0.5)
    ap.add_argument("--q-s", type=float, default=0.1)
    ap.add_argument("--m-max", type=int, default=100)
    ap.add_argument("--num-users", type=int, default=1000, help="N, the public number of places (truncation charge)")
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--out", type=Path, default=Path("docs/figures/privacy_vs_rounds"))


def run(options: argparse.Namespace) -> int:
    print(write_curves(options.out, z=options.z, q_u=options.q_u, q_e=options.q_e, q_s=options.q_s,
                       m_max=options.m_max, rounds=options.rounds, delta=options.delta,
                       num_users=options.num_users))
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
