"""Per gold entity: the share of its mentions detected with the exact key, and its epsilon under each method.

    python -m experiments.entity_detection [--sets bbc_news,shakespeare,social,informal] [--detector balanced]
                                           [--out docs/figures] [--gold-dir tests/assets/ner_gold]

Writes OUT/entity-detection.md and .json (with --out) and prints the tables. What it measures, the key rule
and the settings: studies/entity_detection.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import command
from studies.entity_detection import GOLD_DIR, SETS, report


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated gold sets (files NAME.jsonl of --gold-dir)")
    ap.add_argument("--detector", default="balanced", help="the detector (default balanced, a run's on real text)")
    ap.add_argument("--out", type=Path, default=None, help="directory for entity-detection.md/.json")
    ap.add_argument("--gold-dir", type=Path, default=GOLD_DIR, help="where the gold sets are")
    ap.add_argument("--vdi", type=float, default=None,
                    help="PLD value discretization interval of the epsilons (default: holders_epsilon's automatic)")


def run(options: argparse.Namespace) -> int:
    sets = [s.strip() for s in options.sets.split(",") if s.strip()]
    print(report(sets, options.detector, gold_dir=options.gold_dir, vdi=options.vdi, out=options.out))
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
