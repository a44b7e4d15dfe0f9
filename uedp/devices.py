"""Where a run's torch work happens: `federation.device` = auto | cpu | cuda.

    check_device("cuda")          # ConfigError naming federation.device: a bad value, or cuda without CUDA
    resolve_device("auto")        # torch.device("cuda") where this machine's torch sees a GPU, else cpu

Each machine resolves the option for itself: a node trains its model on its own device, the server evaluates
on its own (server/setup.py), so `auto` on a GPU-less server with GPU nodes evaluates on the CPU and trains
on the GPUs. `cuda` means cuda on every machine of the run: any one without it refuses the run
(RunConfig.validate checks it where the config is read). What leaves a node is the same either way: the
model's weights copied back to the CPU as float32 arrays (uedp.models.base.get_weights), of which the client
mod takes the update and its one clip (uedp.flower.mod); the server's optimizer, noise and ledger stay on the
CPU. Only the local training and the evaluation run on the device, so a cuda run's ledger is the cpu run's
and its metrics differ by float arithmetic alone (experiments/device_check.py compares them).

Importing this module does not import torch (uedp.config validates with it); checking `cuda` and resolving
do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from uedp.errors import ConfigError

if TYPE_CHECKING:
    import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda")  # federation.device
FIELD = "federation.device"
# How to get a torch that has CUDA (the project installs the CPU wheel: README, "Set-up: two commands").
CUDA_INSTALL = "pip install torch --index-url https://download.pytorch.org/whl/cu124"


def cuda_missing() -> str | None:
    """Why this machine's torch cannot use a GPU (what to do about it), or None when it can."""
    import torch

    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return (f"the installed torch ({torch.__version__}) has no CUDA: it is a CPU build. Install a CUDA build "
                f"into this environment, e.g. `{CUDA_INSTALL}` (pick the index of your CUDA version: "
                "https://pytorch.org/get-started/locally/)")
    return (f"the installed torch ({torch.__version__}, built with CUDA {torch.version.cuda}) sees no GPU: check "
            "the NVIDIA driver (nvidia-smi) and CUDA_VISIBLE_DEVICES")


def check_device(choice: object, *, field: str = FIELD) -> None:
    """ConfigError naming `field` for a value outside DEVICE_CHOICES, or for `cuda` where this machine's torch
    cannot use a GPU (cuda_missing says why). `auto` and `cpu` need no torch here."""
    if not isinstance(choice, str) or choice not in DEVICE_CHOICES:
        raise ConfigError(f"{field} must be one of {', '.join(DEVICE_CHOICES)}, got {choice!r}")
    if choice == "cuda":
        why = cuda_missing()
        if why is not None:
            raise ConfigError(f"{field} = cuda, but {why}; or choose {field} = auto (cuda where there is "
                              "a GPU, else cpu) or cpu")


def resolve_device(choice: str, *, field: str = FIELD) -> torch.device:
    """The torch device `choice` means on this machine: auto is cuda when torch sees a GPU, else cpu
    (check_device's errors for a bad value or cuda without one)."""
    import torch

    check_device(choice, field=field)
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


def evaluation_model(model: torch.nn.Module, device: str) -> torch.nn.Module:
    """The model to evaluate on `device`: the model itself on the CPU, a copy moved there elsewhere (the
    server's model, its optimizer and every release stay on the CPU, so a run's global models do not depend on
    where it evaluates). What server.setup.evaluate and uedp.entity_tokens.evaluation_split evaluate."""
    if device == "cpu":
        return model
    import copy

    return copy.deepcopy(model).to(device)
