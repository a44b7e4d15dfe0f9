"""Which DP-BART rewriter (uedp.rewriting.model): a small BART trained from scratch, or the frozen MiniLM encoder with
a trained decoder? Measured, not assumed.

    python -m experiments.rewriter [--private-corpus synthetic] [--kinds bart,minilm] [--epsilons 250,1000,5000]
                                   [--threads N] [--no-pr] [--out docs/figures/rewriter.md]

For each kind, the default RewriterConfig of that kind is trained (or loaded from the cache) on
public_text_for(private corpus) and measured on the held-out PUBLIC validation sentences (the last
`valid_sentences` of that text, never trained on): reconstruction BLEU without noise (clip only) against the text and
against the window the encoder sees (its first l tokens), and BLEU after ClvMechanism(epsilon, delta 1e-5, analytic
Gaussian) at each epsilon; plus the training time (from the rewriter's own log, so a cached rewriter reports the
time it took when it was trained). The default kind is the one with the higher mean BLEU over the no-noise and
noised columns (within 1 BLEU: the faster to train). Unless --no-pr, the winner's "pr" and "pr+" (one per
epsilon) rewriters are trained and measured too. Noise here is on public text and seeded (a measurement).
Writes OUT (markdown) and prints it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from studies.rewriter import run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--private-corpus", default="synthetic", help="the corpus the rewriters are for (its name)")
    ap.add_argument("--kinds", default="bart,minilm")
    ap.add_argument("--epsilons", default="250,1000,5000")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--steps", type=int, default=None, help="override RewriterConfig.steps (smoke runs)")
    ap.add_argument("--max-sentences", type=int, default=None, help="override RewriterConfig.max_sentences")
    ap.add_argument("--no-pr", action="store_true", help="skip the winner's pr and pr+ rewriters")
    ap.add_argument("--out", type=Path, default=Path("docs/figures/rewriter.md"))
    ap.add_argument("--conditions", default="", help="a sentence on the machine's load while training, for the doc")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    text = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
