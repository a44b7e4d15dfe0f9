"""Crafted-update audit of the mechanism (under the proved accounting of docs/proofs.md): the server's real
round, clients the auditor controls.

The canary audit (uedp.audit.canaries) trains a language model and can only see gross failures. Here the
auditor crafts the clients' updates itself, along one fixed coordinate of a small template (a Dirac canary),
and runs the server's real round: Poisson cohort sampling and truncation (uedp.privacy.cohort.sample_cohort),
the round key, slots, keyed entity sampling and permitted slots (uedp.privacy.sampling), the re-check, the
sum, the noise from the real noise source and the division by the public Z (uedp.privacy.aggregation), with
sigma from the round's ledger record (uedp.privacy.ledger.RoundRecord). From many independent T-round runs
per world it turns a likelihood-ratio test into an epsilon lower bound (uedp.audit.bounds).

Worlds: model (i) of docs/proofs.md section 1. BOTH worlds have the same N + 1 public places (places 0..N-1
benign, place N the canary's place p'), hence the same cohort law: every place is drawn, truncated at m_max
and slotted in both. In world 0 place N is EMPTY (an invited owner who never connects: the strategy sends it
nothing, so it contributes zero; it is still drawn and can still take a kept place and a slot); in world 1
it holds u'. Z = denominator(q_u, N + 1) in both. The accountant is told N + 1 places (`num_users`).

Crafted clients (units of b = w_max * beta; `CraftedClients`). Every benign user holds the audited entity
e' (so that any permitted slot that is occupied holds a holder).
  - u' sends +b whenever it is in the cohort (world 1).
  - design "zero": a benign client sends 0, and +b in world 1 when it may use e' this round (e' sampled,
    its slot permitted: adjacency "uedp"), or, for adjacency "undetected", when it is the holder v (place 0,
    one sentence s') and s' is sampled (its S-coin, rate q_s).
  - design "full" (adjacencies user and uedp): the same with -b in place of 0, so the entity flip is 2b. The
    world-0 sum -b * (benign kept) is a constant only when every benign place is kept every round (q_u = 1
    and N + 1 <= m_max: setting entity_exact); elsewhere it moves with the cohort size.
  - design "flip" (adjacency "undetected", the 1-D counterexample to the four-point rule): the holder v sends -b
    whenever it is in the cohort in world 0; in world 1 +b when it is in the cohort AND s' is sampled, else -b; u' +b;
    every other client 0. World 0 is then a mixture too ({0, -b}).
The law of the noiseless sum in both worlds (`realizable_law`, `Law`) is computed exactly from the sampling
law on N + 1 places (binomial draw, uniform truncation, uniform slot injection, keyed sampling as
independent coins). `run_real` runs the real round (path A); `run_vectorized` (path B) draws the sums from
the same law and the noise from the same noise source, for the millions of trials a bound near the claim
needs (tests/test_mechanism_audit.py checks A against the law and against the strategy's calls).

The auditor's score is the per-round log-likelihood ratio of the world-1 mixture against the world-0
mixture (uedp.audit.bounds.log_likelihood_ratio), summed over rounds; the "true epsilon of the realizable
worst case" is the epsilon of that pair of 1-D mixtures composed over the rounds (`Law.true_epsilon`): the
project's PLD accountant (`pairs_epsilon`) where world 0 is a point, otherwise the numerical PLD of the two
mixtures (`pair_pld`).

What is realizable against what the accountant charges (uedp.privacy.sensitivity, docs/proofs.md Theorems 1
and 2; docs/audit.md, "The crafted-update audit of the mechanism"):
  - user term s_u = b with probability q_u: realized exactly by u' (up to the truncation, which on the
    accountant's good event never acts and is charged as delta_trunc).
  - entity term s_e = 2 k_cap b with probability q_e: a flip of 2b needs the world-0 base -b, i.e. design
    "full" with a constant world-0 sum (entity_exact: realized with probability q_e N / (N + 1), the
    permitted slot holding a benign place); with design "zero" the flip is b, with probability q_e K / m.
  - undetected term (s_s = 2b): the flip design realizes 2b with probability ~ q_u q_s (the holder must be in
    the cohort); world 0 is then not a point.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uedp.audit.bounds import LowerBound, epsilon_lower_bound, log_likelihood_ratio
from uedp.audit.law import Law
from uedp.audit.scenario import (
    CANARY_COORDINATE,
    ENTITY,
    HOLDER,
    AuditSetting,
    Scenario,
    SensitivityFn,
    UndetectedBound,
    template,
)
from uedp.flower.places import Assignment
from uedp.flower.plan import MechanismSettings, plan_round
from uedp.privacy.accounting import Mechanism, epsilon_and_bound, truncation_delta
from uedp.privacy.aggregation import aggregate, denominator
from uedp.privacy.calibration import calibrate_epsilon_function, calibrate_identical
from uedp.privacy.composition import composed_kinds, pairs_epsilon, undetected_bound
from uedp.privacy.ledger import RoundRecord
from uedp.privacy.mechanisms import audited_spec, get
from uedp.privacy.noise import NoiseSource
from uedp.privacy.pairs import UNDETECTED_FREE, UNDETECTED_WITH_ENTITIES, Pair, candidate_pairs
from uedp.privacy.sampling import (
    RoundKey,
    entity_sampled,
    extended_entity,
    extended_sampled,
    permitted_slots,
)
from uedp.privacy.sensitivity import Sensitivities, noise_std, sensitivities


# -- what the accountant charges ---------------------------------------------------------------------------------
def _in_units(sens: Sensitivities) -> Sensitivities:
    u = sens.unit
    return Sensitivities(s_u=sens.s_u / u, s_e=sens.s_e / u, s_s=sens.s_s / u, unit=1.0)


def accounted_epsilon(adjacency: str, sens: Sensitivities, *, sigma: float, q_u: float, q_e: float, q_s: float,
                      rounds: int, delta: float, delta_trunc: float = 0.0,
                      kinds: tuple[tuple[str, ...], ...] = (UNDETECTED_FREE, UNDETECTED_WITH_ENTITIES),
                      ) -> tuple[float, Pair | None, str]:
    """(epsilon, pair, bound) the accountant computes for these (possibly broken) sensitivities and noise std,
    `rounds` identical rounds, at delta - delta_trunc: the adjacency's candidate pairs in units of sens.unit
    (uedp.privacy.pairs.candidate_pairs, what Mechanism.candidates uses; `kinds`: eps_undetected's kinds of
    sentence, each a tuple of bound names) through uedp.privacy.composition.undetected_bound, the very step of
    epsilon_and_bound, grids and ranking included. `bound` is the adjacency for uedp and user, the bound that
    decided eps_undetected otherwise ("truncation" when delta_trunc >= delta, with no pair)."""
    d = delta - delta_trunc
    if d <= 0.0:
        return math.inf, None, "truncation"
    candidates = candidate_pairs(adjacency, _in_units(sens), sigma / sens.unit, q_u=q_u, q_e=q_e, q_s=q_s,
                                 kinds=kinds)
    eps_, bound = undetected_bound(composed_kinds([(candidates, rounds)]), delta=d)
    return eps_, _pair_of(candidates, bound), bound


def accountant_claim(mechanism: Mechanism, adjacency: str, *, rounds: int, delta: float,
                     num_users: int) -> tuple[float, Pair | None, str]:
    """(epsilon, pair, bound) the real accountant computes for `rounds` identical rounds of `mechanism`
    (uedp.privacy.accounting.epsilon_and_bound, delta_trunc charged), with the pair of the bound that decided
    it (None for "truncation")."""
    eps_, bound = epsilon_and_bound([(mechanism, rounds)], adjacency, delta=delta, num_users=num_users)
    return eps_, _pair_of(mechanism.candidates(adjacency), bound), bound


def _pair_of(candidates: tuple[dict[str, Pair], ...], bound: str) -> Pair | None:
    return next((kind[bound] for kind in candidates if bound in kind), None)


def calibrated_z(sc: Scenario, *, q_u: float | None = None) -> float:
    """z as the run calibrates it (uedp.privacy.calibration.calibrate_identical, as a run does) to
    the setting's target epsilon on its claims (user_dp: eps_user; uedp: eps_uedp and eps_undetected, or
    `target_on`), for N + 1 places; `q_u`: the rate the calibration is told. The same for every adjacency
    and design of a (setting, method): computed once."""
    return _calibrated(sc.setting, sc.method, sc.setting.q_u if q_u is None else float(q_u))


@functools.lru_cache(maxsize=64)
def _calibrated(s: AuditSetting, method: str, q_u: float) -> float:
    spec = audited_spec(method)
    q_e, q_s = spec.rates(s)  # type: ignore[arg-type]
    return calibrate_identical(
        s.target_epsilon, s.claims(method), q_u=q_u, q_e=q_e, q_s=q_s, m_max=spec.m_max(s),  # type: ignore[arg-type]
        k_cap=spec.k_cap(s), rounds=s.rounds, delta=s.delta, num_users=s.places,  # type: ignore[arg-type]
        rule=spec.rule,
    )


# -- the mechanism under audit: the real parts, one of them possibly broken ------------------------------------
@dataclass
class AuditedMechanism:
    """One audited mechanism: sigma (what the aggregation is asked for and the run reports), the public
    denominator (Z of docs/mechanism.md step 8), the noise
    source (real, or a broken control's), and what the accountant claims for the scenario's adjacency (the
    pair, its epsilon and the bound that decided it: `claimed_bound`). `control` names the one broken
    component (None: the sound mechanism)."""

    scenario: Scenario
    z: float
    sigma: float
    denominator: float
    noise: NoiseSource
    claimed: Pair | None
    claimed_epsilon: float
    claimed_bound: str = ""  # the bound that decided eps_undetected, else the adjacency (audit JSON: "claimed_rule")
    delta_trunc: float = 0.0
    control: str | None = None
    warning: str | None = None
    sens: Sensitivities | None = None  # the sensitivities sigma and the accountant used

    @property
    def actual_sigma(self) -> float:
        """The std the noise source really draws (ScaledNoise multiplies by its factor)."""
        return self.sigma * float(getattr(self.noise, "factor", 1.0))


def build_mechanism(sc: Scenario, *, z: float, noise: NoiseSource, sensitivity_fn: SensitivityFn = sensitivities,
                    accountant_record: Callable[[RoundRecord], RoundRecord] = lambda r: r,
                    undetected_bound: tuple[str, UndetectedBound] | None = None,
                    control: str | None = None, warning: str | None = None) -> AuditedMechanism:
    """The mechanism as the server and the ledger build it, with the given components. With the real
    sensitivity function the round's RoundRecord gives sigma, and the claim is the real accountant's
    (`accountant_claim`, N + 1 places, delta_trunc charged) on the record
    `accountant_record` returns (what the accountant is told). A broken sensitivity function gives sigma =
    noise_std(rule, z, its sensitivities) and the claim of the accountant fed the same sensitivities;
    `undetected_bound` = (name, pair function) replaces the accountant's bounds for eps_undetected."""
    s = sc.setting
    q_e, q_s = sc.rates
    public = denominator(sc.rule, q_u=s.q_u, num_users=s.places)
    record = RoundRecord(round=1, rule=sc.rule, q_u=s.q_u, q_e=q_e, q_s=q_s, m_max=sc.m_max, k_cap=sc.k_cap,
                         beta=s.beta, w_max=s.w_max, z=z, denominator=public)
    told = accountant_record(record)
    groups = [(told.mechanism, s.rounds)]
    delta_trunc = truncation_delta(groups, s.places)
    real = sensitivity_fn is sensitivities
    sens = sensitivity_fn(beta=s.beta, w_max=s.w_max, m_max=sc.m_max, k_cap=sc.k_cap, rule=sc.rule)
    sigma = record.sigma if real else noise_std(sc.rule, z, sens)
    claimed: Pair | None
    if sc.adjacency == "undetected" and undetected_bound is not None:
        bound, fn = undetected_bound
        claimed = fn(_in_units(sens), sigma / s.unit, q_u=told.q_u, q_e=told.q_e, q_s=told.q_s)
        d = s.delta - delta_trunc
        claimed_eps = pairs_epsilon(((claimed, s.rounds),), delta=d) if d > 0.0 else math.inf
    elif real:
        claimed_eps, claimed, bound = accountant_claim(told.mechanism, sc.adjacency, rounds=s.rounds, delta=s.delta,
                                                       num_users=s.places)
    else:
        claimed_eps, claimed, bound = accounted_epsilon(
            sc.adjacency, sens, sigma=sigma, q_u=told.q_u, q_e=told.q_e, q_s=told.q_s, rounds=s.rounds,
            delta=s.delta, delta_trunc=delta_trunc)
    return AuditedMechanism(scenario=sc, z=z, sigma=sigma, denominator=public, noise=noise, claimed=claimed,
                            claimed_epsilon=claimed_eps, claimed_bound=bound, delta_trunc=delta_trunc, control=control,
                            warning=warning, sens=sens)


def sound_epsilon_at(sc: Scenario, sigma: float, z: float | None = None) -> tuple[float, str, Pair | None]:
    """(epsilon, bound, pair) of the SOUND accountant (real sensitivities and rates, N + 1 places, delta_trunc
    charged) for the scenario's adjacency at noise std `sigma` (absolute): what a sound run drawing this
    noise would claim. `z`: the noise multiplier giving exactly this sigma, where known (the accountant's
    caches are keyed by it)."""
    s = sc.setting
    q_e, q_s = sc.rates
    per_z = _unit_mechanism(sc).sigma
    z = sigma / (s.unit * per_z) if z is None else z
    mech = Mechanism(rule=sc.rule, z=z, q_u=s.q_u, q_e=q_e, q_s=q_s, m_max=sc.m_max, k_cap=sc.k_cap)
    eps, pair, bound = accountant_claim(mech, sc.adjacency, rounds=s.rounds, delta=s.delta, num_users=s.places)
    return eps, bound, pair


def entity_free_undetected(sc: Scenario, sigma: float) -> tuple[float, str]:
    """(epsilon, bound) of the sound accountant's bound for an undetected entity in an ENTITY-FREE sentence
    (min over uedp.privacy.pairs.UNDETECTED_FREE, delta_trunc charged) at noise std `sigma`: the kind
    of sentence the crafted holder realizes (its S-coin). eps_undetected is the max of this and the bound
    for a sentence that also holds detected entities."""
    s = sc.setting
    eps, _, bound = accounted_epsilon(
        "undetected", sensitivities(beta=s.beta, w_max=s.w_max, m_max=sc.m_max, k_cap=sc.k_cap, rule=sc.rule),
        sigma=sigma, q_u=s.q_u, q_e=sc.rates[0], q_s=sc.rates[1], rounds=s.rounds, delta=s.delta,
        delta_trunc=truncation_delta([(_unit_mechanism(sc), s.rounds)], s.places), kinds=(UNDETECTED_FREE,))
    return eps, bound


def _unit_mechanism(sc: Scenario) -> Mechanism:
    s = sc.setting
    return Mechanism(rule=sc.rule, z=1.0, q_u=s.q_u, q_e=sc.rates[0], q_s=sc.rates[1], m_max=sc.m_max,
                     k_cap=sc.k_cap)


# -- path A: the real round with crafted clients ---------------------------------------------------------------
class _NoNoise:
    reproducible = True
    warning = None

    def normal(self, shape: tuple[int, ...], std: float) -> np.ndarray:
        return np.zeros(shape, dtype=np.float64)


@dataclass(frozen=True)
class CraftedClients:
    """The auditor's clients. `update` answers a training message from its instructions only (the round key
    and the slot), as a real client would; see the module docstring for the designs."""

    scenario: Scenario

    @property
    def canary(self) -> int:
        return self.scenario.setting.num_users  # u''s place N (empty in world 0)

    def value(self, place: int, slot: int, key: RoundKey | None, world: int) -> int:
        """The update's canary coordinate in units of b (world 0's empty place is never asked: 0)."""
        sc = self.scenario
        if place == self.canary:
            return 1 if world == 1 else 0
        q_e, q_s = sc.rates
        if sc.adjacency == "undetected" and place == HOLDER:
            used = world == 1 and extended_sampled(key, extended_entity(f"user{place}", 0), q_s)
            return 1 if used else (-1 if sc.design == "flip" else 0)
        if world == 1 and sc.adjacency == "uedp" and entity_sampled(key, ENTITY, q_e) \
                and slot in permitted_slots(key, ENTITY, sc.k_cap, sc.m_max):
            return 1
        return sc.base

    def update(self, place: int, slot: int, key: RoundKey | None, world: int) -> list[np.ndarray]:
        out = template()
        out[0].flat[CANARY_COORDINATE] = self.value(place, slot, key, world) * self.scenario.setting.unit
        return out


@dataclass
class RealRun:
    """Path A's output: per trial and round, the auditor's y (released canary coordinate times Z minus the
    law's offset) and the realized noiseless sum minus the offset (units of b), plus the re-check counts."""

    y: np.ndarray
    shift: np.ndarray
    statuses: dict[str, int] = field(default_factory=dict)


def mechanism_settings(mech: AuditedMechanism) -> MechanismSettings:
    """The audited mechanism as the strategy's round plan sees it (uedp.flower.plan): its spec, rates, caps,
    clips, z and denominator, drawn as a fixed-seed run draws (round keys and training seeds from the run's rng)."""
    sc, s = mech.scenario, mech.scenario.setting
    q_e, q_s = sc.rates
    return MechanismSettings(spec=get(sc.method), places=s.places, q_u=s.q_u, q_e=q_e, q_s=q_s, m_max=sc.m_max,
                             k_cap=sc.k_cap, m_max_sent=sc.m_max or 0, beta=s.beta, w_max=s.w_max, gamma=0.0,
                             z=mech.z, denominator=mech.denominator, noise="philox_fixed_seed", seeded=True)


def real_round(mech: AuditedMechanism, world: int, rng: random.Random, clients: CraftedClients | None = None,
               offset: int = 0) -> tuple[float, float, dict[str, int]]:
    """One round of the server's real path with the crafted clients, over the N + 1 places of both worlds:
    the round's plan is the strategy's own (uedp.flower.plan.plan_round: the same draws, in the same order on
    `rng`), the aggregation its own (uedp.privacy.aggregation.aggregate). In world 0 the canary's place is an
    owner who is not connected (an empty place: no message; its training seed is drawn and unused). Returns
    (y, sum minus `offset` in units of b, counts)."""
    sc = mech.scenario
    s = sc.setting
    clients = clients or CraftedClients(sc)
    settings = mechanism_settings(mech)
    connected = s.places if world == 1 else s.places - 1
    assignment = Assignment(tuple(range(connected)) + (None,) * (s.places - connected))
    plan = plan_round(1, settings=settings, record=settings.record(1), assignment=assignment, rng=rng)
    updates = [clients.update(a.place, a.instructions.slot, a.instructions.key, world) for a in plan]
    tmpl = template()
    total, _ = aggregate(updates, template=tmpl, w_max=s.w_max, beta=s.beta, sigma=0.0, denominator=1.0,
                         noise=_NoNoise())
    out, stats = aggregate(updates, template=tmpl, w_max=s.w_max, beta=s.beta, sigma=mech.sigma,
                           denominator=mech.denominator, noise=mech.noise)
    off = offset * s.unit
    y = float(out[0].flat[CANARY_COORDINATE]) * mech.denominator - off
    shift = (float(total[0].flat[CANARY_COORDINATE]) - off) / s.unit
    return y, shift, stats.as_dict()


def run_real(mech: AuditedMechanism, world: int, trials: int, rng: random.Random, offset: int = 0) -> RealRun:
    """`trials` independent T-round runs of the real path in `world` (sums minus `offset`, the law's)."""
    T = mech.scenario.setting.rounds
    y = np.empty((trials, T))
    shift = np.empty((trials, T))
    counts: dict[str, int] = {}
    for i in range(trials):
        for t in range(T):
            y[i, t], shift[i, t], stats = real_round(mech, world, rng, offset=offset)
            for k, v in stats.items():
                counts[k] = counts.get(k, 0) + v
    return RealRun(y=y, shift=np.rint(shift * 1e9) / 1e9, statuses=counts)


# -- path B: the same law, vectorized, with the same noise source ----------------------------------------------
def run_vectorized(mech: AuditedMechanism, law: Law, world: int, trials: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`trials` T-round runs: the per-round sum drawn from `law` (world 0 or 1), the noise from `mech.noise`
    with std `mech.sigma` (as aggregate asks for it), released = (sum + noise) / Z as aggregate computes it,
    and the auditor's y = released * Z - offset. Returns (y, sum - offset in units of b)."""
    s = mech.scenario.setting
    dist = law.world1 if world == 1 else law.world0
    values = np.array(sorted(dist), dtype=np.float64)
    probs = np.array([dist[int(v)] for v in values])
    shift = values[rng.choice(values.size, size=(trials, s.rounds), p=probs / probs.sum())]
    off = law.offset * s.unit
    released = (shift * s.unit + off + mech.noise.normal((trials, s.rounds), mech.sigma)) / mech.denominator
    return released * mech.denominator - off, shift


def score(mech: AuditedMechanism, law: Law, y: np.ndarray) -> np.ndarray:
    """The auditor's statistic per trial: the log-likelihood ratio of the world-1 mixture against the world-0
    mixture of the law, summed over rounds, with the sigma the run REPORTS (mech.sigma; the auditor is not
    told that a control draws less noise)."""
    u = mech.scenario.setting.unit
    return log_likelihood_ratio(y, sigma=mech.sigma, shifts=[v * u for v in law.shifts], probs=law.probs,
                                shifts0=[v * u for v in law.shifts0], probs0=law.probs0)


def audit(mech: AuditedMechanism, law: Law, *, trials: int, rng: np.random.Generator, confidence: float = 0.95,
          chunk: int = 50_000) -> tuple[LowerBound, dict[str, Any]]:
    """The vectorized game: `trials` runs per world (drawn in chunks), scored, and the epsilon lower bound."""
    scores: list[list[np.ndarray]] = [[], []]
    for world in (0, 1):
        for start in range(0, trials, chunk):
            y, _ = run_vectorized(mech, law, world, min(chunk, trials - start), rng)
            scores[world].append(score(mech, law, y))
    s0, s1 = np.concatenate(scores[0]), np.concatenate(scores[1])
    lb = epsilon_lower_bound(s0, s1, delta=mech.scenario.setting.delta, confidence=confidence)
    return lb, {"score0_mean": float(s0.mean()), "score1_mean": float(s1.mean()),
                "score0_std": float(s0.std()), "score1_std": float(s1.std())}


# -- the controls: the real mechanism with ONE broken component (uedp.audit.controls) -----------------------------
CONTROLS = ("noise_halved", "accountant_half_q_u", "entity_k_beta", "no_user_term", "undetected_double_count",
            "undetected_unproved_p")
# Not a broken component but a bound no lemma covers (eps_undetected as the four-point mixture with
# p = q_u q_s): audited like a control, not expected to be certified (docs/audit.md, "The crafted-update audit of the
# mechanism").
PROBES = ("undetected_unproved_p",)


def control_mechanism(sc: Scenario, control: str | None, noise: NoiseSource) -> AuditedMechanism:
    """The sound mechanism (control None) or one control, each calibrated as its run would be: z from the
    (possibly broken) accountant for the setting's target epsilon on the setting's claims, so that its
    claim is the target."""
    from uedp.audit import controls as c  # torch: imported only when a mechanism is built

    s = sc.setting
    if control is None:
        return build_mechanism(sc, z=calibrated_z(sc), noise=noise)
    if control == "noise_halved":
        scaled = c.ScaledNoise(noise, 0.5)
        return build_mechanism(sc, z=calibrated_z(sc), noise=scaled, control=control, warning=scaled.warning)
    if control == "accountant_half_q_u":
        return build_mechanism(sc, z=calibrated_z(sc, q_u=0.5 * s.q_u), noise=noise, control=control,
                               accountant_record=c.understated_sampling, warning=c.HALVED_RATE_WARNING)
    parts: dict[str, Any] = {
        "entity_k_beta": {"sensitivity_fn": c.sensitivities_entity_k_beta, "warning": c.ENTITY_TERM_WARNING},
        "no_user_term": {"sensitivity_fn": c.sensitivities_without_user_term, "warning": c.NO_USER_TERM_WARNING},
        "undetected_double_count": {"undetected_bound": ("four_point_qu2_qs", c.undetected_double_count),
                                    "warning": c.DOUBLE_COUNT_WARNING},
        "undetected_unproved_p": {"undetected_bound": ("four_point_qu_qs", c.undetected_four_point_qu_qs),
                                   "warning": c.UNPROVED_BOUND_WARNING},
    }[control]

    def claimed(z: float) -> float:  # the broken run calibrates its z with its broken accountant
        return max(build_mechanism(Scenario(s, sc.method, claim), z=z, noise=noise, **parts).claimed_epsilon
                   for claim in s.claims(sc.method))

    # the project's search for any epsilon function: eps(z*) <= target < eps(z* - 1e-3) on the broken claim
    z = calibrate_epsilon_function(claimed, s.target_epsilon, tol=1e-3)
    return build_mechanism(sc, z=z, noise=noise, control=control, **parts)
