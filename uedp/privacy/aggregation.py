"""The one aggregation core every strategy shares (docs/mechanism.md steps 7-8).

    recheck(update, template_shapes, w_max=, beta=) -> (update | None, status)
    aggregate(updates, template=, w_max=, beta=, sigma=, denominator=, noise=) -> (mean_update, stats)

    mean_update = (sum of rechecked updates + N(0, sigma^2 I)) / denominator

Privacy never depends on clients behaving: every update is re-checked. Wrong container, names or shapes
(or a non-floating dtype) -> dropped ("dropped_shape"); NaN/Inf -> dropped ("dropped_nonfinite"); norm above
w_max * beta -> clipped to w_max * beta, so that every contribution has norm <= w_max * beta exactly (the
sensitivities assume it: docs/proofs.md section 7; an update whose dtype's rounding defeats the clip, as
float16's can, is clipped in float64 instead); it is counted "reclipped" only above w_max * beta *
(1 + 1e-6), so that the float rounding of an honest client's clip is not reported as misbehaviour;
otherwise "ok". A missing or failed
client is simply absent from `updates`, i.e. contributes zero, as does a dropped update. The statistics hold
counts only, never a per-client number.

The denominator (Z of docs/mechanism.md step 8) is a public constant fixed by the configuration, never computed from the
round's data (the function `denominator`).
The sum and the noise are computed in float64; the result has the template's container, array type, dtype
(and torch device).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from uedp.checks import positive, positive_int, probability
from uedp.privacy.clipping import Update, clip_update, is_torch, leaves, rebuild, to_numpy64, update_norm
from uedp.privacy.noise import NoiseSource
from uedp.privacy.sensitivity import check_rule

OK, RECLIPPED, DROPPED_SHAPE, DROPPED_NONFINITE = "ok", "reclipped", "dropped_shape", "dropped_nonfinite"
STATUSES = (OK, RECLIPPED, DROPPED_SHAPE, DROPPED_NONFINITE)
NORM_SLACK = 1e-6
# The bound noiseless FedAvg aggregates with (it does not clip); the re-check still drops wrong shapes, NaN/Inf.
UNBOUNDED_NORM = 1e30

Shapes = Mapping[str, tuple[int, ...]] | Sequence[tuple[int, ...]]


@dataclass(frozen=True)
class AggregationStats:
    """Counts of the updates received in a round, by re-check status."""

    received: int
    ok: int
    reclipped: int
    dropped_shape: int
    dropped_nonfinite: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def shapes_of(template: Update) -> dict[str, tuple[int, ...]] | list[tuple[int, ...]]:
    names, arrays = leaves(template)
    return rebuild(names, [tuple(a.shape) for a in arrays])


def _is_float_array(a: Any) -> bool:
    if is_torch(a):
        return a.is_floating_point()
    return isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.floating)


def _matches(update: Any, template_shapes: Shapes) -> bool:
    try:
        names, arrays = leaves(update)
    except TypeError:
        return False
    want_names, want = leaves(template_shapes)
    if (names is None) != (want_names is None) or len(arrays) != len(want):
        return False
    if names is not None:
        if set(names) != set(want_names):
            return False
        arrays = [update[k] for k in want_names]
    return all(_is_float_array(a) and tuple(a.shape) == tuple(s) for a, s in zip(arrays, want))


def _all_finite(update: Update) -> bool:
    _, arrays = leaves(update)
    for a in arrays:
        if is_torch(a):
            if not bool(a.detach().isfinite().all()):
                return False
        elif not np.isfinite(a).all():
            return False
    return True


def _check_bound(w_max: float, beta: float) -> float:
    w_max, beta = float(w_max), float(beta)
    if not 0.0 < w_max <= 1.0:
        raise ValueError(f"w_max must lie in (0, 1], got {w_max!r}")
    beta = positive("beta", beta)
    return w_max * beta


def recheck(update: Any, template_shapes: Shapes, *, w_max: float, beta: float) -> tuple[Update | None, str]:
    """Server-side re-check of one client update (see the module docstring). Never mutates `update`."""
    bound = _check_bound(w_max, beta)
    if not _matches(update, template_shapes):
        return None, DROPPED_SHAPE
    if not _all_finite(update):
        return None, DROPPED_NONFINITE
    norm = update_norm(update)
    if not math.isfinite(norm):  # finite entries whose squares overflow float64
        return None, DROPPED_NONFINITE
    if norm > bound:
        try:
            clipped, _ = clip_update(update, bound)
        except ArithmeticError:  # float16 rounding can defeat the clip in the update's dtype: clip in float64
            names, arrays = leaves(update)
            clipped, _ = clip_update(rebuild(names, [to_numpy64(a) for a in arrays]), bound)
        return clipped, RECLIPPED if norm > bound * (1.0 + NORM_SLACK) else OK
    return update, OK


def recheck_split(free: Any, entity: Any, template_shapes: Shapes, *, w_max: float, beta: float,
                  gamma: float) -> tuple[Update | None, str]:
    """A split update's re-check (uedp_split, docs/proofs.md Theorem 3): each part against its OWN bound
    (free <= w_max beta, entity <= w_max gamma; otherwise a client could put beta + gamma into the entity
    part), then their sum, of norm <= w_max (beta + gamma). The status is the worse of the two.

    A part that fails its check (wrong shape, non-finite) counts as ZERO and the other part is kept: dropping
    both would make the free part's presence depend on the entity sentences, a change of w_max (beta + gamma)
    per holder of an entity instead of 2 w_max gamma (docs/proofs.md section 9, adversarial read #2, F1)."""
    checked_free, status_free = recheck(free, template_shapes, w_max=w_max, beta=beta)
    checked_entity, status_entity = recheck(entity, template_shapes, w_max=w_max, beta=gamma)
    status = max(status_free, status_entity, key=STATUSES.index)
    if checked_free is None or checked_entity is None:
        return (checked_entity if checked_free is None else checked_free), status
    names, a = leaves(checked_free)
    _, b = leaves(checked_entity)
    return rebuild(names, [to_numpy64(x) + to_numpy64(y) for x, y in zip(a, b)]), status


class Aggregator(Protocol):
    """The signature of `aggregate`; a strategy takes one (the audit passes a broken one)."""

    def __call__(self, updates: Sequence[Any], *, template: Update, w_max: float, beta: float, sigma: float,
                 denominator: float, noise: NoiseSource) -> tuple[dict[str, Any] | list[Any], AggregationStats]: ...


def aggregate(
    updates: Sequence[Any],
    *,
    template: Update,
    w_max: float,
    beta: float,
    sigma: float,
    denominator: float,
    noise: NoiseSource,
) -> tuple[dict[str, Any] | list[Any], AggregationStats]:
    """(sum of re-checked updates + N(0, sigma^2 I)) / denominator, and the re-check counts."""
    _check_bound(w_max, beta)
    sigma = float(sigma)
    if not (sigma >= 0.0 and math.isfinite(sigma)):
        raise ValueError(f"noise std sigma must be a non-negative finite number, got {sigma!r}")
    divisor = positive("denominator", denominator)
    names, tmpl = leaves(template)
    shapes = shapes_of(template)
    total = [np.zeros(tuple(a.shape), dtype=np.float64) for a in tmpl]
    counts = dict.fromkeys(STATUSES, 0)
    for update in updates:
        checked, status = recheck(update, shapes, w_max=w_max, beta=beta)
        counts[status] += 1
        if checked is None:
            continue
        arrays = [checked[k] for k in names] if names is not None else list(checked)
        for acc, a in zip(total, arrays):
            acc += to_numpy64(a)
    out = []
    for acc, t in zip(total, tmpl):
        mean = (acc + noise.normal(acc.shape, sigma)) / divisor
        if is_torch(t):
            import torch

            out.append(torch.from_numpy(mean).to(dtype=t.dtype, device=t.device))
        else:
            out.append(np.array(mean, dtype=np.asarray(t).dtype))  # np.array: 0-d stays an array
    stats = AggregationStats(received=len(updates), **counts)
    return rebuild(names, out), stats


def denominator(rule: str, *, q_u: float, num_users: int, W_u: float | None = None, q_e: float | None = None,
                W_e: float | None = None, q_s: float | None = None, W_s: float | None = None,
                paper_z: bool = False) -> float:
    """The public constant Z of the estimator (docs/mechanism.md step 8) for a mechanism of accounting rule `rule`.

    Default (and user_dp): Z = q_u * W_u, the expected total weight of the sampled users (W_u defaults to
    num_users, i.e. unit weights; truncation at m_max is ignored, as it only bites with small
    probability). Clients train with a weighted-MEAN loss, so each update is already normalized over its
    selected sentences.

    paper_z=True (uedp / uedp_naive only): the paper's Z = q_u W_u (q_e W_e + q_s W_s), W_e and W_s the
    total entity and extended-entity weights (public constants of the configuration). The extra factor
    (q_e W_e + q_s W_s) is the same every round, so it only rescales the step: a server learning rate
    eta with the paper's Z equals eta / (q_e W_e + q_s W_s) with the default Z. Privacy is unaffected.
    """
    check_rule(rule)
    if not 0.0 < float(q_u) <= 1.0:
        raise ValueError(f"q_u must lie in (0, 1] to define Z, got {q_u!r}")
    positive_int("num_users", num_users)
    W_u = positive("W_u", float(num_users) if W_u is None else float(W_u))
    Z = float(q_u) * W_u
    if not paper_z:
        return Z
    if rule not in ("uedp", "uedp_naive"):
        raise ValueError(f"paper_z applies to uedp / uedp_naive only, not {rule!r}")
    if rule == "uedp_naive":
        q_s, W_s = 0.0, 0.0
    missing = [n for n, v in (("q_e", q_e), ("W_e", W_e), ("q_s", q_s), ("W_s", W_s)) if v is None]
    if missing:
        raise ValueError(f"paper_z needs {', '.join(missing)}")
    for name, q in (("q_e", q_e), ("q_s", q_s)):
        probability(name, q)
    for name, w in (("W_e", W_e), ("W_s", W_s)):
        if not (float(w) >= 0.0 and math.isfinite(float(w))):
            raise ValueError(f"{name} must be a non-negative finite number, got {w!r}")
    factor = float(q_e) * float(W_e) + float(q_s) * float(W_s)
    if factor <= 0.0:
        raise ValueError("paper_z: q_e W_e + q_s W_s must be positive")
    return Z * factor
