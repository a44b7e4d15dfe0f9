"""The messages of a UeDP round: what the server sends a sampled node, and what the node sends back.

Server -> node, a training message (`message_type` "train", `group_id` the round), content:
    "arrays"   ArrayRecord  the global model (as Flower's FedAvg sends it)
    "config"   ConfigRecord the app's own training settings (`Strategy.start(train_config=...)`; the
                            project's ClientApp reads its local optimizer, lr, epochs, ... there:
                            uedp.training.LocalTraining.from_record), passed through unchanged
    "uedp"     ConfigRecord the round's privacy instructions (`RoundInstructions`): round, mechanism (a
                            name of uedp.privacy.mechanisms), key (16 bytes; keyed mechanisms only), q_e, q_s
                            (the mechanism's rates: q_s = 0 for f_E), k_cap (0 = off), m_max, slot (-1 =
                            none), beta (0 = no clipping: noiseless mechanisms only), w_u, gamma (the entity
                            part's clip of a split update, 0 otherwise), private, seed (-1, or a seed for
                            the node's training randomness in fixed-seed reproduction runs)
    and any record the server ships with every message (owners mode: "tokenizer"; a model started from a
    checkpoint: "base", the SHA-256 of its config and weight files, uedp.models.checkpoints.base_digest: a node
    whose own base differs refuses to train).

The node's train function replies as in any Flower app, with its NEW model ("arrays"; a split update also
"arrays_entity", trained from the same global model on the sentences with entities) and, optionally, a
MetricRecord "metrics". The client mod (uedp.flower.mod) turns that into the reply the server accepts:
    "update"         ArrayRecord w_u * clip(theta_local - theta_t, beta), the whole update clipped once
    "update_entity"  ArrayRecord (split updates only) the entity part, clipped to gamma
    "metrics"        MetricRecord, non-private runs only (a private reply carries nothing but its update)
The update, not the new model, travels: "global + update" in float32, subtracted at the server, would lose
the update's low bits to the model's magnitude.

The probe (before the first private round, uedp.flower.strategy): a "train" message whose content is only
ConfigRecord "uedp-probe" {"protocol": PROBE_PROTOCOL}, sent once to every node that stands in a place. The
client mod answers it itself, without calling the app's train function, with ConfigRecord "uedp-probe"
{"mod": "uedp_mod", "protocol": PROBE_PROTOCOL}: the server reads that marker only (a reply without it means
the ClientApp has no `uedp_mod`). A probe is a registered message type ("train") because Flower runs an app's
mods only around its registered handlers.

What a node does with its sentences (keyed selection, de-identification, every sentence) is read from the
mechanism's spec, never from a list of names here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from uedp.privacy import mechanisms
from uedp.privacy.mechanisms import MechanismSpec
from uedp.privacy.sampling import RoundKey

ARRAYS_RECORD = "arrays"  # the global model in a training message; the node's new model in its train reply
CONFIG_RECORD = "config"  # the app's own training settings (Strategy.start's train_config)
INSTRUCTIONS_RECORD = "uedp"  # the round's RoundInstructions
ENTITY_ARRAYS_RECORD = "arrays_entity"  # a split update's second new model, in the train function's reply
# With federation.data = "owners", each training message also carries the tokenizer the server ships
# (ConfigRecord "tokenizer": its JSON bytes and SHA-256; uedp.owners.tokenizer_payload).
TOKENIZER_RECORD = "tokenizer"
# A model started from a checkpoint (model hf, or gpt2/bert with pretrained): each training message also carries
# ConfigRecord "base" {"digest": SHA-256 of the checkpoint's config and weight files}; the base never travels.
BASE_RECORD = "base"
# strategy=dp_bart: the query message carries the rewrite settings under REWRITE_RECORD (public: rewrite.*),
# and the reply carries ConfigRecord REWRITES_RECORD {"texts": [...], "labels": [...]?}: only the rewrites.
REWRITE_RECORD = "rewrite"
REWRITES_RECORD = "rewrites"
UPDATE_RECORD = "update"
ENTITY_UPDATE_RECORD = "update_entity"  # the entity part of a split update
METRICS_RECORD = "metrics"  # non-private runs only: the local training metrics
PROBE_RECORD = "uedp-probe"  # the probe and the mod's answer to it (module docstring)
PROBE_PROTOCOL = 1
PROBE_MARKER = "uedp_mod"  # what the mod's answer says in its "mod" field


def probe_content() -> RecordDict:
    """The content of a probe message (module docstring)."""
    return RecordDict({PROBE_RECORD: ConfigRecord({"protocol": PROBE_PROTOCOL})})


def is_probe(message: Message) -> bool:
    """Whether `message` is a probe: a "train" message whose content is exactly the probe record."""
    content = message.content
    return (message.metadata.message_type == "train" and list(content.keys()) == [PROBE_RECORD]
            and PROBE_RECORD in content.config_records)


def probe_answer(message: Message) -> Message:
    """The client mod's answer to a probe (it never reaches the app's train function)."""
    return Message(RecordDict({PROBE_RECORD: ConfigRecord({"mod": PROBE_MARKER, "protocol": PROBE_PROTOCOL})}),
                   reply_to=message)


def has_probe_marker(reply: Message) -> bool:
    """Whether a reply to a probe carries the client mod's marker (anything else: the app answered, or failed)."""
    try:
        if reply.has_error():
            return False
        record = reply.content.config_records.get(PROBE_RECORD)
    except Exception:  # noqa: BLE001 - whatever a hostile reply holds, it carries no marker
        return False
    return record is not None and record.get("mod") == PROBE_MARKER


