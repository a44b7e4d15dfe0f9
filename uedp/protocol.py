"""What the server tells a sampled client in a training message, and what the client sends back.

Server -> client (ConfigRecord "config" next to ArrayRecord "arrays", the global model):
    round, mechanism (a name of uedp.privacy.mechanisms), key (16 bytes; only for keyed mechanisms, which
    sample entities), q_e, q_s (the mechanism's rates: q_s = 0 for f_E), k_cap (0 = off),
    m_max, slot (-1 = none), beta (0 = no clipping: noiseless FedAvg only), w_u, private, and the local
    training settings (optimizer, lr, momentum, local_epochs, local_steps, batch_size), and seed (-1, or
    a seed for the client's training randomness in fixed-seed reproduction runs).
Client -> server: ArrayRecord "update" = w_u * clip(theta_local - theta_t, beta). In private runs
nothing else: no loss, no count, no entity statistic. In non-private runs (noiseless FedAvg) a
MetricRecord "metrics" with the local training loss and number of sentences used.

What the client does with the sentences (keyed selection, de-identification, every sentence) is read from
the mechanism's spec, never from a list of names here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from flwr.app import ConfigRecord

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
    key: RoundKey | None = None

    def __post_init__(self) -> None:
        spec = self.spec  # an unknown mechanism name is refused here
        if (self.key is None) == spec.keyed:
            raise ValueError(f"mechanism {self.mechanism!r} {'needs' if self.key is None else 'takes no'} round key")
        if self.private and self.beta <= 0:
            raise ValueError("a private run must clip (beta > 0)")

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
