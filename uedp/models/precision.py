"""Mixed precision for the transformers families (model option `dtype`), and float16's dynamic loss scaling.

Contract:
- `model.options.dtype` (families hf, gpt2, bert): "float32" (the default: no cast, no autocast, bit-identical
  to a model without the option), "bfloat16" or "float16". `parse_dtype` refuses anything else with a
  ConfigError naming model.options.dtype.
- Cast rules (`prepare(model)`, mixed precision as Hugging Face Trainer's bf16=True): a weight that is NOT trained
  (`requires_grad` false: the frozen base under LoRA, a frozen encoder) is stored in the compute dtype (memory);
  a trainable weight is stored in float32 (the master weights: an optimizer step smaller than a bfloat16 ulp is
  not rounded away). The forward runs under `torch.autocast(device_type, dtype)` (`autocast(model)`); the
  losses are computed on float32 logits (uedp.tasks). `prepare` is idempotent and cheap (a dtype check per
  parameter), so uedp.tasks runs it before every forward: LoRA added after the model was built, or a model
  moved to another device, is handled at the next forward.
- Where autocast does not support the dtype on the model's device (`autocast_supported`: torch's
  is_autocast_available and its per-device dtype lists; in torch 2.13 cpu takes bfloat16 and float16, cuda both),
  the model runs in float32 (every weight float32, no autocast) and says so once on stderr. A run never fails
  for it: the node's device is chosen by the node, after the server checked the config.
- The checkpoint is loaded in the compute dtype only when its own dtype (config.json `torch_dtype` or `dtype`,
  `checkpoint_dtype`) is that dtype, so that no trained weight starts from a rounded value; otherwise in float32,
  and `prepare` casts the frozen weights down (`load_dtype`).
- `model.release_dtype` (a dtype name): what the released checkpoint is saved in (uedp.models.export): the
  option when given, else the checkpoint's own dtype, else float32.
- Everything exchanged stays float32: uedp.models.base.get_weights casts to float32 numpy arrays; the clip and
  the noise never see a low-precision tensor.
- `LossScaler`: float16's dynamic loss scaling (the rules of torch.amp.GradScaler, written out with tensor ops:
  uedp.training.LocalOptimizer says why not torch.optim / torch.amp): the loss is multiplied by `scale` before
  backward; before a step the gradients are divided by it; a step whose gradients hold an inf or a NaN is
  skipped and the scale halved; after `growth_interval` good steps in a row the scale doubles.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from uedp.errors import ConfigError

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEFAULT = "float32"
_WARNED: set[tuple[str, str]] = set()


def dtype_name(dtype: torch.dtype) -> str:
    return next(name for name, d in DTYPES.items() if d == dtype)


def parse_dtype(value: Any, *, family: str) -> torch.dtype:
    """The torch dtype of option `dtype` (None: float32); ConfigError naming model.options.dtype otherwise."""
    if value is None:
        return torch.float32
    if not isinstance(value, str) or value not in DTYPES:
        raise ConfigError(f"model.options.dtype (model {family!r}) must be one of {', '.join(DTYPES)}, "
                          f"got {value!r}")
    return DTYPES[value]


def checkpoint_dtype(path: Path) -> str | None:
    """The checkpoint's own dtype name from its config.json (`dtype`, or the older `torch_dtype`), when it is one
    of DTYPES; None when it records none (or the file is unreadable: the load reports that)."""
    try:
        config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(config, dict):
        return None
    for key in ("dtype", "torch_dtype"):
        value = config.get(key)
        if isinstance(value, str) and value in DTYPES:
            return value
    return None


def load_dtype(compute: torch.dtype, own: str | None) -> torch.dtype:
    """The dtype to load a checkpoint in: the compute dtype when the checkpoint holds exactly that, else float32."""
    return compute if own is not None and DTYPES[own] == compute else torch.float32


def release_dtype(option: Any, own: str | None) -> str:
    """model.release_dtype: the option when given, else the checkpoint's own dtype, else float32."""
    return option if isinstance(option, str) and option in DTYPES else (own or DEFAULT)


