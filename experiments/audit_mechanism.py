"""Crafted-update audit of the mechanism (under the proved accounting of docs/proofs.md): `python -m experiments.audit
mechanism [options]`.

    python -m experiments.audit mechanism --out docs/figures --seed 0
    python -m experiments.audit mechanism --settings main --trials 20000 --set privacy.q_u=0.3 --set m_max=100

What it does, and how to read its output: studies/audit_mechanism.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import UsageError, command
from studies.audit_mechanism import DEFAULT_SETTINGS, SETTINGS, run_study, select_settings
from uedp.audit.mechanism import CONTROLS


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--settings", default=",".join(DEFAULT_SETTINGS),
                        help=f"comma-separated, of {', '.join(SETTINGS)}")
    parser.add_argument("--controls", default=",".join(CONTROLS), help="comma-separated controls, or 'none'")
    parser.add_argument("--trials", type=int, default=1_000_000, help="vectorized runs per world")
    parser.add_argument("--real-trials", type=int, default=40, help="real-path runs per world (sound rows)")
    parser.add_argument("--out", type=Path, default=Path("outputs/audit_mechanism"))
    parser.add_argument("--seed", type=int, default=None, help="fixed seed (reproduction; default: CSPRNG)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting parameter in every setting (privacy.q_u=0.3, rounds=10, ...)")


def run(options: argparse.Namespace) -> int:
    names = [n for n in options.settings.split(",") if n]
    controls = [] if options.controls == "none" else [c for c in options.controls.split(",") if c]
    try:
        select_settings(names, controls, options.overrides)
    except ValueError as exc:  # an unknown setting, control or override, before any trial
        raise UsageError(str(exc)) from exc
    words = options.words  # as given: after `experiments.audit mechanism`, or after `experiments.audit_mechanism`
    words = words[1:] if words[:1] == ["mechanism"] else words
    run_study(names, controls, trials=options.trials, real_trials=options.real_trials, out=options.out,
              seed=options.seed, overrides=options.overrides,
              command=("python -m experiments.audit mechanism " + " ".join(words)).strip())
    print((options.out / "audit_mechanism.md").read_text())
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
