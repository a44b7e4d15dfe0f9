"""The crafted-update audit's scenarios (uedp.audit.mechanism): a setting (population, rates, target, rounds), a
mechanism under audit and the adjacency it is audited for, with the design of the crafted clients; the template
the audit aggregates and the audited entity."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from uedp.config import FederationConfig, PrivacyConfig
from uedp.privacy.composition import check_delta
from uedp.privacy.mechanisms import MechanismSpec, audited_spec, specs
from uedp.privacy.pairs import Pair
from uedp.privacy.sensitivity import Sensitivities

ENTITY = "PERSON:audit canary entity"  # e', the audited entity
HOLDER = 0  # the place of the one user holding the undetected entity s' (adjacency "undetected")
CANARY_COORDINATE = 0  # the Dirac canary: updates move this coordinate of the first array only
METHODS = tuple(s.name for s in specs() if s.audited)  # the mechanisms whose spec says the audit covers them
ADJACENCIES = ("user", "uedp", "undetected")
DESIGNS = ("zero", "full", "flip")
SensitivityFn = Callable[..., Sensitivities]
UndetectedBound = Callable[..., Pair]  # (sens in units of b, sigma in units of b, q_u=, q_e=, q_s=) -> pair


def template() -> list[np.ndarray]:
    """The small model the audit aggregates: two float64 arrays (the canary is coordinate 0 of the first)."""
    return [np.zeros((2, 3), dtype=np.float64), np.zeros(4, dtype=np.float64)]


@dataclass(frozen=True)
class AuditSetting:
    """Public parameters of the audited runs (defaults: the main job's, uedp.config.PrivacyConfig, except
    m_max, which must be given: the main job's privacy.m_max = "auto" means
    uedp.privacy.accounting.safe_m_max(places, q_u, rounds, delta)). `num_users` is the number N of benign
    places; the canary's place makes N + 1 public places (`places`) in both worlds. `target_on`: the claims
    the calibration bounds ("" = every claim of the mechanism: UeDP eps_uedp and eps_undetected)."""

    name: str = "main"
    num_users: int = 200
    q_u: float = PrivacyConfig.q_u
    q_e: float = PrivacyConfig.q_e
    q_s: float = PrivacyConfig.q_s
    m_max: int | str = PrivacyConfig.m_max  # "auto" is refused: give the cap
    k_cap: int = PrivacyConfig.k_cap
    beta: float = PrivacyConfig.beta
    w_max: float = PrivacyConfig.w_max
    rounds: int = FederationConfig.rounds
    delta: float = PrivacyConfig.delta
    target_epsilon: float = PrivacyConfig.target_epsilon
    target_on: str = ""

    def __post_init__(self) -> None:
        if self.num_users < 2 or self.rounds < 1:
            raise ValueError("need num_users >= 2 and rounds >= 1")
        if not isinstance(self.m_max, int) or self.m_max < 1:
            raise ValueError(f"{self.name}: m_max must be given (>= 1), e.g. "
                             f"uedp.privacy.accounting.safe_m_max({self.places}, q_u, rounds, delta); got {self.m_max}")
        check_delta(self.delta, self.places)
        if self.k_cap < 1:
            raise ValueError("the audit's exact law is written for the entity cap on (k_cap >= 1)")

    @property
    def places(self) -> int:
        """N + 1: the benign places and the canary's place (the public population of both worlds)."""
        return self.num_users + 1

    @property
    def unit(self) -> float:
        return self.w_max * self.beta

    def claims(self, method: str) -> tuple[str, ...]:
        """The epsilons the run calibrates to (uedp.privacy.mechanisms.MechanismSpec.claims_for)."""
        return audited_spec(method).claims_for(self)  # type: ignore[arg-type] - reads target_on only


@dataclass(frozen=True)
class Scenario:
    """What is audited: the mechanism (a registered spec's name with `audited`: user_dp or uedp) at a
    setting, the adjacency (which epsilon), and the crafted clients' design. Truncation, cap, keying, rates,
    accounting rule and claims are the spec's (`spec`)."""

    setting: AuditSetting
    method: str
    adjacency: str
    design: str = "zero"

    def __post_init__(self) -> None:
        spec = audited_spec(self.method)  # an unregistered or unaudited name is refused (ConfigError)
        if self.adjacency not in ADJACENCIES or self.design not in DESIGNS:
            raise ValueError(f"bad scenario {self.method}/{self.adjacency}/{self.design}")
        # user adjacency is audited for every mechanism, the others where the spec claims them; without keyed
        # entity sampling there is no entity coin for a design other than zero to flip on
        adjacencies = tuple(dict.fromkeys(("user", *spec.claims)))
        if self.adjacency not in adjacencies or (not spec.keyed and self.design != "zero"):
            raise ValueError(f"{self.method} is audited for adjacencies {', '.join(adjacencies)}; "
                             f"{'every design' if spec.keyed else 'zero design'}")
        if (self.design == "flip" and self.adjacency != "undetected") or \
                (self.design == "full" and self.adjacency == "undetected"):
            raise ValueError(f"design {self.design!r} does not apply to adjacency {self.adjacency!r}")

    @property
    def spec(self) -> MechanismSpec:
        return audited_spec(self.method)

    @property
    def rule(self) -> str:
        """The spec's accounting rule (uedp.privacy.sensitivity.RULES): what the ledger and the accountant see."""
        return self.spec.rule

    @property
    def m_max(self) -> int | None:
        return self.spec.m_max(self.setting)  # type: ignore[arg-type] - None: no truncation (user_dp)

    @property
    def k_cap(self) -> int | None:
        return self.spec.k_cap(self.setting)  # type: ignore[arg-type]

    @property
    def keyed(self) -> bool:
        return self.spec.keyed

    @property
    def rates(self) -> tuple[float, float]:
        return self.spec.rates(self.setting)  # type: ignore[arg-type]

    @property
    def base(self) -> int:
        """A benign non-holder client's update when it does not flip, in units of b."""
        return -1 if self.design == "full" else 0

    @property
    def label(self) -> str:
        return f"{self.setting.name}/{self.method}/{self.adjacency}/{self.design}"
