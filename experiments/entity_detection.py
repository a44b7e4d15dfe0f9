"""Per gold entity: the share of its mentions detected with the exact key, and its epsilon under each method.

    python -m experiments.entity_detection [--sets bbc_news,shakespeare,social,informal] [--detector balanced]
                                           [--out docs/figures] [--gold-dir tests/assets/ner_gold]

Writes OUT/entity-detection.md and .json (with --out) and prints the tables. What it measures, the key rule
and the settings: studies/entity_detection.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from studies.entity_detection import GOLD_DIR, SETS, Settings, render, study, to_json


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated gold sets (files NAME.jsonl of --gold-dir)")
    ap.add_argument("--detector", default="balanced", help="the detector (default balanced, a run's on real text)")
    ap.add_argument("--out", type=Path, default=None, help="directory for entity-detection.md/.json")
    ap.add_argument("--gold-dir", type=Path, default=GOLD_DIR, help="where the gold sets are")
    ap.add_argument("--vdi", type=float, default=None,
                    help="PLD value discretization interval of the epsilons (default: holders_epsilon's automatic)")
    args = ap.parse_args(argv)
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    result = study(sets, args.detector, gold_dir=args.gold_dir, settings=Settings(vdi=args.vdi))
    text = render(result)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        command = f"python -m experiments.entity_detection --sets {','.join(sets)} --detector {args.detector}"
        command += f" --out {args.out}" + (f" --vdi {args.vdi:g}" if args.vdi is not None else "")
        (args.out / "entity-detection.md").write_text(text + f"\n\nCommand: `{command}`\n")
        (args.out / "entity-detection.json").write_text(to_json(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
