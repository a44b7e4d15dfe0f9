"""Epsilons of dominating pairs (uedp.privacy.pairs) composed over rounds: the numeric core every epsilon of
the project goes through (docs/mechanism.md section 4).

  pairs_epsilon(pairs, *, delta, value_discretization_interval=None)   PLD, add and remove, composed in order
  pairs_rdp_epsilon(pairs, *, delta)                                   the same pairs by RDP (an upper bound
                                                                       for Mixture pairs; the scale otherwise)
  undetected_bound(candidates, *, delta, value_discretization_interval=None)
                                        the max over kinds of sentence of the min over their valid bounds

`pairs` are (pair, count) runs: each pair's PLD is self-composed over its count, and the runs are composed with
each other in order. No truncation charge here: uedp.privacy.accounting passes delta - delta_trunc.

Discretization: the PLD grid (`value_discretization_interval`) is, unless given, 3e-4 times an RDP estimate
of the same epsilon, kept within [1e-7, 1e-2] (within [1e-7, 1] once that estimate exceeds 1000, where
epsilon means no privacy and a fine grid would take minutes), and rounded down to a power of 2 (so that a
growing ledger reuses its per-round PLDs). dp-accounting's pessimistic connect-the-dots estimate stays an
upper bound whatever the grid; its excess is about 1e-4 of epsilon or less up to epsilon 1000 (measured
against finer grids), and about 1% beyond. Per-round PLDs and epsilons are cached (`clear_caches` in
uedp.privacy.calibration empties them).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant

from uedp.checks import non_negative_int, positive_int
from uedp.errors import ConfigError
from uedp.privacy.numeric import NumericPair
from uedp.privacy.pairs import Labelled, Mixture, Pair, RemoveForm, _pair_pld

REL_DISCRETIZATION = 3e-4
MIN_DISCRETIZATION = 1e-7
FINE_CAP = 1e-2
NO_PRIVACY = 1000.0  # above this RDP bound, a coarse grid (cost!) is fine: the epsilon means nothing
MAX_DISCRETIZATION = 1.0  # coarser grids overflow in dp-accounting
RANKING_FACTOR = 32.0  # undetected_bound: its candidate bounds are ranked on a grid this much coarser

def check_delta(delta: float, num_users: int | None = None) -> float:
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"delta must lie in (0, 1), got {delta!r}")
    if num_users is not None:
        positive_int("num_users", num_users)
        if delta >= 1.0 / num_users:
            raise ConfigError(f"delta = {delta!r} must be below 1/num_users = 1/{num_users}")
    return delta


PairCounts = Iterable[tuple[Pair, int]]  # (dominating pair, number of rounds), composed in order


_RDP_LOG = logging.getLogger(__name__)
_RDP_LOCK = threading.RLock()


class _AbslToStdlib:
    """What dp-accounting's RDP module sees as its `absl.logging` while uedp calls it (`_quiet_absl`).

    absl's `log` calls `logging.basicConfig()` whenever the root logger has no handler, whatever the level:
    the first warning would add a stderr handler to the root logger for the rest of the process, and every
    line of a logger that propagates to root (Flower's "flwr" among them) would print twice from then on.
    The RDP module warns when it excludes an order whose series does not converge (expected for our events:
    the bound stays valid as the minimum over the other orders) or meets a negative divergence. Those messages
    go to this module's logger at DEBUG (an error at ERROR); nothing else (the root logger, the "absl"
    logger) is touched."""

    def __init__(self, absl_logging: object) -> None:
        self._absl = absl_logging

    @staticmethod
    def _debug(msg: object, *args: object, **_: object) -> None:
        _RDP_LOG.debug("dp-accounting RDP: " + str(msg), *args)

    @staticmethod
    def error(msg: object, *args: object, **_: object) -> None:
        _RDP_LOG.error("dp-accounting RDP: " + str(msg), *args)

    debug = info = warning = warn = _debug

    def __getattr__(self, name: str) -> object:  # anything else the module might use: absl's own
        return getattr(self._absl, name)


@contextlib.contextmanager
def _quiet_absl() -> Iterator[None]:
    """Run dp-accounting's RDP code with its absl logging routed to `_AbslToStdlib` (one thread at a time:
    the module attribute is swapped and restored under a lock)."""
    with _RDP_LOCK:
        absl_logging = rdp_privacy_accountant.logging
        rdp_privacy_accountant.logging = _AbslToStdlib(absl_logging)
        try:
            yield
        finally:
            rdp_privacy_accountant.logging = absl_logging


@functools.lru_cache(maxsize=256)
def _rdp_vector(pair: Pair) -> tuple[tuple[float, ...], np.ndarray]:
    """(orders, RDP of ONE round of `pair` at each order): dp_accounting's RdpAccountant composed once."""
    accountant = rdp_privacy_accountant.RdpAccountant()
    with _quiet_absl():
        accountant.compose(pair.rdp_event(), 1)
    rdp = np.array(accountant._rdp, dtype=float)  # noqa: SLF001 (the accountant keeps its RDP curve here)
    rdp.flags.writeable = False
    return tuple(accountant._orders), rdp  # noqa: SLF001


