"""LSTM models in the AWD-LSTM spirit (Merity et al. 2018), the model family of the UeDP paper.

`LSTMLanguageModel`: embedding -> stacked single-layer LSTMs -> (projection) -> decoder tied to the
embedding. Regularization as in AWD-LSTM: embedding dropout (whole word rows of the embedding matrix are
dropped for a batch), variational ("locked") dropout on the embedded input, between LSTM layers and on the
output (one mask per sequence, shared over time). Weight-drop on the recurrent matrices is not implemented.
With `tie_weights` the decoder is `F.linear(h, embedding.weight, bias)`: one parameter, not two copies, so
the update norm counts it once. When `hidden_dim != emb_dim` a linear projection maps the last LSTM
output to `emb_dim` before the tied decoder.

`LSTMClassifier`: embedding -> LSTM -> masked mean (or last real token) pooling -> dropout -> linear.

Both are unidirectional and read right-padded batches, so padding never reaches the outputs of real tokens
(no packing needed). Pure PyTorch; the defaults train on two CPU cores.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from uedp.errors import ConfigError
from uedp.models.base import CLASSIFICATION, NEXT_WORD, UedpModel
from uedp.tokenization import Batch


def _check_prob(name: str, p: float) -> None:
    if not 0.0 <= p < 1.0:
        raise ConfigError(f"lstm option {name} must be in [0, 1), got {p!r}")


def _check_dim(name: str, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise ConfigError(f"lstm option {name} must be a positive integer, got {value!r}")


class LockedDropout(nn.Module):
    """Variational dropout on `[B, T, H]`: one Bernoulli mask per sequence and feature, shared over time."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        mask = x.new_empty(x.shape[0], 1, x.shape[2]).bernoulli_(1.0 - self.p) / (1.0 - self.p)
        return x * mask


def embedding_dropout(embed: nn.Embedding, ids: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Look up `ids`, dropping whole vocabulary rows with probability `p` (surviving rows scaled 1/(1-p))."""
    weight = embed.weight
    if training and p > 0.0:
        mask = weight.new_empty(weight.shape[0], 1).bernoulli_(1.0 - p) / (1.0 - p)
        weight = weight * mask
    return F.embedding(ids, weight, embed.padding_idx)


class LSTMLanguageModel(UedpModel):
    family = "lstm"

    def __init__(
        self,
        *,
        vocab_size: int,
        pad_id: int,
        emb_dim: int = 128,
        hidden_dim: int = 256,
        num_layers: int = 2,
        embed_dropout: float = 0.1,
        input_dropout: float = 0.2,
        hidden_dropout: float = 0.2,
        output_dropout: float = 0.2,
        tie_weights: bool = True,
    ) -> None:
        super().__init__(task=NEXT_WORD, pad_id=pad_id)
        for name, dim in (("vocab_size", vocab_size), ("emb_dim", emb_dim), ("hidden_dim", hidden_dim),
                          ("num_layers", num_layers)):
            _check_dim(name, dim)
        for name, p in (("embed_dropout", embed_dropout), ("input_dropout", input_dropout),
                        ("hidden_dropout", hidden_dropout), ("output_dropout", output_dropout)):
            _check_prob(name, p)
        self.embed_dropout = embed_dropout
        self.embedding = nn.Embedding(vocab_size, emb_dim)
        self.rnns = nn.ModuleList(
            nn.LSTM(hidden_dim if i else emb_dim, hidden_dim, batch_first=True) for i in range(num_layers)
        )
        self.input_drop = LockedDropout(input_dropout)
        self.hidden_drop = LockedDropout(hidden_dropout)
        self.output_drop = LockedDropout(output_dropout)
        self.tie_weights = tie_weights
        self.projection = nn.Linear(hidden_dim, emb_dim) if tie_weights and hidden_dim != emb_dim else None
        if tie_weights:
            self.decoder_bias = nn.Parameter(torch.zeros(vocab_size))
            self.decoder = None
        else:
            self.decoder = nn.Linear(hidden_dim, vocab_size)
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)

    def forward(self, batch: Batch) -> torch.Tensor:
        x = embedding_dropout(self.embedding, batch.input_ids, self.embed_dropout, self.training)
        x = self.input_drop(x)
        for i, rnn in enumerate(self.rnns):
            x, _ = rnn(x)
            x = self.hidden_drop(x) if i < len(self.rnns) - 1 else self.output_drop(x)
        if self.projection is not None:
            x = self.projection(x)
        if self.decoder is None:
            return F.linear(x, self.embedding.weight, self.decoder_bias)
        return self.decoder(x)


class LSTMClassifier(UedpModel):
    family = "lstm"

    def __init__(
        self,
        *,
        vocab_size: int,
        pad_id: int,
        num_labels: int,
        emb_dim: int = 128,
        hidden_dim: int = 256,
        num_layers: int = 1,
        pooling: str = "mean",
        embed_dropout: float = 0.1,
        dropout: float = 0.3,
    ) -> None:
        super().__init__(task=CLASSIFICATION, pad_id=pad_id, num_labels=num_labels)
        for name, dim in (("vocab_size", vocab_size), ("emb_dim", emb_dim), ("hidden_dim", hidden_dim),
                          ("num_layers", num_layers), ("num_labels", num_labels)):
            _check_dim(name, dim)
        _check_prob("embed_dropout", embed_dropout)
        _check_prob("dropout", dropout)
        if pooling not in ("mean", "last"):
            raise ConfigError(f"lstm option pooling must be 'mean' or 'last', got {pooling!r}")
        self.pooling = pooling
        self.embed_dropout = embed_dropout
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.rnn = nn.LSTM(emb_dim, hidden_dim, num_layers=num_layers, batch_first=True,
                           dropout=dropout if num_layers > 1 else 0.0)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden_dim, num_labels)
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        with torch.no_grad():
            self.embedding.weight[pad_id].zero_()

    def forward(self, batch: Batch) -> torch.Tensor:
        x = embedding_dropout(self.embedding, batch.input_ids, self.embed_dropout, self.training)
        h, _ = self.rnn(x)  # [B, T, H]
        mask = batch.attention_mask.to(h.dtype).unsqueeze(-1)
        lengths = batch.attention_mask.sum(dim=1)
        if self.pooling == "mean":
            pooled = (h * mask).sum(dim=1) / lengths.clamp(min=1).unsqueeze(-1).to(h.dtype)
        else:
            pooled = h[torch.arange(h.shape[0], device=h.device), (lengths - 1).clamp(min=0)]
        return self.head(self.drop(pooled))
