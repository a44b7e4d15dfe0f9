"""The exact law of the crafted-update audit's noiseless sum in both worlds (uedp.audit.mechanism): computed from
the sampling law on N + 1 places (binomial draw, uniform truncation, uniform slot injection, keyed sampling as
independent coins), and the true epsilon of that pair of 1-D Gaussian mixtures composed over the rounds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import binom, hypergeom

from uedp.audit.scenario import Scenario
from uedp.privacy.composition import pairs_epsilon
from uedp.privacy.numeric import NumericPair
from uedp.privacy.pairs import Mixture


# -- --------------------------------------------------------------
@dataclass(frozen=True)
class Law:
    """Per-round distribution of the noiseless sum in both worlds (units of b, minus `offset`, the world-0
    sum's most likely value): every value with its probability. `max_difference`: the largest |world-1 sum -
    world-0 sum| over the realizations of the shared randomness (cohort, slots, coins) with positive
    probability: what one realization moves, against the accountant's largest shift."""

    world0: dict[int, float]
    world1: dict[int, float]
    offset: int
    max_difference: int

    @staticmethod
    def _sorted(dist: dict[int, float]) -> tuple[tuple[float, ...], tuple[float, ...]]:
        keys = sorted(dist)
        total = sum(dist.values())
        return tuple(float(k) for k in keys), tuple(dist[k] / total for k in keys)

    @property
    def shifts(self) -> tuple[float, ...]:
        return self._sorted(self.world1)[0]

    @property
    def probs(self) -> tuple[float, ...]:
        return self._sorted(self.world1)[1]

    @property
    def shifts0(self) -> tuple[float, ...]:
        return self._sorted(self.world0)[0]

    @property
    def probs0(self) -> tuple[float, ...]:
        return self._sorted(self.world0)[1]

    @property
    def point0(self) -> bool:
        """World 0 is one point (the old audit's case)."""
        return len(self.world0) == 1

    def mixture(self, sigma_units: float) -> Mixture | None:
        """The pair as a `Mixture` (N(0) against the world-1 mixture, relative to world 0's point, reflected
        if every shift is <= 0), or None when world 0 is not a point or world 1 lies on both sides of it."""
        if not self.point0:
            return None
        (c,) = self.world0
        d = [v - c for v in self.shifts]
        if min(d) < 0 < max(d):
            return None
        return Mixture(sigma=sigma_units, sensitivities=tuple(abs(x) for x in d), probs=self.probs)

    def true_epsilon(self, sigma_units: float, rounds: int, delta: float) -> float:
        """Epsilon at `delta` of the pair (world-0 mixture, world-1 mixture) with noise std `sigma_units`,
        composed over `rounds` rounds (both directions): pairs_epsilon where world 0 is a point, otherwise
        the numerical PLD of the two mixtures (`pair_epsilon`)."""
        mix = self.mixture(sigma_units)
        if mix is not None:
            return pairs_epsilon([(mix, rounds)], delta=delta)
        return pair_epsilon(self.shifts0, self.probs0, self.shifts, self.probs, sigma_units, rounds, delta)


def _add(out: dict[int, float], values: np.ndarray, probs: np.ndarray) -> None:
    for v, p in zip(np.broadcast_to(values, probs.shape).tolist(), probs.tolist()):
        if p > 0.0:
            out[int(v)] = out.get(int(v), 0.0) + float(p)


def _kept_specials(drawn: tuple[int, ...], j: int) -> list[tuple[tuple[int, ...], float]]:
    """Which of the drawn special places (0/1 flags) are kept when j of them are (uniformly, by symmetry of
    the uniform truncation): [(kept flags, probability)]."""
    idx = [i for i, d in enumerate(drawn) if d]
    if j == len(idx):
        return [(drawn, 1.0)]
    if j == 0:
        return [(tuple(0 for _ in drawn), 1.0)]
    out = []  # two drawn, one kept
    for keep in idx:
        out.append((tuple(1 if i == keep else 0 for i in range(len(drawn))), 1.0 / len(idx)))
    return out


def distinct_slots(k_cap: int, m: int) -> np.ndarray:
    """P(J = j), j = 0..k_cap: the number of distinct values among k_cap independent uniform slots of m (the
    permitted slots h(k, "P", e', j) mod m, j < k_cap, under the random-function model; the bias of a 64-bit
    value mod m is below m / 2^64)."""
    p = np.zeros(k_cap + 1)
    p[0] = 1.0
    for _ in range(k_cap):
        nxt = np.zeros_like(p)
        j = np.arange(k_cap + 1)
        nxt += p * j / m  # the draw repeats a slot already permitted
        nxt[1:] += p[:-1] * (m - j[:-1]) / m  # a new slot
        p = nxt
    return p


def _flips(k_o: np.ndarray, m: int, k_cap: int) -> list[tuple[int, np.ndarray]]:
    """[(f, P(F = f) per entry of k_o)]: F = the number of e''s permitted slots that hold a kept benign place,
    given k_o of them kept. The slot injection is uniform and independent of the key, so given J distinct
    permitted slots F ~ Hypergeometric(m slots, k_o benign-held, J drawn)."""
    pj = distinct_slots(k_cap, m)
    out = []
    for f in range(k_cap + 1):
        prob = np.zeros(k_o.shape)
        for j in range(max(f, 1), k_cap + 1):
            if pj[j] > 0.0:
                prob += pj[j] * np.nan_to_num(hypergeom.pmf(f, m, k_o, j))
        if f == 0:
            prob += pj[0]
        out.append((f, prob))
    return out


def realizable_law(sc: Scenario) -> Law:
    """The exact per-round law of the noiseless sum of `sc` in both worlds (see the module docstring).

    N + 1 places in both worlds. The special places (the canary's place N; for adjacency "undetected" also
    the holder, place 0) have their own Poisson coins; the n_o other places give D_o ~ Bin(n_o, q_u). With
    D = D_o + (specials drawn) > m, a uniform m of the D are kept: the number j of kept specials is
    hypergeometric and which ones are kept is uniform; K_o = min(D, m) - j others are kept. The J distinct
    permitted slots of e' are a uniform J-subset independent of the (uniform) slot injection, so the number
    of them holding a kept other is hypergeometric (`_flips`; with k_cap = 1: probability K_o / m). World 0:
    the canary's place contributes 0 (empty), world 1: +1 if kept; the coins of e' (q_e) and of s' (q_s)
    exist in world 1 only."""
    s = sc.setting
    q = s.q_u
    m = sc.m_max if sc.m_max is not None else s.places  # user_dp: never truncated
    q_e, q_s = sc.rates
    holder_special = sc.adjacency == "undetected"
    n_o = s.places - 1 - int(holder_special)
    d_o = np.arange(n_o + 1)
    pmf_o = binom.pmf(d_o, n_o, q)
    base = sc.base
    world0: dict[int, float] = {}
    world1: dict[int, float] = {}
    max_diff = 0
    patterns = [(c,) for c in (0, 1)] if not holder_special else [(c, h) for c in (0, 1) for h in (0, 1)]
    for drawn in patterns:  # (canary drawn, holder drawn)
        p_spec = math.prod(q if d else 1.0 - q for d in drawn)
        n_spec = sum(drawn)
        total = d_o + n_spec
        for j in range(n_spec + 1):
            if n_spec == 0:
                p_j = np.ones(d_o.shape)
            else:
                p_j = np.nan_to_num(hypergeom.pmf(j, total, n_spec, np.minimum(m, total)))
            k_o = np.minimum(total, m) - j
            for kept, p_which in _kept_specials(drawn, j):
                weight = pmf_o * p_spec * p_j * p_which
                if not weight.any():
                    continue
                c_kept = kept[0]
                h_kept = kept[1] if holder_special else 0
                v0 = base * k_o + (-h_kept if sc.design == "flip" else 0)
                # world-1 events: (value array, probability array)
                if sc.adjacency == "uedp":  # F benign flips when e' is sampled: hypergeometric over the slots
                    events = [(base * k_o + c_kept, np.full(d_o.shape, 1.0 - q_e))]
                    for f, p_f in _flips(k_o, m, sc.k_cap or 1):
                        events.append((base * k_o + c_kept + (1 - base) * f, q_e * p_f))
                elif sc.adjacency == "undetected":
                    used = c_kept + h_kept
                    unused = c_kept + (-h_kept if sc.design == "flip" else 0)
                    events = [(np.full(d_o.shape, used), np.full(d_o.shape, q_s)),
                              (np.full(d_o.shape, unused), np.full(d_o.shape, 1.0 - q_s))]
                else:
                    events = [(base * k_o + c_kept, np.ones(d_o.shape))]
                _add(world0, v0, weight)
                for v1, p_ev in events:
                    prob = weight * p_ev
                    _add(world1, v1, prob)
                    live = prob > 0.0
                    if live.any():
                        max_diff = max(max_diff, int(np.max(np.abs(np.broadcast_to(v1 - v0, prob.shape)[live]))))
    offset = max(world0, key=world0.get)  # type: ignore[arg-type]
    return Law(world0={v - offset: p for v, p in sorted(world0.items())},
               world1={v - offset: p for v, p in sorted(world1.items())}, offset=int(offset),
               max_difference=max_diff)


# -- the true epsilon of a pair of 1-D Gaussian mixtures: a numerical PLD (uedp.privacy.numeric.pair_pld) --------
def pair_epsilon(p_means: Any, p_weights: Any, q_means: Any, q_weights: Any, sigma: float, rounds: int,
                 delta: float, *, vdi: float = 5e-5) -> float:
    """Epsilon at `delta` of `rounds` independent rounds of the pair (uedp.privacy.numeric.NumericPair, composed
    by uedp.privacy.composition.pairs_epsilon on the grid `vdi`)."""
    pair = NumericPair.of(p_means, p_weights, q_means, q_weights, sigma)
    return pairs_epsilon([(pair, rounds)], delta=delta, value_discretization_interval=vdi)
