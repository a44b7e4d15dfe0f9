"""Detector quality on hand-labelled real text: recall and precision per category, per gold set and split.

    python -m experiments.detectors [--split test] [--detectors spacy+rules,balanced,...] [--out docs/figures]
    python -m experiments.detectors --levers [--out docs/figures]    # each lever of the profiles, on `valid`
    python -m experiments.detectors --agreement [--out docs/figures]   # the gold sets' inter-annotator agreement

What it does, and how to read its output: studies/detectors.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from studies.detectors import agreement, evaluate, lever_specs, render, render_levers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", default="test", choices=("valid", "test"))
    ap.add_argument("--detectors", default="spacy+rules,ensemble,balanced,recall",
                    help="comma-separated; NAME:LEVER+LEVER is a profile with those levers only")
    ap.add_argument("--out", type=Path, default=None, help="directory for detectors-SPLIT.md/.json")
    ap.add_argument("--agreement", action="store_true", help="inter-annotator agreement of the informal gold set")
    ap.add_argument("--levers", action="store_true", help="each lever of the profiles, on the valid halves")
    args = ap.parse_args(argv)
    if args.levers:
        specs = lever_specs()
        text = render_levers(evaluate([spec for _, spec in specs], "valid"), specs, "valid")
        print(text)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "detectors-levers.md").write_text(text + "\n\nCommand: `python -m experiments.detectors "
                                                          f"--levers --out {args.out}`\n")
        return 0
    if args.agreement:
        result = agreement("informal")
        print(json.dumps(result, indent=1))
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "ner-agreement.json").write_text(json.dumps(result, indent=1) + "\n")
        return 0
    results = evaluate([d.strip() for d in args.detectors.split(",") if d.strip()], args.split)
    text = render(results, args.split)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"detectors-{args.split}.md").write_text(text + "\n\nCommand: `python -m experiments.detectors "
                                                            f"--split {args.split} --detectors {args.detectors} "
                                                            f"--out {args.out}`\n")
        (args.out / f"detectors-{args.split}.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
