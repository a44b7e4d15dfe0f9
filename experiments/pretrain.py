"""Pretrain the run's model on PUBLIC text, for a private run to start from (`model.init=OUT`).

    python -m experiments.pretrain --public synthetic [--public-users 1000] [--epochs 3] [--out FILE]
                                   [--set KEY=VALUE ...]
    python -m experiments.pretrain --public bbc_news --out outputs/public_start/bbc_news.pt
    python -m experiments.pretrain --public synthetic --set model.name=gpt2 --hf-out outputs/public_start/gpt2-synthetic

`--hf-out DIR` (models gpt2, bert) also writes the model as a Hugging Face checkpoint directory, the offline
stand-in for a downloaded pretrained model: start a private run from it with `model=hf model.options.path=DIR
model.options.tokenizer=project` (uedp.models.export.export_public_start).

It trains on the device `federation.device` resolves to (`--set federation.device=cuda`; the default `auto`
is cuda where torch sees a GPU) and writes the model from the CPU. What it does, and how to read its output:
uedp/pretraining.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from uedp.commands.options import parse_options
from uedp.config import RunConfig
from uedp.models.export import export_public_start
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
    ap.add_argument("--hf-out", metavar="DIR", help="also write a Hugging Face checkpoint directory (gpt2, bert)")
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
    if args.hf_out:
        folder = export_public_start(Path(args.hf_out), model, tokenizer=tokenizer, corpus=description,
                                     details=details)
        print(f"wrote {folder} (start a run from it with model=hf model.options.path={folder} "
              "model.options.tokenizer=project)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
