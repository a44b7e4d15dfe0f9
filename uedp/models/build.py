"""The run's model (`build_run_model`; `ModelSpec`: the run's model settings, which build it): built by name at
the size of its tokenizer (`ModelShape`, or a prepared run's manifest), after the refusals a build owes its
checkpoint: the run's tokenizer must be the checkpoint's own (its digest), model.options.allow_missing is refused
with LoRA or frozen weights (`ALLOW_MISSING_FROZEN`) and task.max_len above the model's positions
(`check_max_len`); model.lora.r > 0 then wraps it in LoRA adapters (uedp.models.lora)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from uedp.errors import ConfigError
from uedp.models.base import UedpModel
from uedp.models.checkpoints import check_tokenizer, checkpoint_of
from uedp.models.lora import with_lora
from uedp.models.registry import build_model

if TYPE_CHECKING:
    from uedp.config import LoraConfig


class Shape(Protocol):
    """What sizes a model: a ModelShape, a prepared run's Manifest, uedp.server_data.ServerData."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def pad_id(self) -> int: ...

    @property
    def num_labels(self) -> int | None: ...


@dataclass(frozen=True)
class ModelShape:
    """What building the model needs besides its options: a Manifest has these too (and `tokenizer_digest`, the
    run tokenizer's digest, which a checkpoint's tokenizer must have; None: not checked)."""

    vocab_size: int
    pad_id: int
    num_labels: int | None
    tokenizer_digest: str | None = None


@dataclass(frozen=True)
class ModelSpec:
    """The run's model settings: model `name` with `options` and `lora` (the model group) for `task` at `max_len`
    tokens (the task group); `build` makes one (`build_run_model`)."""

    name: str
    options: dict[str, Any]
    lora: LoraConfig
    task: str
    max_len: int

    def build(self, shape: Shape, *, seed: int | None = None) -> UedpModel:
        """The model sized by `shape` (build_run_model); `seed` seeds torch before the weights are drawn."""
        return build_run_model(self.name, self.options, self.lora, shape, task=self.task, max_len=self.max_len,
                               seed=seed)


# a weight missing from the checkpoint starts at random on every build (server, each node, the user's own), and
# one that is frozen never trains towards a shared value: the builds would disagree for good
ALLOW_MISSING_FROZEN = ("model.options.allow_missing = true with {what}: the weights missing from the checkpoint "
                        "would start at random on every build (the server, each node, whoever loads the release) and "
                        "those frozen would never be trained or sent, so every build would hold different ones. Set "
                        "model.options.allow_missing to false (and use the checkpoint the weights belong to), or set "
                        "model.lora.r = 0 and leave freeze_encoder out so every weight trains")


def build_run_model(model: str, options: dict[str, Any], lora: LoraConfig, shape: Shape, *, task: str, max_len: int,
              seed: int | None = None) -> UedpModel:
    """Model `model` with `options` for `task`, sized by `shape` (anything with vocab_size, pad_id and
    num_labels); a checkpoint is refused unless the run's tokenizer is its own (shape.tokenizer_digest, when it
    has one), or with allow_missing and LoRA or frozen weights; `max_len` (task.max_len) above the model's
    positions is refused (`check_max_len`); `lora.r` > 0 puts LoRA adapters on it (only they, and a classifier's
    new head, are then trainable). `seed` seeds torch before the weights are drawn."""
    digest = getattr(shape, "tokenizer_digest", None)
    checkpoint = checkpoint_of(model, options)
    if checkpoint is not None and checkpoint.allow_missing and lora.r:
        raise ConfigError(ALLOW_MISSING_FROZEN.format(what=f"model.lora.r = {lora.r}"))
    if checkpoint is not None and digest is not None:
        check_tokenizer(checkpoint, digest)
    if seed is not None:
        torch.manual_seed(seed)
    built = build_model(model, task=task, vocab_size=shape.vocab_size, pad_id=shape.pad_id,
                        num_labels=shape.num_labels, **options)
    if checkpoint is not None and checkpoint.allow_missing and not all(p.requires_grad for p in built.parameters()):
        raise ConfigError(ALLOW_MISSING_FROZEN.format(what="frozen weights (the model option freeze_encoder)"))
    check_max_len(max_len, built, model)
    return with_lora(built, lora)


def check_max_len(max_len: int, model: UedpModel, name: str) -> None:
    """Refuse task.max_len `max_len` above the positions of `model` (model `name`; `model.max_positions`:
    n_positions or max_position_embeddings; models without one, the LSTM, take any length). task.max_len is the
    framed length (uedp.tokenization.TextTokenizer.frame: the start and end tokens included), the longest row a
    batch has."""
    positions = getattr(model, "max_positions", None)
    if isinstance(positions, int) and max_len > positions:
        raise ConfigError(f"task.max_len = {max_len} is above the model's {positions} positions (model "
                          f"{name!r}: n_positions or max_position_embeddings of its config): a sentence "
                          f"framed with its start and end tokens may be {max_len} tokens long. Set "
                          f"task.max_len <= {positions}")
