"""Where a run's torch work happens: `federation.device` = auto | cpu | cuda | cuda:N.

    check_device("cuda:1")        # ConfigError naming federation.device: a bad value, cuda without CUDA, no GPU 1
    resolve_device("auto")        # torch.device("cuda") where this machine's torch sees a GPU, else cpu
    actors_per_gpu(model_bytes, trainable_bytes, gpu_bytes, cpus)   # a simulation's clients on one GPU
    evaluation_model(model, "cuda")   # the model to evaluate there: one device copy, refreshed in place

Each machine resolves the option for itself: a node trains its model on its own device, the server evaluates
on its own (server/setup.py), so `auto` on a GPU-less server with GPU nodes evaluates on the CPU and trains
on the GPUs. `cuda` means cuda on every machine of the run (torch's current GPU, the first visible one): any
one without it refuses the run (RunConfig.validate checks it where the config is read). `cuda:N` names GPU N
of those the process sees (N an integer >= 0, below torch.cuda.device_count()): a machine that sees fewer
GPUs refuses it, naming federation.device. Which GPUs a process sees is CUDA_VISIBLE_DEVICES's choice: in a
Ray simulation each client's actor sees only the GPU(s) Ray assigned it, numbered from 0, so there `cuda:0`
is the actor's own GPU and `cuda:N` with N > 0 names a GPU it does not have; runtime/simulate.py therefore
refuses N > 0 for a simulation (choose `cuda`, and restrict the GPUs with CUDA_VISIBLE_DEVICES), and
`cuda:0` is then the same as `cuda`.

What leaves a node is the same on every device: the model's weights copied back to the CPU as float32 arrays
(uedp.models.base.get_weights), of which the client mod takes the update and its one clip (uedp.flower.mod);
the server's optimizer, noise and ledger stay on the CPU. Only the local training and the evaluation run on
the device, so a cuda run's ledger is the cpu run's and its metrics differ by float arithmetic alone
(experiments/device_check.py compares them).

A Ray simulation sizes each client's GPU share by memory (`actors_per_gpu`, from `model_memory` and the
GPU's total memory): the weights, plus for the trainable parameters a gradient and the local optimizer's
states, plus an allowance for the activations and the process's CUDA context; as many clients share a GPU
as fit in USABLE_SHARE of its memory, and no more than the CPUs run at once.

Importing this module does not import torch (uedp.config validates with it); checking `cuda` / `cuda:N`,
resolving, sizing a model and evaluating do.
"""

from __future__ import annotations

import re
import weakref
from typing import TYPE_CHECKING

from uedp.errors import ConfigError

if TYPE_CHECKING:
    import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N")  # federation.device (cuda:N: N a GPU index, 0, 1, ...)
CUDA_INDEX = re.compile(r"cuda:(0|[1-9][0-9]*)")  # cuda:N as the option takes it (no sign, no leading zero)
FIELD = "federation.device"
# How to get a torch that has CUDA (the project installs the CPU wheel: README, "Set-up: two commands").
CUDA_INSTALL = "pip install torch --index-url https://download.pytorch.org/whl/cu124"

MIB = 2**20
# A client's GPU memory beyond its tensors (actors_per_gpu): each Ray actor is a process with its own CUDA
# context (~300-500 MiB with the cuBLAS/cuDNN workspaces), and its activations and allocator slack in training.
CUDA_CONTEXT_BYTES = 500 * MIB
ACTIVATION_BYTES = 512 * MIB
USABLE_SHARE = 0.9  # of a GPU's total memory: the rest is headroom (fragmentation, the driver's own)
OPTIMIZER_STATES = {"sgd": 0, "sgd+momentum": 1, "adam": 2}  # tensors the local optimizer keeps per parameter


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


def cuda_index(choice: str) -> int | None:
    """N of `cuda:N`; None for every other value."""
    m = CUDA_INDEX.fullmatch(choice)
    return int(m.group(1)) if m else None


def check_device(choice: object, *, field: str = FIELD) -> None:
    """ConfigError naming `field` for a value outside DEVICE_CHOICES, for `cuda` / `cuda:N` where this machine's
    torch cannot use a GPU (cuda_missing says why), and for `cuda:N` where it sees N GPUs or fewer. `auto` and
    `cpu` need no torch here."""
    if not isinstance(choice, str) or (choice not in DEVICE_CHOICES[:3] and cuda_index(choice) is None):
        raise ConfigError(f"{field} must be one of auto, cpu, cuda, or cuda:N (N a GPU index: 0, 1, ...), got "
                          f"{choice!r}")
    if choice.startswith("cuda"):
        why = cuda_missing()
        if why is not None:
            raise ConfigError(f"{field} = {choice}, but {why}; or choose {field} = auto (cuda where there is "
                              "a GPU, else cpu) or cpu")
        index = cuda_index(choice)
        if index is not None:
            import torch

            count = torch.cuda.device_count()
            if index >= count:
                raise ConfigError(f"{field} = {choice}, but this process sees {count} GPU(s), cuda:0 to "
                                  f"cuda:{count - 1} (CUDA_VISIBLE_DEVICES decides which; a Ray actor sees only "
                                  "its own): choose one of them, or cuda")


