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
        _publish(args.out, "detectors-levers.md", text, f"python -m experiments.detectors --levers --out {args.out}")
        return 0
    if args.agreement:
        _publish(args.out, "ner-agreement.json", json.dumps(agreement("informal"), indent=1))
        return 0
    results = evaluate([d.strip() for d in args.detectors.split(",") if d.strip()], args.split)
    _publish(args.out, f"detectors-{args.split}.md", render(results, args.split),
             f"python -m experiments.detectors --split {args.split} --detectors {args.detectors} --out {args.out}")
    if args.out is not None:
        (args.out / f"detectors-{args.split}.json").write_text(json.dumps(results, indent=1))
    return 0


def _publish(out: Path | None, name: str, text: str, command: str | None = None) -> None:
    """Print `text` and, with --out, write it to out/name, a report ending with the command that made it."""
    print(text)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text + (f"\n\nCommand: `{command}`\n" if command else "\n"))


if __name__ == "__main__":
    raise SystemExit(main())