@dataclass(frozen=True)
class SplitUpdate:
    """A split update's two parts (uedp_split): `free` (norm <= w_u beta) and `entity` (norm <= w_u gamma)."""

    free: list[np.ndarray]
    entity: list[np.ndarray]


def reply_content(update: list[np.ndarray] | SplitUpdate, metrics: dict[str, float] | MetricRecord | None,
                  *, keys: list[str] | None = None) -> RecordDict:
    """A training reply's content: the update (both parts of a split one) and, in non-private runs only,
    the metrics the node returned. `keys`: the global model's array names, kept in the update's record."""
    def record(arrays: list[np.ndarray]) -> ArrayRecord:
        if keys is None:
            return ArrayRecord(arrays)
        return ArrayRecord({k: Array(np.asarray(a)) for k, a in zip(keys, arrays, strict=True)})

    if isinstance(update, SplitUpdate):
        content = RecordDict({UPDATE_RECORD: record(update.free), ENTITY_UPDATE_RECORD: record(update.entity)})
    else:
        content = RecordDict({UPDATE_RECORD: record(update)})
    if metrics:
        content[METRICS_RECORD] = metrics if isinstance(metrics, MetricRecord) else MetricRecord(dict(metrics))
    return content


@dataclass(frozen=True)
class RoundInstructions:
    """What a sampled node is told about the round's mechanism (the "uedp" record; module docstring)."""

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
    def from_record(cls, record: ConfigRecord) -> RoundInstructions:
        names = [f.name for f in fields(cls) if f.name != "key"]
        missing = [n for n in names if n not in record]
        if missing:
            raise ValueError(f"training message lacks field(s) {', '.join(missing)} of its "
                             f"{INSTRUCTIONS_RECORD!r} record")
        key = RoundKey(record["key"]) if "key" in record else None
        return cls(**{n: record[n] for n in names}, key=key)

    @classmethod
    def of(cls, message: Message) -> RoundInstructions | None:
        """The instructions a training message carries, or None if it is not a UeDP training message."""
        record = message.content.config_records.get(INSTRUCTIONS_RECORD)
        return None if record is None else cls.from_record(record)

    def __repr__(self) -> str:  # never print the key
        return f"RoundInstructions(round={self.round}, mechanism={self.mechanism!r}, ...)"
