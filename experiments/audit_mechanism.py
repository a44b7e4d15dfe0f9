"""Crafted-update audit of the mechanism (under the proved accounting of docs/proofs.md): `python -m experiments.audit
mechanism [options]`.

    python -m experiments.audit mechanism --out docs/figures --seed 0
    python -m experiments.audit mechanism --settings main --trials 20000 --set privacy.q_u=0.3 --set m_max=100

What it does, and how to read its output: studies/audit_mechanism.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from studies.audit_mechanism import (
    DEFAULT_SETTINGS,
    SETTINGS,
    run_study,
    select_settings,
)
from uedp.audit.mechanism import (
    CONTROLS,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.audit mechanism", description=__doc__.split("\n")[0])
    parser.add_argument("--settings", default=",".join(DEFAULT_SETTINGS),
                        help=f"comma-separated, of {', '.join(SETTINGS)}")
    parser.add_argument("--controls", default=",".join(CONTROLS), help="comma-separated controls, or 'none'")
    parser.add_argument("--trials", type=int, default=1_000_000, help="vectorized runs per world")
    parser.add_argument("--real-trials", type=int, default=40, help="real-path runs per world (sound rows)")
    parser.add_argument("--out", type=Path, default=Path("outputs/audit_mechanism"))
    parser.add_argument("--seed", type=int, default=None, help="fixed seed (reproduction; default: CSPRNG)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting parameter in every setting (privacy.q_u=0.3, rounds=10, ...)")
    args = parser.parse_args(argv)
    names = [n for n in args.settings.split(",") if n]
    controls = [] if args.controls == "none" else [c for c in args.controls.split(",") if c]
    command = "python -m experiments.audit mechanism " + " ".join(sys.argv[2:] if argv is None else argv)
    try:
        select_settings(names, controls, args.overrides)
    except ValueError as exc:  # an unknown setting, control or override, before any trial
        parser.error(str(exc))
    run_study(names, controls, trials=args.trials, real_trials=args.real_trials, out=args.out, seed=args.seed,
              overrides=args.overrides, command=command.strip())
    print((args.out / "audit_mechanism.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
