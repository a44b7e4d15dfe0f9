"""What the server tells a sampled client in a training message, and what the client sends back.

Server -> client (ConfigRecord "config" next to ArrayRecord "arrays", the global model):
    round, mechanism (a name of uedp.privacy.mechanisms), key (16 bytes; only for keyed mechanisms, which
    sample entities), q_e, q_s (the mechanism's rates: q_s = 0 for f_E), k_cap (0 = off),
    m_max, slot (-1 = none), beta (0 = no clipping: noiseless FedAvg only), w_u, private, and the local
    training settings (optimizer, lr, momentum, local_epochs, local_steps, batch_size), and seed (-1, or
    a seed for the client's training randomness in fixed-seed reproduction runs).
Client -> server: ArrayRecord "update" = w_u * clip(theta_local - theta_t, beta). A split update
(mechanism uedp_split, docs/proofs.md Theorem 3) sends two: "update" (trained on the selected entity-free
sentences, clipped to beta) and "update_entity" (trained from the same theta_t on the sentences whose
entities are all sampled, clipped to gamma); the server re-checks each against its own bound. In private
runs nothing else: no loss, no count, no entity statistic. In non-private runs (noiseless FedAvg) a
MetricRecord "metrics" with the local training loss and number of sentences used. `reply_content` builds
the reply's content from what the client computed.

What the client does with the sentences (keyed selection, de-identification, every sentence) is read from
the mechanism's spec, never from a list of names here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from uedp.privacy import mechanisms
from uedp.privacy.mechanisms import MechanismSpec
from uedp.privacy.sampling import RoundKey

# With federation.data = "owners", each training message also carries the tokenizer the server ships
# (ConfigRecord "tokenizer": its JSON bytes and SHA-256; uedp.owners.tokenizer_payload).
TOKENIZER_RECORD = "tokenizer"
# strategy=dp_bart: the query message carries the rewrite settings under REWRITE_RECORD (public: rewrite.*),
# and the reply carries ConfigRecord REWRITES_RECORD {"texts": [...], "labels": [...]?}: only the rewrites.
REWRITE_RECORD = "rewrite"
REWRITES_RECORD = "rewrites"
UPDATE_RECORD = "update"
ENTITY_UPDATE_RECORD = "update_entity"  # the entity part of a split update
METRICS_RECORD = "metrics"  # non-private runs only: the local training metrics


@dataclass(frozen=True)
class SplitUpdate:
    """A split update's two parts (uedp_split): `free` (norm <= w_u beta) and `entity` (norm <= w_u gamma)."""

    free: list[np.ndarray]
    entity: list[np.ndarray]


def reply_content(update: list[np.ndarray] | SplitUpdate, metrics: dict[str, float]) -> RecordDict:
    """A training reply's content: the update (both parts of a split one) and, in non-private runs only,
    the metrics the client returned."""
    if isinstance(update, SplitUpdate):
        content = RecordDict({UPDATE_RECORD: ArrayRecord(update.free),
                              ENTITY_UPDATE_RECORD: ArrayRecord(update.entity)})
    else:
        content = RecordDict({UPDATE_RECORD: ArrayRecord(update)})
    if metrics:
        content[METRICS_RECORD] = MetricRecord(metrics)
    return content


@dataclass(frozen=True)
class TrainInstructions:
    round: int
    mechanism: str
    q_e: float
    q_s: float
    k_cap: int
    m_max: int
    slot: int
    beta: float
    w_u: float
    private: bool
    optimizer: str
    lr: float
    momentum: float
    local_epochs: int
    local_steps: int
    batch_size: int
    seed: int = -1  # >= 0 only in fixed-seed (reproduction, not private) runs
    gamma: float = 0.0  # the entity part's clip of a split update (uedp_split); 0 otherwise
    key: RoundKey | None = None

    def __post_init__(self) -> None:
        spec = self.spec  # an unknown mechanism name is refused here
        if (self.key is None) == spec.keyed:
            raise ValueError(f"mechanism {self.mechanism!r} {'needs' if self.key is None else 'takes no'} round key")
        if self.private and self.beta <= 0:
            raise ValueError("a private run must clip (beta > 0)")
        if spec.split != (self.gamma > 0):
            raise ValueError(f"mechanism {self.mechanism!r}: gamma > 0 exactly for a split update, got {self.gamma!r}")

    @property
    def spec(self) -> MechanismSpec:
        return mechanisms.get(self.mechanism)

    def to_record(self) -> ConfigRecord:
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "key"}
        if self.key is not None:
            values["key"] = self.key.to_bytes()
        return ConfigRecord(values)

    @classmethod
    def from_record(cls, record: ConfigRecord) -> TrainInstructions:
        names = [f.name for f in fields(cls) if f.name != "key"]
        missing = [n for n in names if n not in record]
        if missing:
            raise ValueError(f"training message lacks field(s) {', '.join(missing)}")
        key = RoundKey(record["key"]) if "key" in record else None
        return cls(**{n: record[n] for n in names}, key=key)

    def __repr__(self) -> str:  # never print the key
        return f"TrainInstructions(round={self.round}, mechanism={self.mechanism!r}, ...)"