@functools.lru_cache(maxsize=16)
def autocast_supported(device_type: str, dtype: torch.dtype) -> bool:
    """Whether torch.autocast runs `dtype` on `device_type` (float32 needs no autocast: True)."""
    if dtype == torch.float32:
        return True
    from torch.amp.autocast_mode import is_autocast_available

    if not is_autocast_available(device_type):
        return False
    if device_type == "cuda":
        return dtype == torch.float16 or torch.cuda.is_bf16_supported()
    if device_type in ("cpu", "mps", "xpu"):
        import warnings

        with warnings.catch_warnings(record=True) as caught:  # torch warns and disables an unsupported dtype
            warnings.simplefilter("always")
            with torch.autocast(device_type, dtype=dtype):
                enabled = torch.is_autocast_enabled(device_type)
        return enabled and not caught
    return False


def _device(model: torch.nn.Module) -> torch.device:
    return next((p.device for p in model.parameters()), torch.device("cpu"))


def effective_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype the model computes in on its current device: its compute_dtype, or float32 where unsupported."""
    dtype = getattr(model, "compute_dtype", torch.float32)
    if dtype == torch.float32:
        return dtype
    device = _device(model).type
    if autocast_supported(device, dtype):
        return dtype
    key = (device, dtype_name(dtype))
    if key not in _WARNED:
        _WARNED.add(key)
        print(f"model.options.dtype {dtype_name(dtype)}: autocast does not support it on {device}; this model "
              "runs in float32 here", file=sys.stderr, flush=True)
    return torch.float32


@torch.no_grad()
def prepare(model: torch.nn.Module) -> torch.dtype:
    """Apply the cast rules (module docstring) for the model's device; returns the dtype the forward runs in.
    A no-op for a float32 model."""
    if getattr(model, "compute_dtype", torch.float32) == torch.float32:
        return torch.float32
    dtype = effective_dtype(model)
    for p in model.parameters():
        want = torch.float32 if p.requires_grad or dtype == torch.float32 else dtype
        if p.dtype != want and p.is_floating_point():
            p.data = p.data.to(want)
    return dtype


@contextlib.contextmanager
def autocast(model: torch.nn.Module, device: torch.device | str | None = None) -> Iterator[None]:
    """The forward's context: torch.autocast in the model's compute dtype on `device` (default: the model's), after
    `prepare`; nothing at all for a float32 model (or where the dtype is unsupported)."""
    dtype = prepare(model)
    if dtype == torch.float32:
        yield
        return
    device_type = torch.device(device).type if device is not None else _device(model).type
    with torch.autocast(device_type, dtype=dtype):
        yield


def needs_loss_scaling(model: torch.nn.Module) -> bool:
    """Whether the model's training needs a LossScaler (it computes in float16)."""
    return effective_dtype(model) == torch.float16


class LossScaler:
    """float16's dynamic loss scaling (module docstring); torch.amp.GradScaler's defaults."""

    def __init__(self, *, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000) -> None:
        self.scale = float(init_scale)
        self.growth_factor, self.backoff_factor = float(growth_factor), float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.good_steps = 0
        self.skipped = 0

    def scaled(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale

    @torch.no_grad()
    def unscale(self, params: list[torch.nn.Parameter]) -> bool:
        """Divide the gradients by the scale; True when they are all finite (the step may be taken)."""
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return True
        inv = 1.0 / self.scale
        for g in grads:
            g.mul_(inv)
        finite = torch.stack([torch.isfinite(g).all() for g in grads]).all()
        return bool(finite)  # one host read per optimizer step

    def update(self, finite: bool) -> None:
        """After a step (finite) or a skipped one (not finite): grow or back off the scale."""
        if not finite:
            self.scale *= self.backoff_factor
            self.good_steps = 0
            self.skipped += 1
            return
        self.good_steps += 1
        if self.good_steps == self.growth_interval:
            self.scale *= self.growth_factor
            self.good_steps = 0
