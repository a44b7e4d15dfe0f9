"""Clipping of a whole model update (docs/mechanism.md step 6), and the update containers shared by the privacy code.

An update is a dict name -> array or a list of arrays (a model's parameters in order); arrays are torch
tensors or numpy arrays of a floating dtype. Norms are GLOBAL: the L2 norm over all arrays together,
computed in float64.

    clip_update(update, beta, w_u=1) -> (clipped, norm_before)   clipped = w_u * update * min(1, beta / norm)
    scale(update, w_u)               -> update * w_u,  w_u in [0, 1]

Both return NEW arrays (the input is never mutated), in the input's container type and dtypes. A zero
update stays zero. The clipped norm is guaranteed <= w_u * beta even after rounding to the arrays' dtype
(if the rescaled float32 norm lands a hair above, the factor is nudged down). Clipping gradients step by step
does not bound the update and is no substitute (docs/mechanism.md step 6). torch is never imported here: tensors are
recognized only if the caller has imported torch.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from uedp.checks import positive, probability

Update = Mapping[str, Any] | Sequence[Any]


def is_torch(x: object) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def leaves(update: Update) -> tuple[list[str] | None, list[Any]]:
    """(names, arrays) of an update; names is None for a list update."""
    if isinstance(update, Mapping):
        names = list(update)
        return names, [update[k] for k in names]
    if isinstance(update, Sequence) and not isinstance(update, str | bytes):
        return None, list(update)
    raise TypeError(
        f"an update must be a dict name -> array or a list of arrays, not {type(update).__name__}"
    )


def rebuild(names: list[str] | None, arrays: list[Any]) -> dict[str, Any] | list[Any]:
    return list(arrays) if names is None else dict(zip(names, arrays))


def _check_float(i: int | str, a: Any) -> None:
    if is_torch(a):
        if not a.is_floating_point():
            raise TypeError(f"update[{i!r}] has non-floating dtype {a.dtype}")
    elif isinstance(a, np.ndarray):
        if not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"update[{i!r}] has non-floating dtype {a.dtype}")
    else:
        raise TypeError(f"update[{i!r}] must be a torch tensor or numpy array, got {type(a).__name__}")


def to_numpy64(a: Any) -> np.ndarray:
    """A float64 numpy copy of a torch tensor or numpy array."""
    if is_torch(a):
        return a.detach().to("cpu").double().numpy().copy()
    return np.array(a, dtype=np.float64, copy=True)


def _sq_norm(a: Any) -> float:
    if is_torch(a):
        return float(a.detach().double().pow(2).sum())
    with np.errstate(over="ignore"):  # an overflow gives inf, which callers treat as non-finite
        return float(np.sum(np.square(a, dtype=np.float64)))


def update_norm(update: Update) -> float:
    """Global L2 norm over all arrays of the update (float64)."""
    names, arrays = leaves(update)
    for i, a in enumerate(arrays):
        _check_float(names[i] if names else i, a)
    return math.sqrt(sum(_sq_norm(a) for a in arrays))


def _times(update: Update, factor: float) -> dict[str, Any] | list[Any]:
    names, arrays = leaves(update)
    scaled = [a.detach() * factor if is_torch(a) else np.array(a * factor, dtype=a.dtype) for a in arrays]
    return rebuild(names, scaled)


def _check_unit(name: str, value: float) -> float:
    return probability(name, value)


def clip_update(update: Update, beta: float, *, w_u: float = 1.0) -> tuple[dict[str, Any] | list[Any], float]:
    """(w_u * update * min(1, beta / ||update||_2), ||update||_2), over all arrays together; new arrays.

    The result's norm is <= w_u * beta after rounding to the arrays' dtypes. Pass the client's weight here
    rather than calling `scale` afterwards: scaling a clipped float32 update can round a few ulps above."""
    beta = positive("clip bound beta", beta)
    w = _check_unit("user weight w_u", w_u)
    norm = update_norm(update)
    if not math.isfinite(norm):
        raise ValueError("update has non-finite values (or overflows float64); it cannot be clipped")
    bound = w * beta
    factor = w * min(1.0, beta / norm) if norm > 0.0 else w
    clipped = _times(update, factor)
    for _ in range(8):  # rounding to float32/16 can leave the norm a few ulps above the bound
        after = update_norm(clipped)
        if after <= bound:
            return clipped, norm
        factor *= (bound / after) * (1.0 - 1e-6)
        clipped = _times(update, factor)
    raise ArithmeticError(f"could not clip the update to norm <= {bound} (norm {norm})")


def scale(update: Update, w_u: float) -> dict[str, Any] | list[Any]:
    """w_u * update, w_u in [0, 1] (the client's weight); new arrays."""
    w = _check_unit("user weight w_u", w_u)
    names, arrays = leaves(update)
    for i, a in enumerate(arrays):
        _check_float(names[i] if names else i, a)
    return _times(update, w)
