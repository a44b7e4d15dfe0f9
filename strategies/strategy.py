"""The one Flower strategy of the project: a Message-API Strategy driven by a mechanism spec.

Every mechanism (UeDP f_E+ and f_E, user-level DP, noiseless FedAvg, de-identification) is this class
with a different `MechanismSpec` (uedp.privacy.mechanisms); adding one is a registry entry, not a class.

configure_train: Poisson-sample users over the registered population (truncated at m_max when the spec
  says so), draw a fresh secret round key (`secrets`) for keyed mechanisms, inject the cohort into slots
  when the entity cap is on, and send each sampled node its instructions (uedp.protocol) with the model.
aggregate_train: error replies and missing replies (time-outs) contribute zero; every received update is
  re-checked (shape, finite, norm <= w_max * beta: re-clip or drop, counted; a split update's two parts
  each against its own bound, beta and gamma, then summed: uedp.privacy.aggregation.recheck_split),
  summed, noised with the round's sigma and divided by the public constant Z (uedp.privacy.aggregation).
  Noiseless mechanisms divide by the number of valid replies instead (they have no guarantee, so they may
  look at the data).

The aggregation function and the noise source are passed in (the audit's broken controls replace them);
real runs use `uedp.privacy.aggregation.aggregate` and a CSPRNG-seeded `GaussianNoise`.

The round's metrics hold counts only (sampled, replies, failures, re-check statuses), never a per-client
number. The round key lives in this object for one round and is never logged or stored.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterable, Mapping
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
from uedp.privacy.sampling import RoundKey, new_round_key
from uedp.protocol import ENTITY_UPDATE_RECORD, TOKENIZER_RECORD, UPDATE_RECORD, TrainInstructions

log = logging.getLogger(__name__)


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
        self.z = float(noise_multiplier) if spec.private else 0.0
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
        self._last: Cohort | None = None
        self._template: list[np.ndarray] | None = None

    # -- the mechanism of one round, as recorded in the ledger ---------------------------------------
    def round_record(self, server_round: int) -> RoundRecord:
        p = self.privacy
        return RoundRecord(
            round=server_round, method=self.spec.accounting, q_u=p.q_u, q_e=self.q_e, q_s=self.q_s,
            m_max=self.m_max, k_cap=self.k_cap, beta=p.beta, w_max=p.w_max, z=self.z,
            Z=self.Z if self.spec.private else 1.0, gamma=self.gamma,
        )

    @property
    def sigma(self) -> float:
        return self.round_record(1).sigma if self.spec.private else 0.0

    # -- Strategy API -----------------------------------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
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
        self._last = cohort
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
            messages.append(Message(content, dst_node_id=nodes[place], message_type="train"))
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        if self._template is None:
            raise RuntimeError("set_template(weights) must be called before the first round")
        cohort = self._last
        replies = list(replies)
        updates, errors = [], 0
        train_loss: list[float] = []
        split_counts = dict.fromkeys(STATUSES, 0)
        shapes = shapes_of(self._template) if self.spec.split else None
        for reply in replies:
            wanted = (UPDATE_RECORD, ENTITY_UPDATE_RECORD) if self.spec.split else (UPDATE_RECORD,)
            if reply.has_error() or any(k not in reply.content for k in wanted):
                errors += 1
                continue
            update = reply.content[UPDATE_RECORD].to_numpy_ndarrays()
            if self.spec.split:  # each part against its own bound, then their sum
                update, status = recheck_split(update, reply.content[ENTITY_UPDATE_RECORD].to_numpy_ndarrays(),
                                               shapes, w_max=self.privacy.w_max,
                                               beta=self.privacy.beta, gamma=self.gamma)
                split_counts[status] += 1
                if update is None:
                    continue
            updates.append(update)
            if not self.spec.private and "metrics" in reply.content:
                train_loss.append(float(reply.content["metrics"]["train_loss"]))
        if self.spec.private:
            mean, stats = self.aggregator(updates, template=self._template, w_max=self.privacy.w_max,
                                          beta=self.privacy.beta + self.gamma,
                                          sigma=self.round_record(server_round).sigma, Z=self.Z, noise=self.noise)
            if self.spec.split:  # the parts' re-check statuses (the sums all pass the second one)
                stats = AggregationStats(received=sum(split_counts.values()), **split_counts)
        else:
            mean, stats = self.aggregator(updates, template=self._template, w_max=1.0, beta=UNBOUNDED_NORM,
                                          sigma=0.0, Z=1.0, noise=self.noise)
            mean = [m / max(1, len(updates)) for m in mean]
        sampled = cohort.size if cohort else 0
        metrics = {
            "sampled": float(sampled),
            "drawn": float(cohort.drawn if cohort else 0),
            "truncated": float(bool(cohort and cohort.truncated)),
            "replies": float(stats.received),
            "failed": float(errors),
            "missing": float(sampled - len(replies)),
            **{k: float(v) for k, v in stats.as_dict().items() if k != "received"},
        }
        if train_loss:  # non-private runs only
            metrics["train_loss"] = float(np.mean(train_loss))
        self._last = None
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
