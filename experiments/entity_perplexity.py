"""Where a next-word model's perplexity comes from: the test perplexity of finished runs on the test sentences
WITH a protected entity and on those WITHOUT one (docs/results.md, "What limits UeDP").

    python -m experiments.entity_perplexity RUN_DIR [RUN_DIR ...] [--out FILE.md] [--limit 2000]

What it does, and how to read its output: studies/entity_perplexity.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from studies.entity_perplexity import split_perplexity
from uedp.markdown import table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.entity_perplexity",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--limit", type=int, default=0, help="test sentences (default: the run's eval subset)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.out:  # before the evaluations: a missing folder must not cost them
        args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = [split_perplexity(r, args.limit) for r in args.runs]
    text = table(["run", "strategy", "perplexity, all", "with an entity", "entity-free", "sentences (with / free)"],
                 [[Path(str(r["run"])).name, r["strategy"], f"{r['all']:.1f}", f"{r['with_entity']:.1f}",
                   f"{r['entity_free']:.1f}", f"{r['with_entity_sentences']} / {r['entity_free_sentences']}"]
                  for r in rows])
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
