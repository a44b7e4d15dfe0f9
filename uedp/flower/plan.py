"""One round's plan, as a pure function: who is sampled, with which key, slot and instructions.

    plan_round(round, settings=, record=, assignment=, rng=) -> RoundPlan

`settings` (`MechanismSettings`) is the run's mechanism with every public parameter resolved (the spec,
rates, cohort cap, entity cap, clips, noise multiplier, public denominator); `assignment` says which node
stands in each of the N places this round (uedp.flower.places); `rng` is the run's randomness
(`secrets.SystemRandom()`, or `random.Random(seed)` in a fixed-seed reproduction run).

The order of draws on `rng` is part of the mechanism's definition (a fixed seed reproduces a run):
  1. the cohort: `sample_cohort(range(N), ...)` (Poisson coins of every place, truncation, shuffle, slots);
  2. keyed mechanisms: the round key (16 bytes of `rng` in a fixed-seed run; `secrets` otherwise);
  3. fixed-seed runs only: for EVERY sampled place, in cohort order, its training seed, drawn whether or not a
     node stands in it (an empty place gets no message and its seed is unused), so which owners are
     connected never shifts another place's seed. Other runs draw nothing here.
The strategy (uedp.flower.strategy) and the crafted-update audit (uedp.audit.mechanism.real_round) both call
this function, so the audit samples exactly as a run does.

The plan's repr shows only the public record: never the cohort, the key or an instruction.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from uedp.flower.places import Assignment
from uedp.privacy.cohort import Cohort, sample_cohort
from uedp.privacy.ledger import RoundRecord
from uedp.privacy.mechanisms import MechanismSpec
from uedp.privacy.sampling import RoundKey, new_round_key
from uedp.protocol import RoundInstructions


@dataclass(frozen=True)
class MechanismSettings:
    """The run's mechanism, every public parameter resolved. `m_max` / `k_cap`: the cohort and entity caps
    in force (None: off); `m_max_sent`: the m_max the nodes are told (the slot range); `z`: the noise
    multiplier (0 for a noiseless mechanism); `denominator`: the public Z (1 for a noiseless mechanism, which
    divides by its valid replies instead); `noise`: how the noise is drawn (the ledger's NOISE_MODES)."""

    spec: MechanismSpec
    places: int
    q_u: float
    q_e: float
    q_s: float
    m_max: int | None
    k_cap: int | None
    m_max_sent: int
    beta: float
    w_max: float
    gamma: float
    z: float
    denominator: float
    noise: str
    seeded: bool  # a fixed-seed reproduction run (keys and training seeds from the run's rng)

    def record(self, server_round: int) -> RoundRecord:
        """The ledger record of round `server_round` (the public parameters of its mechanism)."""
        return RoundRecord(
            round=server_round, rule=self.spec.rule, q_u=self.q_u, q_e=self.q_e, q_s=self.q_s,
            m_max=self.m_max, k_cap=self.k_cap, beta=self.beta, w_max=self.w_max, z=self.z,
            denominator=self.denominator, gamma=self.gamma, noise=self.noise,
        )

    @property
    def sigma(self) -> float:
        """The noise std of every round (0 for a noiseless mechanism)."""
        return self.record(0).sigma if self.spec.private else 0.0


@dataclass(frozen=True)
class Assigned:
    """A sampled place that stands for a connected node, and what that node is told."""

    place: int
    node_id: int
    instructions: RoundInstructions = field(repr=False)


@dataclass(frozen=True)
class RoundPlan:
    """One round as the plan fixed it. `record` is its ledger record (`record.sigma` is the round's noise);
    `cohort` the sampled places; `assigned` the sampled places with a connected node, in cohort order.
    Iterating yields the assigned places."""

    record: RoundRecord
    cohort: Cohort = field(repr=False)
    assigned: tuple[Assigned, ...] = field(repr=False)

    @property
    def round(self) -> int:
        return self.record.round

    def __iter__(self) -> Iterator[Assigned]:
        return iter(self.assigned)

    def __len__(self) -> int:
        return len(self.assigned)


def plan_round(server_round: int, *, settings: MechanismSettings, record: RoundRecord, assignment: Assignment,
               rng: random.Random) -> RoundPlan:
    """The plan of round `server_round` (module docstring: the draws, in order)."""
    s = settings
    if len(assignment.nodes) != s.places:
        raise ValueError(f"the assignment has {len(assignment.nodes)} places, the mechanism {s.places}")
    cohort = sample_cohort(range(s.places), q_u=s.q_u, m_max=s.m_max or s.places, use_slots=s.k_cap is not None,
                           rng=rng)
    key = None
    if s.spec.keyed:  # fixed-seed reproduction runs derive it from the seed
        key = RoundKey(rng.randbytes(16)) if s.seeded else new_round_key()
    assigned = []
    for i, place in enumerate(cohort.nodes):
        seed = rng.randrange(2**31) if s.seeded else -1  # drawn for every sampled place, empty or not
        node = assignment.nodes[place]
        if node is None:
            continue  # an empty place: no message; it contributes zero
        ins = RoundInstructions(
            round=server_round, mechanism=s.spec.name, q_e=s.q_e, q_s=s.q_s, k_cap=s.k_cap or 0, m_max=s.m_max_sent,
            slot=cohort.slots[i] if cohort.slots is not None else -1,
            beta=s.beta if s.spec.private else 0.0, w_u=s.w_max, private=s.spec.private,
            seed=seed, gamma=s.gamma, key=key,
        )
        assigned.append(Assigned(place, node, ins))
    return RoundPlan(record, cohort, tuple(assigned))
