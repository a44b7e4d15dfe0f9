"""The one Flower strategy of the project: a Message-API Strategy driven by a mechanism spec.

Every mechanism (UeDP f_E+ and f_E, user-level DP, noiseless FedAvg, de-identification) is this class
with a different `MechanismSpec` (uedp.privacy.mechanisms); adding one is a registry entry, not a class.

configure_train: Poisson-sample users over the registered population (truncated at m_max when the spec
  says so), draw a fresh secret round key (`secrets`) for keyed mechanisms, inject the cohort into slots
  when the entity cap is on, and send each sampled node its instructions (uedp.protocol) with the model.
aggregate_train: a reply counts only if it answers one of this round's plan messages, from that message's
  node, once (uedp.privacy.replies: a late reply, one to another round, from a node not sent the message, or
  a node's second reply is refused and counted); error, malformed and missing replies (time-outs) contribute
  zero; every counted update is re-checked (shape, finite, norm <= w_max * beta: re-clip or drop, counted;
  a split update's two parts each against its own bound, beta and gamma, then summed:
  uedp.privacy.aggregation.recheck_split), summed, noised with the round's sigma and divided by the public
  constant Z (uedp.privacy.aggregation).
  Noiseless mechanisms divide by the number of valid replies instead (they have no guarantee, so they may
  look at the data).

The aggregation function and the noise source are passed in (the audit's broken controls replace them);
real runs use `uedp.privacy.aggregation.aggregate` and a CSPRNG-seeded `GaussianNoise`.

configure_train returns the round's frozen `RoundPlan` (its ledger record, cohort and messages; an
Iterable of the messages, as Flower's Strategy API asks) and keeps it under its round until aggregate_train
takes it back: there is no state carried from one round to the next, a round aggregated without its plan
(or twice) is refused, and the round's record is built once (the server loop builds it for the budget
check and passes it in: the record charged is the record noised with).

The round's metrics hold counts only (sampled, replies, failed of which malformed, missing, refused of which
duplicate, re-check statuses), never a per-client number. The round key lives in the round's plan for one
round and is never logged or stored.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from uedp.config import ClientTrainConfig, PrivacyConfig
from uedp.privacy.aggregation import (
    STATUSES,
    UNBOUNDED_NORM,
    AggregationStats,
    Aggregator,
    aggregate,
    denominator,
    recheck_split,
    shapes_of,
)
from uedp.privacy.cohort import Cohort, sample_cohort
from uedp.privacy.ledger import RoundRecord
from uedp.privacy.mechanisms import MechanismSpec
from uedp.privacy.noise import NoiseSource
from uedp.privacy.replies import intake, stamp
from uedp.privacy.sampling import RoundKey, new_round_key
from uedp.protocol import ENTITY_UPDATE_RECORD, TOKENIZER_RECORD, UPDATE_RECORD, TrainInstructions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundPlan:
    """One round as configure_train fixed it: what aggregate_train and the server loop need, nothing mutable.

    `record` is the round's ledger record (its public mechanism; `record.sigma` is the noise of the round);
    `cohort` the sampled places; `messages` what each connected sampled node is sent (instructions, with the
    round key of a keyed mechanism, and the model). Iterating yields the messages (Flower's configure_train
    returns an Iterable of Messages). Only the public record is in its repr: never the cohort, the key or an
    instruction.
    """

    record: RoundRecord
    cohort: Cohort = field(repr=False)
    messages: tuple[Message, ...] = field(repr=False)

    @property
    def round(self) -> int:
        return self.record.round

    @property
    def instructions(self) -> tuple[TrainInstructions, ...]:
        """What each message carries, decoded from it (not a second copy of the round key)."""
        return tuple(TrainInstructions.from_record(m.content["config"]) for m in self.messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)


class MechanismStrategy(Strategy):
    def __init__(
        self,
        spec: MechanismSpec,
        *,
        privacy: PrivacyConfig,
        train: ClientTrainConfig,
        noise_multiplier: float,
        population: int,
        noise: NoiseSource,
        rng: random.Random,
        num_entities: int = 0,
        num_extended: int = 0,
        aggregator: Aggregator = aggregate,
        shipped: Mapping[str, Any] | None = None,
    ) -> None:
        if population < 1:
            raise ValueError(f"population must be >= 1, got {population}")
        self.spec = spec
        self.privacy = privacy
        self.train = train
        self._z = float(noise_multiplier) if spec.private else 0.0
        self.population = population
        self.noise = noise
        self.rng = rng
        self.aggregator = aggregator
        self.shipped = None if shipped is None else ConfigRecord(dict(shipped))  # e.g. the tokenizer (owners mode)
        self.k_cap = spec.k_cap(privacy)
        self.m_max = spec.m_max(privacy)
        self.gamma = spec.gamma(privacy)  # the entity part's clip of a split update (0 otherwise)
        self.q_e, self.q_s = spec.rates(privacy)
        if spec.private:
            self.Z = denominator(
                spec.accounting, q_u=privacy.q_u, num_users=population, paper_z=privacy.paper_z and spec.keyed,
                q_e=self.q_e, W_e=float(num_entities), q_s=self.q_s, W_s=float(num_extended),
            )
        else:
            self.Z = math.nan  # noiseless: mean over valid replies
        self._plans: dict[int, RoundPlan] = {}  # configured, not yet aggregated: taken back by aggregate_train
        self._template: list[np.ndarray] | None = None

    @property
    def z(self) -> float:
        """The run's noise multiplier (0 for a noiseless mechanism). Its one holder: the run context, the
        checkpoint, the summary and a resume's check read it here."""
        return self._z

    # -- the mechanism of one round, as recorded in the ledger ---------------------------------------
    def round_record(self, server_round: int) -> RoundRecord:
        p = self.privacy
        return RoundRecord(
            round=server_round, method=self.spec.accounting, q_u=p.q_u, q_e=self.q_e, q_s=self.q_s,
            m_max=self.m_max, k_cap=self.k_cap, beta=p.beta, w_max=p.w_max, z=self.z,
            Z=self.Z if self.spec.private else 1.0, gamma=self.gamma,
            noise=getattr(self.noise, "mode", "unrecorded") if self.spec.private else "none",
        )

    @property
    def sigma(self) -> float:
        """The noise std of every round (the mechanism's, outside any round: record 0)."""
        return self.round_record(0).sigma if self.spec.private else 0.0

    # -- Strategy API -----------------------------------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid, *,
        record: RoundRecord | None = None,
    ) -> RoundPlan:
        """Sample the round and return its plan (an Iterable of its Messages). `record`: the round's ledger
        record when the caller built it already (the server loop, for its budget check); None: built here."""
        if server_round in self._plans:
            raise RuntimeError(f"round {server_round} is configured already and not aggregated: a round is "
                               "configured once")
        if record is None:
            record = self.round_record(server_round)
        elif (record.round, record.method, record.z) != (server_round, self.spec.accounting, self.z):
            raise ValueError(f"the record of round {record.round} ({record.method}, z={record.z}) is not this "
                             f"strategy's round {server_round} ({self.spec.accounting}, z={self.z})")
        # The population is N public places (the corpus's users, or the invited owners); the connected nodes
        # fill the first places. An owner who is not connected is sampled as usual and contributes zero (a
        # missing reply). More than N connected nodes is refused, fail-closed: keeping "the first N" would let
        # one owner's presence push another out of the population (docs/proofs.md section 8, G2).
        nodes = sorted(grid.get_node_ids())
        if len(nodes) > self.population:
            raise RuntimeError(f"{len(nodes)} nodes are connected but the federation has {self.population} places "
                               "(federation.num_nodes, or the corpus's users): refusing to sample a round; stop the "
                               "extra SuperNodes (or wait for stale node ids to expire) and resume")
        cohort = sample_cohort(
            range(self.population), q_u=self.privacy.q_u, m_max=self.m_max or self.population,
            use_slots=self.k_cap is not None, rng=self.rng,
        )
        key = None
        if self.spec.keyed:  # fixed-seed reproduction runs derive it from the seed
            key = RoundKey(self.rng.randbytes(16)) if self.privacy.seed >= 0 else new_round_key()
        messages = []
        for i, place in enumerate(cohort.nodes):
            if place >= len(nodes):
                continue  # an invited owner who is not connected
            ins = TrainInstructions(
                round=server_round, mechanism=self.spec.name, q_e=self.q_e, q_s=self.q_s,
                k_cap=self.k_cap or 0, m_max=self.privacy.m_max,
                slot=cohort.slots[i] if cohort.slots is not None else -1,
                beta=self.privacy.beta if self.spec.private else 0.0, w_u=self.privacy.w_max,
                private=self.spec.private, optimizer=self.train.optimizer, lr=self.train.lr,
                momentum=self.train.momentum, local_epochs=self.train.local_epochs,
                local_steps=self.train.local_steps, batch_size=self.train.batch_size, key=key,
                seed=self.rng.randrange(2**31) if self.privacy.seed >= 0 else -1, gamma=self.gamma,
            )
            content = RecordDict({"arrays": arrays, "config": ins.to_record()})
            if self.shipped is not None:
                content[TOKENIZER_RECORD] = self.shipped
            messages.append(stamp(Message(content, dst_node_id=nodes[place], message_type="train",
                                          group_id=str(server_round))))
        plan = RoundPlan(record, cohort, tuple(messages))
        self._plans[server_round] = plan
        return plan

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        if self._template is None:
            raise RuntimeError("set_template(weights) must be called before the first round")
        plan = self._plans.pop(server_round, None)  # taken back: a plan serves its own round, once
        if plan is None:
            raise RuntimeError(f"round {server_round} has no plan: configure_train({server_round}, ...) comes "
                               "first, and a round is aggregated once")
        cohort = plan.cohort
        shapes = shapes_of(self._template)
        # Only a reply to one of this round's messages, from its node, once, counts; its records and arrays
        # are read without trusting them (uedp.privacy.replies). Everything else contributes zero, counted.
        got = intake(plan.messages, replies, shapes=shapes, private=self.spec.private,
                     records=(UPDATE_RECORD, ENTITY_UPDATE_RECORD) if self.spec.split else (UPDATE_RECORD,))
        updates = []
        split_counts = dict.fromkeys(STATUSES, 0)
        for parts in got.updates:
            update = parts[0]
            if self.spec.split:  # each part against its own bound, then their sum
                update, status = recheck_split(parts[0], parts[1], shapes, w_max=self.privacy.w_max,
                                               beta=self.privacy.beta, gamma=self.gamma)
                split_counts[status] += 1
                if update is None:
                    continue
            updates.append(update)
        if self.spec.private:
            mean, stats = self.aggregator(updates, template=self._template, w_max=self.privacy.w_max,
                                          beta=self.privacy.beta + self.gamma,
                                          sigma=plan.record.sigma, Z=self.Z, noise=self.noise)
            if self.spec.split:  # the parts' re-check statuses (the sums all pass the second one)
                stats = AggregationStats(received=sum(split_counts.values()), **split_counts)
        else:
            mean, stats = self.aggregator(updates, template=self._template, w_max=1.0, beta=UNBOUNDED_NORM,
                                          sigma=0.0, Z=1.0, noise=self.noise)
            mean = [m / max(1, stats.ok + stats.reclipped) for m in mean]  # the valid replies
        sampled = cohort.size
        metrics = {
            "sampled": float(sampled),
            "drawn": float(cohort.drawn),
            "truncated": float(bool(cohort.truncated)),
            "replies": float(stats.received),
            "missing": float(sampled - got.answered),
            **{k: float(v) for k, v in got.counts().items()},
            **{k: float(v) for k, v in stats.as_dict().items() if k != "received"},
        }
        if got.train_loss:  # non-private runs only; each loss finite, their mean scaled so as not to overflow
            loss = sum(v / len(got.train_loss) for v in got.train_loss)
            if math.isfinite(loss):
                metrics["train_loss"] = loss
        return ArrayRecord([np.asarray(m, dtype=np.float32) for m in mean]), MetricRecord(metrics)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return []  # central evaluation on the server (server/round.py)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return None

    def summary(self) -> None:
        p = self.privacy
        log.info("%s: q_u=%s q_e=%s q_s=%s m_max=%s k_cap=%s beta=%s z=%.4f sigma=%.4g Z=%.4g",
                 self.spec.name, p.q_u, self.q_e, self.q_s, self.m_max, self.k_cap, p.beta, self.z,
                 self.sigma, self.Z)

    # -- shapes of the model, set by the server before round 1 ------------------------------------------
    def set_template(self, weights: list[np.ndarray]) -> None:
        self._template = [np.zeros_like(w) for w in weights]
