"""Crafted-update audit of the mechanism (issue 16): the server's real round, clients the auditor controls.

The canary audit (uedp.audit.canaries) trains a language model and can only see gross failures. Here the
auditor crafts the clients' updates itself, along one fixed coordinate of a small template (a Dirac canary),
and runs the server's real round: Poisson cohort sampling and truncation (uedp.privacy.cohort.sample_cohort),
the round key, slots, keyed entity sampling and permitted slots (uedp.privacy.sampling), the re-check, the
sum, the noise from the real noise source and the division by the public Z (uedp.privacy.aggregation), with
sigma from the round's ledger record (uedp.privacy.ledger.RoundRecord). From many independent T-round runs
per world it turns a likelihood-ratio test into an epsilon lower bound (uedp.audit.bounds).

Worlds and crafted clients (units of b = w_max * beta; `Scenario`). World 0 has N users (places 0..N-1);
world 1 adds the canary user u' (place N) and, for the entity adjacencies, the entity. The population N is
public and Z = denominator(q_u, N) is the same in both worlds (the contract's public constant). Every benign
user is a holder of the audited entity e' (so that any permitted slot that is occupied holds one).
  - u' sends +b whenever it is in the cohort.
  - design "zero": a benign client sends 0, and +b in world 1 when it may use e' this round (e' sampled,
    its slot permitted: adjacency "uedp") or when it holds the undetected entity s' and s' is sampled
    ("undetected": one holder, place 0, one sentence).
  - design "full": the same, but a benign client sends -b where the zero design sends 0 (its other data),
    so the flip is 2b. Only with a FULL cohort (drawn >= m_max every round) is the world-0 sum a constant
    (-m_max b); elsewhere it would move with the cohort size and swamp the test, so "full" is only used
    where a non-full round has negligible probability (`Law.nonfull`).
The realized shift (world-1 noiseless sum minus the world-0 constant) takes the values of `realizable_law`,
computed exactly from the sampling law (binomial draw, uniform truncation, uniform slot injection, keyed
sampling as independent coins). `run_real` runs the real round (path A); `run_vectorized` (path B) draws the
shifts from the same law and the noise from the same noise source, for the tens of thousands of trials a
bound near the claim needs (tests/test_mechanism_audit.py checks A against the law).

What is realizable against what the accountant charges (uedp.privacy.sensitivity; see docs/audit.md,
Finding 9):
  - user_dp: the canary's own update, b with probability q_u: exactly the accountant's mixture.
  - UeDP, the user term s_u = 3b (own b + a displaced user 2b): without truncation, (uniform injection of
    the n users into m slots, u' uniform among the empty slots) has the law of (u' uniform, the others a
    uniform injection avoiding it), so adding u' moves nobody: the shift is b. With truncation u' replaces
    a uniformly random kept user (probability m / (drawn + 1) of being kept): at most 2b (design "full").
  - UeDP, the entity term s_e = 2 k_cap b: a flip of 2b needs the world-0 base -b, i.e. a full cohort;
    with a non-full cohort the flip is b, and only when the permitted slot is occupied (P = K / m).
  - undetected (s_s = 2b with probability q_s): the holder is a benign user, in the cohort with
    probability about q_u: the accountant's "s_s with probability q_s" is realized with q_u q_s.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import binom

from uedp.audit.bounds import LowerBound, epsilon_lower_bound, log_likelihood_ratio
from uedp.config import FederationConfig, PrivacyConfig
from uedp.privacy.accounting import Mechanism, Mixture, adjacency_mixture, check_delta, mixture_epsilon
from uedp.privacy.aggregation import aggregate, denominator
from uedp.privacy.calibration import calibrate_noise_multiplier
from uedp.privacy.cohort import sample_cohort
from uedp.privacy.ledger import RoundRecord
from uedp.privacy.mechanisms import sampling_rates
from uedp.privacy.noise import NoiseSource
from uedp.privacy.sampling import (
    RoundKey,
    entity_sampled,
    extended_entity,
    extended_sampled,
    permitted_slots,
)
from uedp.privacy.sensitivity import Sensitivities, noise_std, sensitivities

ENTITY = "PERSON:audit canary entity"  # e', the audited entity
HOLDER = 0  # the place of the one user holding the undetected entity s' (adjacency "undetected")
CANARY_COORDINATE = 0  # the Dirac canary: updates move this coordinate of the first array only
METHODS = ("user_dp", "uedp")
ADJACENCIES = ("user", "uedp", "undetected")
DESIGNS = ("zero", "full")
SensitivityFn = Callable[..., Sensitivities]


def template() -> list[np.ndarray]:
    """The small model the audit aggregates: two float64 arrays (the canary is coordinate 0 of the first)."""
    return [np.zeros((2, 3), dtype=np.float64), np.zeros(4, dtype=np.float64)]


@dataclass(frozen=True)
class AuditSetting:
    """Public parameters of the audited runs (the main job's defaults: uedp.config.PrivacyConfig)."""

    name: str = "main"
    num_users: int = 200
    q_u: float = PrivacyConfig.q_u
    q_e: float = PrivacyConfig.q_e
    q_s: float = PrivacyConfig.q_s
    m_max: int = PrivacyConfig.m_max
    k_cap: int = PrivacyConfig.k_cap
    beta: float = PrivacyConfig.beta
    w_max: float = PrivacyConfig.w_max
    rounds: int = FederationConfig.rounds
    delta: float = PrivacyConfig.delta
    target_epsilon: float = PrivacyConfig.target_epsilon

    def __post_init__(self) -> None:
        check_delta(self.delta, self.num_users)
        if self.k_cap != 1:
            raise ValueError("the audit's exact law is written for k_cap = 1")
        if self.num_users < 2 or self.m_max < 1 or self.rounds < 1:
            raise ValueError("need num_users >= 2, m_max >= 1, rounds >= 1")

    @property
    def unit(self) -> float:
        return self.w_max * self.beta


@dataclass(frozen=True)
class Scenario:
    """What is audited: the mechanism (user_dp or uedp) at a setting, the adjacency (which epsilon), and the
    crafted clients' design."""

    setting: AuditSetting
    method: str
    adjacency: str
    design: str = "zero"

    def __post_init__(self) -> None:
        if self.method not in METHODS or self.adjacency not in ADJACENCIES or self.design not in DESIGNS:
            raise ValueError(f"bad scenario {self.method}/{self.adjacency}/{self.design}")
        if self.method == "user_dp" and (self.adjacency != "user" or self.design != "zero"):
            raise ValueError("user_dp is audited for user adjacency (eps_user), zero design")

    @property
    def m_max(self) -> int | None:
        return self.setting.m_max if self.method == "uedp" else None  # user_dp: no truncation

    @property
    def k_cap(self) -> int | None:
        return self.setting.k_cap if self.method == "uedp" else None

    @property
    def keyed(self) -> bool:
        return self.method == "uedp"

    @property
    def rates(self) -> tuple[float, float]:
        return sampling_rates(self.method, q_e=self.setting.q_e, q_s=self.setting.q_s)

    @property
    def base(self) -> int:
        """A benign client's update when it does not flip, in units of b."""
        return -1 if self.design == "full" else 0

    @property
    def offset(self) -> int:
        """The world-0 noiseless sum in units of b (with a full cohort for the full design)."""
        return self.base * (self.m_max or 0)

    @property
    def label(self) -> str:
        return f"{self.setting.name}/{self.method}/{self.adjacency}"


# -- the law of the realized shift -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Law:
    """Distribution of the realized shift (noiseless sum minus the world-0 constant, units of b) per round.
    `world1` / `world0`: every value with its probability; `shifts` / `probs`: world 1 conditioned on a
    full world-0 cohort (design "full"; unconditioned otherwise), the mixture the auditor scores with and
    whose epsilon is the realizable worst case; `nonfull`: P(world-0 cohort not full) (design "full")."""

    world1: dict[int, float]
    world0: dict[int, float]
    shifts: tuple[float, ...]
    probs: tuple[float, ...]
    nonfull: float

    def mixture(self, sigma_units: float) -> Mixture:
        return Mixture(sigma=sigma_units, sensitivities=self.shifts, probs=self.probs)


def _add(out: dict[int, float], values: np.ndarray, probs: np.ndarray) -> None:
    for v, p in zip(values.tolist(), probs.tolist()):
        if p > 0.0:
            out[int(v)] = out.get(int(v), 0.0) + float(p)


def realizable_law(sc: Scenario) -> Law:
    """The exact per-round law of the realized shift of `sc` (see the module docstring).

    D0 ~ Binomial(N, q_u) benign users drawn, u ~ Bernoulli(q_u) the canary (world 1), D1 = D0 + u; with
    D1 > m the kept m are uniform, so u' is kept with probability m / D1; K1b benign users are kept. With
    k_cap = 1 the permitted slot is uniform and the injection uniform, so it holds a benign user with
    probability K1b / m; the holder of s' is kept with probability K1b / N; e' (s') is sampled with q_e (q_s)."""
    s = sc.setting
    n, q = s.num_users, s.q_u
    m = sc.m_max if sc.m_max is not None else n + 1  # user_dp: never truncated
    d0 = np.arange(n + 1)
    pmf = binom.pmf(d0, n, q)
    full = d0 >= m if sc.design == "full" else np.ones_like(d0, dtype=bool)
    base, flip = sc.base, 1 - sc.base
    world0: dict[int, float] = {}
    _add(world0, sc.base * np.minimum(d0, m) - sc.offset, pmf)
    world1: dict[int, float] = {}
    cond: dict[int, float] = {}
    for u, pu in ((0, 1.0 - q), (1, q)):
        d1 = d0 + u
        p_kept = np.minimum(1.0, m / np.maximum(d1, 1)) if u else np.zeros(d0.shape)
        for kept, pk in ((1, p_kept), (0, 1.0 - p_kept)):
            k1b = np.minimum(d1, m) - kept
            value = base * k1b + kept - sc.offset
            if sc.adjacency == "uedp":
                p_event = sc.rates[0] * k1b / m
            elif sc.adjacency == "undetected":
                p_event = sc.rates[1] * k1b / n
            else:
                p_event = np.zeros(d0.shape)
            for hit, ph in ((1, p_event), (0, 1.0 - p_event)):
                prob = pmf * pu * pk * ph
                _add(world1, value + flip * hit, prob)
                _add(cond, (value + flip * hit)[full], prob[full])
    total = sum(cond.values())
    shifts = tuple(float(v) for v in sorted(cond))
    probs = tuple(cond[v] / total for v in sorted(cond))
    if shifts and shifts[0] < 0:
        raise ValueError(f"{sc.label}: negative shift in the conditioned law ({shifts})")
    return Law(world1=world1, world0=world0, shifts=shifts, probs=probs, nonfull=float(pmf[~full].sum()))


# -- what the accountant charges ---------------------------------------------------------------------------------
def accounted_mixture(adjacency: str, sens: Sensitivities, *, sigma: float, q_u: float, q_e: float,
                      q_s: float) -> Mixture:
    """The accountant's per-round mixture for these sensitivities (contract 4), in units of sens.unit:
    uedp.privacy.accounting.adjacency_mixture (what Mechanism.mixture uses) for any, possibly broken,
    sensitivities."""
    u = sens.unit
    scaled = Sensitivities(s_u=sens.s_u / u, s_e=sens.s_e / u, s_s=sens.s_s / u, unit=1.0)
    return adjacency_mixture(adjacency, scaled, sigma / u, q_u=q_u, q_e=q_e, q_s=q_s)


def calibrate_to(eps_of_z: Callable[[float], float], target: float, *, lo: float = 0.05, hi: float = 200.0,
                 rel_tol: float = 1e-3) -> float:
    """The smallest z (to rel_tol, on a log scale) with eps_of_z(z) <= target: a broken accountant's
    calibration (the project's calibrate_noise_multiplier cannot be given other sensitivities)."""
    if eps_of_z(hi) > target:
        raise ValueError(f"target {target} not reachable below z = {hi}")
    while hi / lo > 1.0 + rel_tol:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if eps_of_z(mid) <= target else (mid, hi)
    return hi


def calibrate(sc: Scenario, *, q_u: float | None = None) -> float:
    """z as the run calibrates it (uedp.privacy.calibration) to the setting's target epsilon under the
    mechanism's claim (eps_user for user_dp, eps_uedp for uedp); `q_u`: the rate the calibration is told."""
    s = sc.setting
    q_e, q_s = sc.rates
    return calibrate_noise_multiplier(
        s.target_epsilon, q_u=s.q_u if q_u is None else q_u, q_e=q_e, q_s=q_s, m_max=sc.m_max, k_cap=sc.k_cap,
        rounds=s.rounds, delta=s.delta, num_users=s.num_users, method=sc.method,
        adjacency="user" if sc.method == "user_dp" else "uedp",
    )


# -- the mechanism under audit: the real parts, one of them possibly broken ------------------------------------
@dataclass
class AuditedMechanism:
    """One audited mechanism: sigma (what the aggregation is asked for and the run reports), Z, the noise
    source (real, or a broken control's), and what the accountant claims. `control` names the one broken
    component (None: the sound mechanism)."""

    scenario: Scenario
    z: float
    sigma: float
    Z: float
    noise: NoiseSource
    claimed: Mixture
    claimed_epsilon: float
    control: str | None = None
    warning: str | None = None
    sens: Sensitivities | None = None  # the sensitivities sigma and the accountant used

    @property
    def actual_sigma(self) -> float:
        """The std the noise source really draws (ScaledNoise multiplies by its factor)."""
        return self.sigma * float(getattr(self.noise, "factor", 1.0))


def build_mechanism(sc: Scenario, *, z: float, noise: NoiseSource, sensitivity_fn: SensitivityFn = sensitivities,
                    accountant_record: Callable[[RoundRecord], RoundRecord] = lambda r: r,
                    control: str | None = None, warning: str | None = None) -> AuditedMechanism:
    """The mechanism as the server and the ledger build it, with the given components: the round's
    RoundRecord gives sigma and the claim (the real ledger path) when `sensitivity_fn` is the real one;
    a broken sensitivity function gives sigma = noise_std(method, z, its sensitivities) and the claim of
    the accountant fed the same sensitivities; `accountant_record` is what the accountant is told."""
    s = sc.setting
    q_e, q_s = sc.rates
    Z = denominator(sc.method, q_u=s.q_u, num_users=s.num_users)
    record = RoundRecord(round=1, method=sc.method, q_u=s.q_u, q_e=q_e, q_s=q_s, m_max=sc.m_max, k_cap=sc.k_cap,
                         beta=s.beta, w_max=s.w_max, z=z, Z=Z)
    told = accountant_record(record)
    if sensitivity_fn is sensitivities:
        sens = sensitivities(beta=s.beta, w_max=s.w_max, m_max=sc.m_max, k_cap=sc.k_cap, method=sc.method)
        sigma = record.sigma
        claimed = told.mechanism.mixture(sc.adjacency)  # the real accountant's mixture (units of b)
    else:
        sens = sensitivity_fn(beta=s.beta, w_max=s.w_max, m_max=sc.m_max, k_cap=sc.k_cap, method=sc.method)
        sigma = noise_std(sc.method, z, sens)
        claimed = accounted_mixture(sc.adjacency, sens, sigma=sigma, q_u=told.q_u, q_e=told.q_e, q_s=told.q_s)
    claimed_eps = mixture_epsilon(claimed, s.rounds, s.delta)
    return AuditedMechanism(scenario=sc, z=z, sigma=sigma, Z=Z, noise=noise, claimed=claimed,
                            claimed_epsilon=claimed_eps, control=control, warning=warning, sens=sens)


def sound_mixture_at(sc: Scenario, sigma: float) -> Mixture:
    """The sound accountant's mixture (real sensitivities and rates) at noise std `sigma`."""
    s = sc.setting
    mech = Mechanism(method=sc.method, z=1.0, q_u=s.q_u, q_e=sc.rates[0], q_s=sc.rates[1], m_max=sc.m_max,
                     k_cap=sc.k_cap)
    return adjacency_mixture(sc.adjacency, mech.sensitivities, sigma / s.unit, q_u=s.q_u, q_e=sc.rates[0],
                             q_s=sc.rates[1])  # mech.sensitivities: units of b


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
        return self.scenario.setting.num_users  # u' is the extra place of world 1

    def value(self, place: int, slot: int, key: RoundKey | None, world: int) -> int:
        """The update's canary coordinate in units of b."""
        sc = self.scenario
        if world == 1 and place == self.canary:
            return 1
        q_e, q_s = sc.rates
        if world == 1 and sc.adjacency == "uedp" and entity_sampled(key, ENTITY, q_e) \
                and slot in permitted_slots(key, ENTITY, sc.k_cap, sc.m_max):
            return 1
        if world == 1 and sc.adjacency == "undetected" and place == HOLDER \
                and extended_sampled(key, extended_entity(f"user{place}", 0), q_s):
            return 1
        return sc.base

    def update(self, place: int, slot: int, key: RoundKey | None, world: int) -> list[np.ndarray]:
        out = template()
        out[0].flat[CANARY_COORDINATE] = self.value(place, slot, key, world) * self.scenario.setting.unit
        return out


@dataclass
class RealRun:
    """Path A's output: per trial and round, the auditor's y (released canary coordinate times Z minus the
    world-0 constant) and the realized noiseless shift (units of b), plus the re-check counts."""

    y: np.ndarray
    shift: np.ndarray
    statuses: dict[str, int] = field(default_factory=dict)


def real_round(mech: AuditedMechanism, world: int, rng: random.Random,
               clients: CraftedClients | None = None) -> tuple[float, float, dict[str, int]]:
    """One round of the server's real path (as strategies.strategy.MechanismStrategy does it: the same
    calls, in the same order on `rng`) with the crafted clients. Returns (y, shift in units of b, counts)."""
    sc = mech.scenario
    s = sc.setting
    clients = clients or CraftedClients(sc)
    population = s.num_users + (1 if world == 1 else 0)
    cohort = sample_cohort(range(population), q_u=s.q_u, m_max=sc.m_max or population,
                           use_slots=sc.k_cap is not None, rng=rng)
    key = RoundKey(rng.randbytes(16)) if sc.keyed else None
    updates = []
    for i, place in enumerate(cohort.nodes):
        rng.randrange(2**31)  # the strategy draws each instruction's training seed here (seeded runs)
        slot = cohort.slots[i] if cohort.slots is not None else -1
        updates.append(clients.update(place, slot, key, world))
    tmpl = template()
    total, _ = aggregate(updates, template=tmpl, w_max=s.w_max, beta=s.beta, sigma=0.0, Z=1.0, noise=_NoNoise())
    out, stats = aggregate(updates, template=tmpl, w_max=s.w_max, beta=s.beta, sigma=mech.sigma, Z=mech.Z,
                           noise=mech.noise)
    offset = sc.offset * s.unit
    y = float(out[0].flat[CANARY_COORDINATE]) * mech.Z - offset
    shift = (float(total[0].flat[CANARY_COORDINATE]) - offset) / s.unit
    return y, shift, stats.as_dict()


def run_real(mech: AuditedMechanism, world: int, trials: int, rng: random.Random) -> RealRun:
    """`trials` independent T-round runs of the real path in `world`."""
    T = mech.scenario.setting.rounds
    y = np.empty((trials, T))
    shift = np.empty((trials, T))
    counts: dict[str, int] = {}
    for i in range(trials):
        for t in range(T):
            y[i, t], shift[i, t], stats = real_round(mech, world, rng)
            for k, v in stats.items():
                counts[k] = counts.get(k, 0) + v
    return RealRun(y=y, shift=np.rint(shift * 1e9) / 1e9, statuses=counts)


# -- path B: the same law, vectorized, with the same noise source ----------------------------------------------
def run_vectorized(mech: AuditedMechanism, law: Law, world: int, trials: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`trials` T-round runs: the per-round shift drawn from `law` (world 0 or 1, unconditioned), the noise
    from `mech.noise` with std `mech.sigma` (as aggregate asks for it), released = (sum + noise) / Z as
    aggregate computes it, and the auditor's y = released * Z - world-0 constant. Returns (y, shift)."""
    sc = mech.scenario
    s = sc.setting
    dist = law.world1 if world == 1 else law.world0
    values = np.array(sorted(dist), dtype=np.float64)
    probs = np.array([dist[int(v)] for v in values])
    shift = values[rng.choice(values.size, size=(trials, s.rounds), p=probs / probs.sum())]
    offset = sc.offset * s.unit
    released = (shift * s.unit + offset + mech.noise.normal((trials, s.rounds), mech.sigma)) / mech.Z
    return released * mech.Z - offset, shift


def score(mech: AuditedMechanism, law: Law, y: np.ndarray) -> np.ndarray:
    """The auditor's statistic per trial: the log-likelihood ratio of the realizable worst-case mixture
    against no shift, with the sigma the run REPORTS (mech.sigma; the auditor is not told that a control
    draws less noise)."""
    u = mech.scenario.setting.unit
    return log_likelihood_ratio(y, sigma=mech.sigma, shifts=[v * u for v in law.shifts], probs=law.probs)


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


# -- the four controls: the real mechanism with ONE broken component (uedp.audit.controls) -----------------------
CONTROLS = ("noise_halved", "entity_k_beta", "no_user_term", "accountant_half_q_u")


def control_mechanism(sc: Scenario, control: str | None, noise: NoiseSource) -> AuditedMechanism:
    """The sound mechanism (control None) or one control, each calibrated as its run would be: z from the
    (possibly broken) accountant for the setting's target epsilon, so that its claim is the target."""
    from uedp.audit import controls as c  # torch: imported only when a mechanism is built

    s = sc.setting
    if control is None:
        return build_mechanism(sc, z=calibrate(sc), noise=noise)
    if control == "noise_halved":
        scaled = c.ScaledNoise(noise, 0.5)
        return build_mechanism(sc, z=calibrate(sc), noise=scaled, control=control, warning=scaled.warning)
    if control == "accountant_half_q_u":
        return build_mechanism(sc, z=calibrate(sc, q_u=0.5 * s.q_u), noise=noise, control=control,
                               accountant_record=c.understated_sampling, warning=c.HALVED_RATE_WARNING)
    fn, warning = {"entity_k_beta": (c.sensitivities_entity_k_beta, c.ENTITY_TERM_WARNING),
                   "no_user_term": (c.sensitivities_without_user_term, c.NO_USER_TERM_WARNING)}[control]
    claim_adjacency = "user" if sc.method == "user_dp" else "uedp"
    claim_sc = Scenario(s, sc.method, claim_adjacency, sc.design)

    def claimed(z: float) -> float:  # the broken run calibrates its z with its broken accountant
        return build_mechanism(claim_sc, z=z, noise=noise, sensitivity_fn=fn).claimed_epsilon

    z = calibrate_to(claimed, s.target_epsilon)
    return build_mechanism(sc, z=z, noise=noise, sensitivity_fn=fn, control=control, warning=warning)
