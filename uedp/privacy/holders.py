"""The guarantee a run gives ONE user and ONE entity held by k other users (docs/proofs.md section 11).

The project's epsilons are per adjacency: eps_user for one user (user-level DP, DP-FedAvg), eps_uedp for one
user and one DETECTED entity whatever its number of holders (Theorem 1), eps_undetected for one user and an
undetected entity held by one other user (Theorem 2). What a user choosing a method needs is the epsilon
for "one user u' AND an entity e' that k other users hold" under each mechanism. With k = 0 it is eps_user.

  holders_epsilon(records, k, *, delta, num_users, detected=False) -> HoldersEpsilon
      the run's epsilon for that pair: the smallest of the valid bounds below that apply to its rounds
  count_pair(sigma, s_u, s_h, q_u, p, k, j_max) -> Labelled
      one round's revealed-count pair (Theorem 5): the number J of holders whose update may change is revealed
      (label j, probability Bin(k, p) conditioned on J <= j_max), then N(0) against {j s_h: 1-q_u, j s_h + s_u: q_u}
  group_epsilon(delta_of, steps, *, delta) -> float
      linear group privacy over `steps` neighbouring steps from one step's privacy profile delta_of(eps)

Per rule (uedp.privacy.sensitivity.RULES; s_u = b, s_h = s_s = 2b the change of one holder's update):
  user_dp      the revealed count with p = q_u (every sentence used), and group privacy over 2k + 1 steps of
               the user pair (changing a holder is two steps under "one place emptied": empty, refill), plus
               delta_trunc if the rounds truncate.
  uedp, uedp_naive, uedp_split
               detected entity: eps_uedp for every k (Theorem 1). Undetected entity: the revealed count of
               the DRAWN holders, p = q_u (a sentence that also holds detected entities may share them with
               other holders' sentences, so selections are not independent; p = q_u covers every kind and
               number of sentences), charged delta_trunc; and group privacy over k steps of
               eps_undetected's profile at q_e = q_s = 1 (a holder may hold the entity in many sentences).
  k = 1        also Theorem 2 at q_e = q_s = 1 ("one_holder").
  noiseless    infinite.
The reported epsilon is the minimum of the valid bounds (each holds for the same run) with the name of the
one that decided it. Every epsilon is dp-accounting's PLD composition (uedp.privacy.composition.pairs_epsilon).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from uedp.checks import integer, non_negative_int, positive_int
from uedp.errors import ConfigError
from uedp.privacy import accounting as acc
from uedp.privacy import composition
from uedp.privacy.accounting import Mechanism, Runs
from uedp.privacy.mechanisms import sampling_rates
from uedp.privacy.numeric import NumericPair
from uedp.privacy.pairs import UNDETECTED_FREE, UNDETECTED_WITH_ENTITIES, Labelled, Mixture, Pair, _pair_pld

TAIL_FRACTION = 0.01  # the charge for J > j_max: at most this fraction of delta
HOLDER_BOUNDS = ("one_holder", "revealed_count", "group", "undetected_group", "mixed", "detected")


def _check_k(k: int) -> int:
    return non_negative_int("the number of other holders k", k)


def count_pair(sigma: float, s_u: float, s_h: float, q_u: float, p: float, k: int, j_max: int) -> Pair:
    """One round's revealed-count pair (docs/proofs.md Theorem 5): label j in 0..j_max with probability
    Bin(k, p)(j) / P(Bin(k, p) <= j_max), then N(0) against {j s_h: 1 - q_u, j s_h + s_u: q_u}. j = 0 is the
    user pair; k = 0 is the user pair. The parts j >= 1 (no zero shift: dp-accounting's mixture code takes
    seconds each) are numerical PLDs (uedp.privacy.numeric.NumericPair, pessimistic)."""
    top = min(_check_k(k), j_max)
    weights = binom.pmf(np.arange(top + 1), k, p)
    weights = weights / weights.sum()
    parts = (Mixture(sigma=sigma, sensitivities=(0.0, s_u), probs=(1 - q_u, q_u)),  # dp-accounting's closed form
             *(NumericPair((0.0,), (1.0,), (j * s_h, j * s_h + s_u), (1 - q_u, q_u), sigma) for j in range(1, top + 1)))
    return Labelled(weights=tuple(float(w) for w in weights), parts=parts)


def tail_cut(k: int, p: float, rounds: int, budget: float) -> tuple[int, float]:
    """(j_max, charge): the smallest j_max whose probability that some round has more than j_max holders
    counted, 1 - (1 - P(Bin(k, p) > j_max))^rounds, is at most `budget`, and that probability (docs/proofs.md
    Theorem 5: the good event J_t <= j_max of every round, Lemma C)."""
    for j in range(k):
        tail = float(binom.sf(j, k, p))  # P(Bin(k, p) > j) in one round of this group
        if tail >= 1.0:
            continue
        charge = -math.expm1(rounds * math.log1p(-tail))
        if charge <= budget:
            return j, charge
    return k, 0.0  # nothing to cut (J <= k always)


def group_epsilon(delta_of: Callable[[np.ndarray], np.ndarray], steps: int, *, delta: float) -> float:
    """Linear group privacy (Dwork and Roth 2014, Lemma 2.2 generalised to (eps, delta)): a mechanism that is
    (e, delta_of(e))-DP for one step is (steps * e, delta_of(e) * sum_{i < steps} e^(i e))-DP over `steps`
    steps. Returns the smallest steps * e over a fine geometric grid of e whose delta is at most `delta`
    (every grid point is checked exactly, so the value is a valid bound; inf if none is)."""
    if steps <= 1:
        grid = np.geomspace(1e-4, 200.0, 4001)
        ok = np.asarray(delta_of(grid)) <= delta
        return float(grid[ok].min()) if ok.any() else math.inf
    grid = np.geomspace(1e-4, 200.0 / steps, 4001)
    with np.errstate(over="ignore"):
        factor = np.expm1(steps * grid) / np.expm1(grid)  # sum_{i < steps} e^(i e)
    ok = np.asarray(delta_of(grid)) * factor <= delta
    return float(steps * grid[ok].min()) if ok.any() else math.inf


def _profile(pairs: tuple[tuple[Pair, int], ...], vdi: float) -> Callable[[np.ndarray], np.ndarray]:
    """delta(eps) of the composition of `pairs` (PLD, both directions) on the grid `vdi`."""
    pld = None
    for pair, count in pairs:
        if pair.is_null:
            continue
        one = _pair_pld(pair, vdi)  # noqa: SLF001 - this module is part of uedp.privacy
        one = one.self_compose(count) if count > 1 else one
        pld = one if pld is None else pld.compose(one)
    if pld is None:
        return lambda eps: np.zeros_like(np.asarray(eps, dtype=float))
    return lambda eps: np.asarray(pld.get_delta_for_epsilon(np.asarray(eps, dtype=float)), dtype=float)


@dataclass(frozen=True)
class HoldersEpsilon:
    """The epsilon for one user and one entity held by k other users, the bound that decided it, and every
    bound computed ({name: epsilon}: HOLDER_BOUNDS)."""

    k: int
    epsilon: float
    bound: str
    bounds: dict[str, float]
    delta: float

    def undetected(self) -> HoldersEpsilon:
        """The same result for an undetected entity: the minimum over the bounds but "detected" (what
        `holders_epsilon(..., detected=False)` returns, without computing the other bounds again)."""
        if "mixed" in self.bounds:  # its bounds are for K' missed holders, not an entity missed everywhere
            raise ValueError("undetected() derives the undetected result from a DETECTED one (missed = 0), not "
                             "from a mixed-case result: call holders_epsilon(..., missed=k)")
        rest = {b: v for b, v in self.bounds.items() if b != "detected"}  # never empty: "detected" has company
        name = min(rest, key=lambda b: rest[b])
        return HoldersEpsilon(self.k, rest[name], name, rest, self.delta)


def _rule(groups: Runs) -> str:
    rules = {m.rule for m, _ in groups}
    if len(rules) != 1:
        raise ConfigError(f"holders_epsilon needs the rounds of one accounting rule, got {sorted(rules)}")
    return rules.pop()


def _count_bound(groups: Runs, k: int, left: float, vdi: float | None, *,
                 tail_base: float | None = None) -> float:
    """The revealed-count bound composed over the rounds at `left` (the delta left once the caller charged
    delta_trunc: Theorem 1's good event, or Theorem 6's), charged the tail cut (docs/proofs.md Theorem 5) of
    at most TAIL_FRACTION of `tail_base` (default `left`)."""
    rounds = sum(c for _, c in groups)
    budget = left if tail_base is None else tail_base
    pairs = []
    for m, count in groups:
        sens = m.sensitivities
        j_max, charge = tail_cut(k, m.q_u, count, TAIL_FRACTION * budget * count / rounds)  # p = q_u: drawn holders
        left -= charge
        pairs.append((count_pair(m.sigma, sens.s_u, sens.s_s, m.q_u, m.q_u, k, j_max), count))
    if left <= 0.0:
        return math.inf
    return composition.pairs_epsilon(pairs, delta=left, value_discretization_interval=vdi)


def _user_group(groups: Runs, steps: int, left: float, vdi: float | None) -> float:
    """Linear group privacy over `steps` user steps of the composed user pair, at `left` (no truncation
    charge: the caller's)."""
    user = tuple((m.mixture("user"), c) for m, c in groups)
    grid = vdi or composition.auto_discretization(composition.pairs_rdp_epsilon(user, delta=left))
    return group_epsilon(_profile(user, grid), steps, delta=left)


def user_group_epsilon(runs: Runs, steps: int, *, delta: float, num_users: int | None,
                       value_discretization_interval: float | None = None) -> float:
    """Group privacy over `steps` user steps ("one place emptied" or refilled) of `records`, at `delta`, with
    delta_trunc charged ONCE (docs/proofs.md Theorem 6: the good event "no round draws more than m_max of
    the N places" does not depend on the data or on the pair, and on it each step is dominated by the user
    pair PS_{q_u}(s_u), whatever the rule). The linear group bound (`group_epsilon`) of the composed user
    pair's profile at delta - delta_trunc; inf if delta_trunc >= delta."""
    delta = composition.check_delta(delta, num_users)
    positive_int("the number of user steps", steps)
    groups = acc._check_runs(runs)
    left = delta - acc.truncation_delta(groups, num_users)
    return _user_group(groups, steps, left, value_discretization_interval) if left > 0.0 else math.inf


def holders_epsilon(runs: Runs, k: int, *, delta: float = acc.DEFAULT_DELTA, num_users: int | None = None,
                    detected: bool = False, missed: int | None = None,
                    value_discretization_interval: float | None = None) -> HoldersEpsilon:
    """The epsilon of `records` (one accounting rule) for one user and one entity held by k other users, at
    `delta` (module docstring; docs/proofs.md sections 11 and 12). `missed`: how many of the k holders hold
    the entity in at least one sentence where the run's detector does not find it (0: detected in every
    mention, UeDP's eps_uedp then holds for every k; k: undetected; in between: the mixed case, Theorem 7);
    `detected=True` is `missed=0`, the default `missed=k`. For user_dp they are all the same (it samples no
    entity). The PLD grid is the automatic one of each bound (uedp.privacy.accounting) unless
    `value_discretization_interval` is given (a coarser grid is faster and still an upper bound)."""
    k = _check_k(k)
    missed = _check_missed(k, missed, detected)
    vdi = value_discretization_interval
    delta = composition.check_delta(delta, num_users)
    groups = acc._check_runs(runs)
    if not groups:
        raise ConfigError("holders_epsilon needs at least one round")
    rule = _rule(groups)
    if rule == "noiseless":
        return HoldersEpsilon(k, math.inf, "noiseless", {}, delta)
    if k == 0:
        eps = acc.epsilon_of(groups, "user", delta=delta, num_users=num_users, value_discretization_interval=vdi)
        return HoldersEpsilon(0, eps, "user", {"user": eps}, delta)
    bounds: dict[str, float] = {}
    if k == 1:  # Theorem 2 for one other holder, with the entity in ANY number of its sentences
        bounds["one_holder"] = acc.epsilon_of(_any_sentences(groups), "undetected", delta=delta, num_users=num_users,
                                              value_discretization_interval=vdi)
    trunc = acc.truncation_delta(groups, num_users)
    left = delta - trunc
    if rule != "user_dp" and missed == 0:
        bounds["detected"] = acc.epsilon_of(groups, "uedp", delta=delta, num_users=num_users,
                                            value_discretization_interval=vdi)
    elif rule != "user_dp" and missed < k:
        bounds["mixed"] = _mixed(groups, missed, left, vdi)
    bounds["revealed_count"] = _count_bound(groups, k, left, vdi, tail_base=delta) if left > 0 else math.inf
    bounds["group"] = _user_group(groups, 2 * k + 1, left, vdi) if left > 0 else math.inf
    if rule != "user_dp":
        bounds["undetected_group"] = _undetected_group(groups, k, delta, num_users, vdi)
    name = min(bounds, key=lambda b: bounds[b])
    return HoldersEpsilon(k, bounds[name], name, bounds, delta)


def _check_missed(k: int, missed: int | None, detected: bool) -> int:
    if missed is None:
        return 0 if detected else k
    missed = integer("the number of holders with a missed mention", missed, minimum=0, maximum=k,
                     note=f"(k = {k})")
    if detected and missed:
        raise ConfigError(f"detected=True means no holder has a missed mention, got missed = {missed}")
    return missed


MIXED_SPLITS = (0.5, 0.9, 0.99)  # the share of the delta left that the first hop of the mixed chain gets


def _mixed(groups: Runs, missed: int, left: float, vdi: float | None) -> float:
    """The mixed case (docs/proofs.md Theorem 7): on Theorem 6's good event, the chain D' -> D_1 -> D (or
    D -> D_2 -> D') of an eps_uedp hop (u' and the sentences where the entity is detected: Theorem 1's pair)
    and a hop of the `missed` holders' other sentences (the revealed count or 2 * missed user steps), joined
    by the weak triangle inequality (e1 + e2, d1 + e^e1 d2) with either hop first; the smallest over
    MIXED_SPLITS of `left` (the delta left once delta_trunc is charged, once)."""
    if left <= 0.0:
        return math.inf
    entity = tuple((m.mixture("uedp"), c) for m, c in groups)

    def detected_at(d: float) -> float:
        return composition.pairs_epsilon(entity, delta=d, value_discretization_interval=vdi)

    def missed_at(d: float) -> float:
        return min(_count_bound(groups, missed, d, vdi), _user_group(groups, 2 * missed, d, vdi))

    best = math.inf
    for first, second in ((detected_at, missed_at), (missed_at, detected_at)):
        for share in MIXED_SPLITS:
            e1 = first(share * left)
            if not math.isfinite(e1) or e1 > 700.0:
                continue
            d2 = (1.0 - share) * left * math.exp(-e1)
            if d2 <= 0.0:
                continue
            best = min(best, e1 + second(d2))
    return best


def _any_sentences(groups: Runs) -> tuple[tuple[Mechanism, int], ...]:
    """The rounds with q_e = q_s = 1 (the rule's rates at 1: uedp_naive keeps q_s = 0): Theorem 2's pairs are
    per SENTENCE at q_s < 1 (section 6: m sentences need 1 - (1 - q_s)^m), while the neighbour here removes
    every sentence of a holder that holds the entity; at rates 1 the pair (LPS at eta = q_u) holds for any
    number of them (the adversarial read of Theorem 5, docs/proofs.md section 8)."""
    out = []
    for m, count in groups:
        q_e, q_s = sampling_rates(m.rule, q_e=1.0, q_s=1.0)
        out.append((dataclasses.replace(m, q_e=q_e, q_s=q_s), count))
    return tuple(out)


def _undetected_group(groups: Runs, k: int, delta: float, num_users: int | None, vdi: float | None) -> float:
    """Group privacy over the k holders (k steps: u' with the first holder, then one holder at a time), each
    step (e, delta_step(e))-DP with delta_step the max over the two kinds of sentence of the min over that
    kind's bounds of Theorem 2 (UNDETECTED_FREE, UNDETECTED_WITH_ENTITIES) at q_e = q_s = 1 (`_any_sentences`),
    plus delta_trunc."""
    trunc = acc.truncation_delta(groups, num_users)
    groups = _any_sentences(groups)
    if trunc >= delta:
        return math.inf
    kinds = []
    for names in (UNDETECTED_FREE, UNDETECTED_WITH_ENTITIES):
        profiles = []
        for b in names:
            pairs = tuple((m.undetected(b), c) for m, c in groups)
            grid = vdi or composition.auto_discretization(composition.pairs_rdp_epsilon(pairs, delta=delta))
            profiles.append(_profile(pairs, grid))
        kinds.append(profiles)

    def delta_of(eps: np.ndarray) -> np.ndarray:
        per_kind = [np.min([f(eps) for f in profiles], axis=0) for profiles in kinds]
        return np.max(per_kind, axis=0) + trunc

    return group_epsilon(delta_of, k, delta=delta)
