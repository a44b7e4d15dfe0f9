"""What UeDP's wrapper (uedp.flower.strategy.UserEntityDP) reports and returns: its state, read-only
(`UeDPReport`, with the last aggregated round's `RoundReport`), and a round's configured messages
(`RoundMessages`, what configure_train returns). Public values only: the round key lives in the messages'
instructions, never in a repr.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from flwr.app import ArrayRecord, Message

from uedp.flower.plan import MechanismSettings, RoundPlan
from uedp.privacy.cohort import Cohort
from uedp.privacy.ledger import RoundRecord
from uedp.protocol import INSTRUCTIONS_RECORD, RoundInstructions


@dataclass(frozen=True)
class RoundReport:
    """The last aggregated round: its number, the ledger's head hash after it, its wall time (configure_train
    to the new global arrays) and whether it started after its scheduled time. Operator information."""

    round: int
    ledger_hash: str
    seconds: float
    late: bool = False


@dataclass(frozen=True)
class UeDPReport:
    """The wrapper's state, read-only (`UserEntityDP.report`). `settings`: the mechanism's public parameters
    (uedp.flower.plan.MechanismSettings), also read as the report's own attributes (`report.z`, `report.sigma`,
    `report.q_u`, `report.m_max`, `report.noise`, ...); `denominator` is NaN for a noiseless mechanism, which
    divides by its valid replies. Then the rounds planned, charged and left; `model_round` (the round after
    which `arrays`, the last released global arrays, were released; 0: the start); `checkpoint_round` (a
    resumed run's checkpoint); `late_rounds` (rounds that started after their scheduled time); `last_round`;
    `not_private` (why the run is not private, if it is not: a fixed seed, places by node order, ...)."""

    settings: MechanismSettings = field(repr=False)
    claims: tuple[str, ...]
    rounds_planned: int
    rounds_charged: int
    rounds_left: int
    model_round: int
    checkpoint_round: int
    late_rounds: int
    arrays: ArrayRecord | None = field(repr=False)
    last_round: RoundReport | None
    not_private: tuple[str, ...]

    def __getattr__(self, name: str) -> Any:  # the mechanism's public parameters
        if name.startswith("_") or name == "settings":
            raise AttributeError(name)
        return getattr(self.settings, name)

    @property
    def mechanism(self) -> str:
        return self.settings.spec.name

    @property
    def rule(self) -> str:
        return self.settings.spec.rule

    @property
    def denominator(self) -> float:
        return self.settings.denominator if self.settings.spec.private else math.nan

    @property
    def private(self) -> bool:
        return bool(self.claims) and not self.not_private


@dataclass(frozen=True)
class RoundMessages:
    """What configure_train returns: the round's plan (uedp.flower.plan: its ledger record, cohort and
    instructions) and one Message per assigned node; iterating yields the messages (Flower's configure_train
    returns an Iterable of Messages). Its repr shows only the public record."""

    plan: RoundPlan
    messages: tuple[Message, ...] = field(repr=False)

    @property
    def round(self) -> int:
        return self.plan.round

    @property
    def record(self) -> RoundRecord:
        return self.plan.record

    @property
    def cohort(self) -> Cohort:
        return self.plan.cohort

    @property
    def instructions(self) -> tuple[RoundInstructions, ...]:
        """What each message carries, decoded from it (not a second copy of the round key)."""
        return tuple(RoundInstructions.from_record(m.content[INSTRUCTIONS_RECORD]) for m in self.messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)
