"""What a public-entity policy frees (uedp.entities.public): per corpus, the share of training sentences
that hold a protected entity with and without the policy, and how many sentences it turns entity-free.

    python -m experiments.public_entities --out docs/figures [--dataset synthetic --dataset bbc_news ...]

What it does, and how to read its output: studies/public_entities.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from studies.public_entities import DEFAULT_CORPORA, freed
from uedp.commands.options import parse_options
from uedp.entities.public import POLICIES, policy_record
from uedp.markdown import table as md_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.public_entities", description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", action="append", default=[], help="a corpus (repeatable; default: "
                        "synthetic, bbc_news, shakespeare)")
    parser.add_argument("-o", "--option", action="append", default=[], help="KEY=VALUE loader option (all corpora)")
    parser.add_argument("--policy", default="places_calendar", choices=[p for p in POLICIES if p != "none"])
    parser.add_argument("--out", type=Path, default=Path("outputs/public_entities"))
    args = parser.parse_args(argv)
    corpora = [(d, ()) for d in args.dataset] or list(DEFAULT_CORPORA)
    rows = [freed(d, parse_options(args.option), args.policy) for d, _ in corpora]
    args.out.mkdir(parents=True, exist_ok=True)
    record = policy_record(args.policy)
    (args.out / "public_entities.json").write_text(json.dumps({"policy": record, "rows": rows}, indent=1))
    lines = [f"# What the public-entity policy `{args.policy}` frees", "",
             f"Command: `python -m experiments.public_entities {' '.join(argv or [])}`. Policy: {record['keys']} keys, "
             f"SHA-256 {record['sha256'][:16]}... (uedp.entities.public). Training sentences; detector = the one a "
             "run on the corpus uses.", "",
             md_table(["corpus", "detector", "sentences", "with a protected entity", "after the policy",
                       "freed (entity-free now)", "freed / entity sentences", "mixed sentences losing a key"],
                      [[r["dataset"], r["detector"], f"{r['train_sentences']:,}", f"{r['share_with_entity']:.1%}",
                        f"{r['share_with_entity_after']:.1%}", f"{r['freed']:,}",
                        f"{r['freed_share_of_entity_sentences']:.1%}", f"{r['mixed_sentences_losing_a_key']:,}"]
                       for r in rows]),
             "", "The synthetic corpus draws its cities from ~170 famous ones: its row is an artefact of the "
             "generator."]
    (args.out / "public_entities.md").write_text("\n".join(lines) + "\n")
    print((args.out / "public_entities.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