@functools.lru_cache(maxsize=256)
def _rdp_epsilon(pairs: tuple[tuple[Pair, int], ...], delta: float) -> float:
    """RDP composes additively: count x (one round's curve), summed over the pairs, is what the accountant
    computes for `compose(event, count)` (up to rounding), without recomputing a round's curve per count."""
    live = [(m, c) for m, c in pairs if not m.is_null]
    if not live:
        return 0.0
    if any(m.is_blatant for m, _ in live):
        return math.inf
    orders, total = None, None
    for m, count in live:
        orders, vec = _rdp_vector(m)
        total = count * vec if total is None else total + count * vec
    with _quiet_absl():
        return float(rdp_privacy_accountant.compute_epsilon(orders, total, delta)[0])


def auto_discretization(hint: float) -> float:
    """The PLD grid for an epsilon whose RDP estimate is `hint` (see the module docstring)."""
    if not math.isfinite(hint):  # the RDP bound overflowed: epsilon is astronomically large anyway
        return 1.0
    cap = FINE_CAP if hint <= NO_PRIVACY else MAX_DISCRETIZATION
    vdi = min(cap, max(MIN_DISCRETIZATION, REL_DISCRETIZATION * hint))
    return 2.0 ** math.floor(math.log2(vdi))  # a power of 2: per-round PLDs are reused as a ledger grows


@functools.lru_cache(maxsize=512)
def _pld_epsilon(pairs: tuple[tuple[Pair, int], ...], delta: float, vdi: float | None) -> float:
    live = [(m, c) for m, c in pairs if not m.is_null]
    if not live:
        return 0.0
    if any(m.is_blatant for m, _ in live):
        return math.inf
    if vdi is None:
        vdi = auto_discretization(_rdp_epsilon(pairs, delta))
    total = None
    for m, count in live:
        pld = _pair_pld(m, vdi)
        pld = pld.self_compose(count) if count > 1 else pld
        total = pld if total is None else total.compose(pld)
    return float(total.get_epsilon_for_delta(delta))


def _check_pairs(pairs: PairCounts) -> tuple[tuple[Pair, int], ...]:
    """(pair, count) entries as a tuple (the caches' key), zero counts dropped."""
    out = []
    for item in pairs:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise TypeError(f"expected a (pair, count) tuple, got {item!r}")
        pair, count = item
        if not isinstance(pair, Mixture | RemoveForm | Labelled | NumericPair):
            raise TypeError(f"expected a Mixture, RemoveForm, Labelled or NumericPair pair, got {type(pair).__name__}")
        non_negative_int("a round count", count)
        if count:
            out.append((pair, count))
    return tuple(out)


def _check_vdi(vdi: float | None) -> float | None:
    if vdi is not None and not (float(vdi) > 0.0 and math.isfinite(float(vdi))):
        raise ConfigError(f"value_discretization_interval must be positive, got {vdi!r}")
    return None if vdi is None else float(vdi)


