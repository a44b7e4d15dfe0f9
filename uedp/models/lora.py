"""LoRA (low-rank adapters, through peft) on a transformers model: what a client trains, clips and sends.

`with_lora(model, lora)` (model.lora.r > 0) wraps the model's transformers module (`model.hf`) with
`peft.get_peft_model`: adapters on `lora.target_modules` (peft's default for the architecture when empty), every
base weight frozen. A classifier's new head (the modules outside the base model, `base_model_prefix`: BERT's
classifier, GPT-2's and Llama's score) stays trainable (peft's modules_to_save). `get_weights` (the trainable
parameters, uedp.models.base) is then exactly the adapters and that head: the update a client computes and clips
once as a whole (uedp.flower.mod), and the server re-checks, noises and releases. The base weights never travel:
they are public, loaded by every node from its own copy of the checkpoint (the same files at model.options.path),
and checked by digest (uedp.models.checkpoints.base_digest, sent with every training message). So no frozen base
weight may start at random: the model option allow_missing is refused with LoRA (uedp.config.RunConfig.validate,
uedp.pipeline.new_model), since each build would draw its own.

The accounting does not change with LoRA: the clip bounds whatever a client sends, whatever it is a function of
(docs/proofs.md section 1). `is_adapted(model)` says whether a model carries adapters; `transformers_model`
is the transformers module under them (uedp.models.export writes both).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch

from uedp.errors import ConfigError
from uedp.models.base import CLASSIFICATION, NEXT_WORD, UedpModel
from uedp.models.checkpoints import quiet_transformers

if TYPE_CHECKING:
    from uedp.config import LoraConfig


def head_modules(hf: torch.nn.Module) -> list[str]:
    """The top-level modules of a transformers model outside its base model that hold weights: a classifier's
    head (created by the load when the checkpoint had none)."""
    prefix = getattr(hf, "base_model_prefix", "")
    return [name for name, child in hf.named_children()
            if name != prefix and any(True for _ in child.parameters())]


def with_lora(model: UedpModel, lora: LoraConfig) -> UedpModel:
    """`model` with LoRA adapters (module docstring); unchanged when lora.r is 0."""
    if not lora.r:
        return model
    hf = getattr(model, "hf", None)
    if not isinstance(hf, torch.nn.Module):
        raise ConfigError(f"model.lora needs a transformers model (hf, gpt2, bert, or minilm with pooling cls); model "
                          f"{model.family!r} has none: set model.lora.r = 0")
    if not all(p.requires_grad for p in hf.parameters()):
        raise ConfigError("model.lora and the model option freeze_encoder both choose what trains: use one of them")
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    config = PeftLoraConfig(
        r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=lora.modules(),
        modules_to_save=head_modules(hf) if model.task == CLASSIFICATION else None,
        task_type="CAUSAL_LM" if model.task == NEXT_WORD else "SEQ_CLS",
    )
    with quiet_transformers(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft's notes (GPT-2's Conv1D: fan_in_fan_out set for us)
        try:
            model.hf = get_peft_model(hf, config)
        except ValueError as exc:  # no default target modules for this architecture, a module that is not there
            raise ConfigError(f"model.lora: {exc} (model.lora.target_modules names the modules to adapt, "
                              "comma-separated)") from None
    return model


def is_adapted(model: torch.nn.Module) -> bool:
    """Whether `model` (a UedpModel) carries LoRA adapters."""
    from peft import PeftModel

    return isinstance(getattr(model, "hf", None), PeftModel)


def transformers_model(model: torch.nn.Module) -> Any:
    """The transformers module of a UedpModel (under its adapters, if any: their weights included)."""
    hf = model.hf
    return hf.get_base_model() if is_adapted(model) else hf
