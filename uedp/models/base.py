"""What every model of the project is: a `torch.nn.Module` mapping a `Batch` to logits.

Contract (all families: LSTM, GPT-2, BERT, MiniLM):
- `model(batch) -> logits`. For `task == "next_word"`: `[B, T, V]`, where `logits[:, t]` scores the token
  at position `t + 1` of `batch.input_ids`. For `task == "classification"`: `[B, num_labels]`.
- Models never compute a loss: the task (`uedp.tasks`) does, per sentence, so the client can weight each
  sentence by omega(x).
- `batch.input_ids` is right-padded with `model.pad_id`; padding never changes the logits of real tokens.
- The federated exchange format is `get_weights(model)`: the trainable parameters, each once (tied weights
  are a single parameter), in `named_parameters()` order. The update Delta_u and its L2 norm for clipping
  are taken over exactly these arrays, always float32 (a model option `dtype` changes what the forward computes
  in, never what is exchanged: uedp.models.precision); `set_weights` loads them back.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from uedp.errors import ConfigError
from uedp.tasks import CLASSIFICATION, NEXT_WORD, task_names
from uedp.tokenization import Batch


def check_task(task: str, num_labels: int | None, *, family: str, supports: Sequence[str]) -> None:
    """Validate a (task, num_labels) pair for a model family, raising ConfigError naming the bad value."""
    if task not in task_names():  # the task registry (uedp.tasks), names only: a model is built for a name
        raise ConfigError(f"unknown task {task!r}; choose one of: {', '.join(task_names())}")
    if task not in supports:
        raise ConfigError(
            f"model {family!r} does not support task {task!r} (it supports: {', '.join(supports)})"
        )
    if task == CLASSIFICATION and (not isinstance(num_labels, int) or num_labels < 2):
        raise ConfigError(f"model {family!r}: classification needs num_labels >= 2, got {num_labels!r}")
    if task == NEXT_WORD and num_labels is not None:
        raise ConfigError(f"model {family!r}: num_labels is meaningless for next_word, got {num_labels!r}")


class UedpModel(nn.Module):
    """Base class: `family` names the architecture, `task` what the logits mean (see module docstring)."""

    family: str = "?"
    # precision (uedp.models.precision): the dtype the forward computes in (float32: no autocast) and the dtype
    # a released checkpoint is saved in; the transformers factories set them from the model option `dtype`
    compute_dtype: torch.dtype = torch.float32
    release_dtype: str = "float32"

    def __init__(self, *, task: str, pad_id: int, num_labels: int | None = None) -> None:
        super().__init__()
        self.task = task
        self.pad_id = pad_id
        self.num_labels = num_labels

    def forward(self, batch: Batch) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


def trainable_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) of every trainable parameter, each shared parameter once."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def parameter_counts(model: nn.Module) -> tuple[int, int]:
    """(trainable, total) numbers of `model`'s parameters, each shared parameter once: the trainable ones are the
    update's dimension, the one the server's noise is added to."""
    return (sum(p.numel() for _, p in trainable_parameters(model)), sum(p.numel() for p in model.parameters()))


def get_weights(model: nn.Module) -> list[np.ndarray]:
    """Copies of the trainable parameters (float32 numpy arrays, whatever the model computes in: numpy has no
    bfloat16, and the clip and the noise work in float32), the federated exchange format."""
    return [p.detach().float().cpu().numpy().copy() for _, p in trainable_parameters(model)]


def set_weights(model: nn.Module, weights: Sequence[np.ndarray]) -> None:
    """Load arrays produced by `get_weights` of a model of the same architecture (into float32 parameters: a
    mixed-precision model's cast rules, uedp.models.precision.prepare, are applied first)."""
    from uedp.models.precision import prepare

    prepare(model)
    params = trainable_parameters(model)
    if len(weights) != len(params):
        raise ValueError(f"set_weights: got {len(weights)} arrays for {len(params)} trainable parameters")
    with torch.no_grad():
        for (name, p), w in zip(params, weights):
            if tuple(w.shape) != tuple(p.shape):
                raise ValueError(f"set_weights: parameter {name} has shape {tuple(p.shape)}, got {w.shape}")
            p.copy_(torch.as_tensor(w, dtype=p.dtype))