def pairs_epsilon(
    pairs: PairCounts, *, delta: float, value_discretization_interval: float | None = None
) -> float:
    """Epsilon at `delta` of the composition, in order, of arbitrary dominating pairs, each self-composed
    over its count (PLD, add and remove; dp-accounting's PLDAccountant composing the pairs' events).

    The grid is `value_discretization_interval`, or else the automatic one of the module docstring (from
    `pairs_rdp_epsilon` of the same pairs at the same delta): the very grid `epsilon_of` uses, so that the
    pairs of a ledger give the ledger's values bit for bit. No truncation charge: a caller whose bound holds
    on a good event only passes delta - delta_trunc (as `epsilon_of` does). Null pairs add nothing (0 if
    all are null); a blatant one makes epsilon infinite. Results are cached (`clear_caches` in
    uedp.privacy.calibration). What `epsilon_of` computes once it has the pairs; the crafted-update audit
    gives it the pairs of a broken sensitivity function (uedp.audit.mechanism)."""
    return _pld_epsilon(_check_pairs(pairs), check_delta(delta), _check_vdi(value_discretization_interval))


def pairs_rdp_epsilon(pairs: PairCounts, *, delta: float) -> float:
    """Epsilon at `delta` from RDP of the pairs' events (`rdp_event`: the Poisson-subsampled Gaussian of
    the largest shift with the probability of any shift), composed in order (dp-accounting's RdpAccountant).
    An upper bound of `pairs_epsilon` for `Mixture` pairs (the cross-check eps_rdp_bound); for a `Labelled`
    pair it is only the scale of the epsilon (the label is revealed), which is how the automatic PLD grid
    and calibration's starting point use it."""
    return _rdp_epsilon(_check_pairs(pairs), check_delta(delta))


def composed_kinds(per_run: Sequence[tuple[Sequence[Mapping[str, Pair]], int]]) -> list[dict[str, PairCounts]]:
    """`undetected_bound`'s candidates from runs of rounds: `per_run` holds each run's candidate pairs (one mapping
    per kind of sentence, bound name -> the round's dominating pair: uedp.privacy.pairs.candidate_pairs) and its
    number of rounds; each kind's bound composes its pairs over the runs, in order."""
    return [{b: tuple((pairs[k][b], c) for pairs, c in per_run) for b in bounds}
            for k, bounds in enumerate(per_run[0][0])]


def undetected_bound(
    candidates: Sequence[Mapping[str, PairCounts]], *, delta: float, value_discretization_interval: float | None = None
) -> tuple[float, str]:
    """The eps_undetected step (docs/proofs.md Theorem 2) for any candidate bounds: `candidates` has one
    mapping per kind of sentence an undetected entity can sit in, from each valid bound's name to its
    composed pairs. Returns (the max over the kinds of sentence of the min over that kind's bounds, the
    name of the bound that decided it).

    Any one valid bound per kind of sentence is valid, so the smallest is taken: the bounds are ranked on
    a grid RANKING_FACTOR times coarser than the fine one (cheap; the first in mapping order wins a tie) and
    only the winner is computed on the fine grid (`value_discretization_interval`, or the automatic grid of
    the smallest RDP estimate among the kind's bounds; a kind with one bound is not ranked). The max over kinds
    compares (epsilon, name). uedp.privacy.accounting.epsilon_and_bound is this step on a mechanism's
    candidate pairs (uedp.privacy.pairs.candidate_pairs: eps_undetected's bounds, or one kind with one bound,
    the mixture of "uedp" or "user"); the crafted-update audit gives it broken ones. No truncation charge:
    pass delta - delta_trunc."""
    d = check_delta(delta)
    vdi = _check_vdi(value_discretization_interval)
    if not candidates:
        raise ValueError("undetected_bound needs at least one kind of sentence")
    kinds = []
    for bounds in candidates:
        if not bounds:
            raise ValueError("every kind of sentence needs at least one candidate bound")
        kinds.append({str(name): _check_pairs(pairs) for name, pairs in bounds.items()})
    best = []
    for bounds in kinds:
        fine = vdi if vdi is not None else auto_discretization(min(_rdp_epsilon(x, d) for x in bounds.values()))
        if len(bounds) == 1:  # nothing to rank: pairs_epsilon's very computation
            (bound,) = bounds
        else:
            coarse = min(MAX_DISCRETIZATION, RANKING_FACTOR * fine)
            bound = min(bounds, key=lambda b: _pld_epsilon(bounds[b], d, coarse))
        best.append((_pld_epsilon(bounds[bound], d, fine), bound))
    return max(best)
