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
from pathlib import Path

from experiments import command
from studies.pretrain import public_start
from uedp.commands.options import parse_options
from uedp.config import RunConfig


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--public", required=True, help="synthetic | bbc_news | shakespeare | a text file")
    ap.add_argument("--public-users", type=int, default=1000, help="synthetic: personas of the public text")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="the run's settings")
    ap.add_argument("--out", help="default: outputs/public_start/PUBLIC.pt")
    ap.add_argument("--hf-out", metavar="DIR", help="also write a Hugging Face checkpoint directory (gpt2, bert)")


def run(options: argparse.Namespace) -> int:
    written = public_start(RunConfig.from_flat(parse_options(options.set)), options.public,
                           public_users=options.public_users, epochs=options.epochs, lr=options.lr,
                           batch_size=options.batch_size, out=Path(options.out) if options.out else None,
                           hf_out=Path(options.hf_out) if options.hf_out else None)
    print("\n".join(written))
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
