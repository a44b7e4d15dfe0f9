"""Where a next-word model's perplexity comes from: the test perplexity of finished runs on the test sentences
WITH a protected entity and on those WITHOUT one, on entity tokens and on the other tokens, and with
--reference (a FedAvg run) the share of each run's excess NLL over it that falls on entity tokens
(docs/results.md, "What limits UeDP").

    python -m experiments.entity_perplexity RUN_DIR [RUN_DIR ...] [--reference FEDAVG_RUN_DIR] [--out FILE.md]
                                            [--limit 2000]

What it does, and how to read its output: studies/entity_perplexity.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from studies.entity_perplexity import split_perplexity, token_split
from uedp.markdown import table


def _ppl(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.entity_perplexity",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--reference", type=Path, default=None,
                        help="a FedAvg run on the same data: adds the share of each run's excess NLL on entity tokens")
    parser.add_argument("--limit", type=int, default=0, help="test sentences (default: the run's eval subset)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.out:  # before the evaluations: a missing folder must not cost them
        args.out.parent.mkdir(parents=True, exist_ok=True)
    reference = token_split(args.reference, args.limit) if args.reference else None
    rows = [split_perplexity(r, args.limit, reference=reference) for r in args.runs]
    header = ["run", "strategy", "perplexity, all", "with an entity", "entity-free", "sentences (with / free)",
              "entity tokens", "other tokens", "tokens (entity / other)", "spans"]
    if reference is not None:
        header.append(f"share of excess NLL over {args.reference.name} on entity tokens")
    body = []
    for r in rows:
        line = [Path(str(r["run"])).name, r["strategy"], _ppl(r["all"]), _ppl(r["with_entity"]),
                _ppl(r["entity_free"]), f"{r['with_entity_sentences']} / {r['entity_free_sentences']}",
                _ppl(r["entity_tokens"]), _ppl(r["other_tokens"]),
                f"{r['entity_token_count']} / {r['other_token_count']}", r["spans"]]
        if reference is not None:
            share = r["excess_share"]
            line.append("- (no excess)" if share is None else f"{share:.3f}")
        body.append(line)
    text = table(header, body)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