def resolve_device(choice: str, *, field: str = FIELD) -> torch.device:
    """The torch device `choice` means on this machine: auto is cuda when torch sees a GPU, else cpu; cuda:N
    is GPU N (check_device's errors for a bad value, cuda without a GPU, or no GPU N)."""
    import torch

    check_device(choice, field=field)
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


# --- a simulation's GPU share ------------------------------------------------------------------------------


def model_memory(model: torch.nn.Module) -> tuple[int, int]:
    """(bytes of the model's parameters and buffers, bytes of its trainable parameters), at their dtypes."""
    params = list(model.parameters())
    total = sum(p.numel() * p.element_size() for p in params)
    total += sum(b.numel() * b.element_size() for b in model.buffers())
    trainable = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    return total, trainable


def client_gpu_bytes(model_bytes: int, trainable_bytes: int, *, optimizer_states: int = 2) -> int:
    """One training client's GPU memory, estimated: the model's weights, a gradient and `optimizer_states`
    tensors per trainable parameter (Adam: 2, SGD with momentum: 1, plain SGD: 0), ACTIVATION_BYTES and
    CUDA_CONTEXT_BYTES."""
    if model_bytes < 0 or trainable_bytes < 0 or optimizer_states < 0:
        raise ValueError("model_bytes, trainable_bytes and optimizer_states must be >= 0")
    return model_bytes + trainable_bytes * (1 + optimizer_states) + ACTIVATION_BYTES + CUDA_CONTEXT_BYTES


def actors_per_gpu(model_bytes: int, trainable_bytes: int, gpu_bytes: int, cpus: int, *,
                   optimizer_states: int = 2) -> int:
    """How many clients train at once on one GPU of `gpu_bytes` total memory: as many as client_gpu_bytes fits
    in USABLE_SHARE of it, at most `cpus` (the clients the CPUs run at once for this GPU). 0 where not even one
    fits (the caller gives such a client a whole GPU, and says the estimate does not fit)."""
    if gpu_bytes <= 0 or cpus < 1:
        raise ValueError(f"gpu_bytes must be > 0 and cpus >= 1, got {gpu_bytes} and {cpus}")
    need = client_gpu_bytes(model_bytes, trainable_bytes, optimizer_states=optimizer_states)
    return int(min(int(gpu_bytes * USABLE_SHARE) // need, cpus))


# --- evaluating on a device --------------------------------------------------------------------------------

# model -> (device, its copy there): the one device copy evaluation_model refreshes (dropped with the model)
_DEVICE_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _refresh(source: torch.nn.Module, copy: torch.nn.Module) -> bool:
    """Copy `source`'s parameters and buffers into `copy` in place; False (nothing copied) where their state
    dicts differ in names or shapes. A dtype may differ: mixed precision (uedp.models.precision.prepare) casts the
    copy's frozen weights at its first forward, and `copy_` casts the source's values the same way."""
    import torch

    src, dst = source.state_dict(), copy.state_dict()
    if list(src) != list(dst) or any(a.shape != b.shape for a, b in zip(src.values(), dst.values())):
        return False
    with torch.no_grad():
        for a, b in zip(src.values(), dst.values()):
            b.copy_(a)
    return True


def evaluation_model(model: torch.nn.Module, device: str | torch.device, *,
                     always_copy: bool = False) -> torch.nn.Module:
    """The model to evaluate on `device`: the model itself on the CPU; elsewhere (or with `always_copy`) a copy
    of it there, made once per model (copy.deepcopy, then moved) and kept, later calls copying the model's
    current parameters and buffers into it in place (a fresh deep copy only where the model's state dict no
    longer matches the copy's). The server's model, its optimizer and every release stay on the CPU, so a
    run's global models do not depend on where it evaluates; the device holds one copy for the run. What
    server.setup.evaluate and uedp.entity_tokens.evaluation_tokens evaluate."""
    import torch

    target = torch.device(device)
    if target.type == "cpu" and not always_copy:
        return model
    kept = _DEVICE_COPIES.get(model)
    if kept is not None and kept[0] == target and _refresh(model, kept[1]):
        return kept[1]
    import copy

    moved = copy.deepcopy(model).to(target)
    _DEVICE_COPIES[model] = (target, moved)
    return moved
