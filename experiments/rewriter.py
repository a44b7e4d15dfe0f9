"""Which DP-BART rewriter (uedp.rewriting.model): a small BART trained from scratch, or the frozen MiniLM encoder with
a trained decoder? Measured, not assumed.

    python -m experiments.rewriter [--private-corpus synthetic] [--kinds bart,minilm] [--epsilons 250,1000,5000]
                                   [--threads N] [--no-pr] [--out docs/figures/rewriter.md]

What it does, and how to read its output: studies/rewriter.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import command
from studies.rewriter import compare_rewriters


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--private-corpus", default="synthetic", help="the corpus the rewriters are for (its name)")
    ap.add_argument("--kinds", default="bart,minilm")
    ap.add_argument("--epsilons", default="250,1000,5000")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--steps", type=int, default=None, help="override RewriterConfig.steps (smoke runs)")
    ap.add_argument("--max-sentences", type=int, default=None, help="override RewriterConfig.max_sentences")
    ap.add_argument("--no-pr", action="store_true", help="skip the winner's pr and pr+ rewriters")
    ap.add_argument("--out", type=Path, default=Path("docs/figures/rewriter.md"))
    ap.add_argument("--conditions", default="", help="a sentence on the machine's load while training, for the doc")


def run(options: argparse.Namespace) -> int:
    overrides = {k: v for k, v in (("steps", options.steps), ("max_sentences", options.max_sentences))
                 if v is not None}
    print(compare_rewriters(options.private_corpus, options.kinds.split(","),
                            [float(e) for e in options.epsilons.split(",")], out=options.out,
                            threads=options.threads, pr=not options.no_pr, overrides=overrides,
                            conditions=options.conditions))
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
