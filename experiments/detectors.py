"""Detector quality on hand-labelled real text: recall and precision per category, per gold set and split.

    python -m experiments.detectors [--split test] [--detectors spacy+rules,balanced,...] [--out docs/figures]
    python -m experiments.detectors --levers [--out docs/figures]    # each lever of the profiles, on `valid`
    python -m experiments.detectors --agreement [--out docs/figures]   # the gold sets' inter-annotator agreement

What it does, and how to read its output: studies/detectors.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import command
from studies.detectors import agreement_report, detectors_report, levers_report


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--split", default="test", choices=("valid", "test"))
    ap.add_argument("--detectors", default="spacy+rules,ensemble,balanced,recall",
                    help="comma-separated; NAME:LEVER+LEVER is a profile with those levers only")
    ap.add_argument("--out", type=Path, default=None, help="directory for detectors-SPLIT.md/.json")
    ap.add_argument("--agreement", action="store_true", help="inter-annotator agreement of the informal gold set")
    ap.add_argument("--levers", action="store_true", help="each lever of the profiles, on the valid halves")


def run(options: argparse.Namespace) -> int:
    if options.levers:
        print(levers_report(options.out, f"python -m experiments.detectors --levers --out {options.out}"))
    elif options.agreement:
        print(agreement_report(options.out))
    else:
        detectors = [d.strip() for d in options.detectors.split(",") if d.strip()]
        print(detectors_report(detectors, options.split, options.out,
                               f"python -m experiments.detectors --split {options.split} --detectors "
                               f"{options.detectors} --out {options.out}"))
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
