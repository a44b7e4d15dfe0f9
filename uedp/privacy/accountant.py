"""UeDP's privacy accountant: the mechanism a run plans, the hash-chained ledger of the rounds it released, and
the epsilons it claims. Defined once; the Flower wrapper (`uedp.flower.UserEntityDP(accountant=...)`) and
`uedp epsilon` both use it.

    accountant = UeDPAccountant("uedp", PrivacyConfig(q_u=0.1, q_e=0.2, q_s=0.2, beta=0.5, target_epsilon=8),
                                num_users=100, rounds=30, noise_multiplier=1.1)
    record = RoundRecord(round=1, ...)          # a round's public mechanism parameters (uedp.privacy.ledger)
    accountant.would_exceed(record)             # True if it would take a claimed epsilon past max_epsilon
    accountant.compose(record)                  # charged: appended to the ledger
    accountant.get_privacy_spent()              # ClaimedPrivacySpent: the largest claim, and each claim
    accountant.epsilons()                       # every epsilon of the ledger (eps_uedp, eps_user, ...)
    accountant.state_dict() / load_state_dict() # its state IS the ledger (ledger.json's document)

Method names are Flower's where the meaning is the same (`flwr.supercore.privacy_accounting.PrivacyAccountant`:
`num_releases`, `would_exceed`, `get_epsilon`, `get_privacy_spent`, `state_dict`, `load_state_dict`). It is
not one: Flower's accountants compose one Gaussian per round at user level (`GaussianPrivacyEvent`: a noise
multiplier and a sample size), which cannot describe a UeDP round (a user AND an entity, the keyed entity and
extended-entity sampling, truncation at m_max, the entity cap: docs/proofs.md). A round here is a
`RoundRecord` (uedp.privacy.ledger), and every epsilon is computed from the ledger, never accumulated.

What it holds (public, fixed for the run): the mechanism (a registered name, uedp.privacy.mechanisms), the
privacy settings with the automatic cohort cap resolved (privacy.m_max = "auto": `safe_m_max` for N places, q_u,
the planned rounds and delta), N (`num_users`, the public number of places), the planned rounds, the noise
multiplier z, the claims (the adjacencies whose epsilon the run promises: `MechanismSpec.claims_for`) and the
budget (`max_epsilon`: privacy.target_epsilon; None: the run is not stopped). Calibrating z to a target is not its job:
`uedp.privacy.calibration.run_noise_multiplier` (the wrapper's `UserEntityDP.make_private_with_epsilon`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flwr.supercore.privacy_accounting import PrivacySpent

from uedp.checks import positive_int
from uedp.config import PrivacyConfig
from uedp.errors import ConfigError
from uedp.privacy.accounting import safe_m_max
from uedp.privacy.ledger import BudgetCheck, Ledger, RoundRecord
from uedp.privacy.mechanisms import MechanismSpec, get

EPSILON_KEYS = ("eps_uedp", "eps_user", "eps_undetected", "eps_rdp_bound")  # every epsilon a ledger reports


@dataclass(frozen=True)
class ClaimedPrivacySpent(PrivacySpent):
    """Flower's PrivacySpent (`epsilon`: the LARGEST claimed epsilon; one number is all it holds) with each
    claimed epsilon beside it (`claims`: {"eps_uedp": ..., "eps_undetected": ...})."""

    claims: Mapping[str, float] = field(default_factory=dict)


class UeDPAccountant:
    """The accountant of one run (module docstring). `noise_multiplier` is z (0 for a noiseless mechanism);
    `rounds` the rounds planned (the automatic cohort cap is chosen for them)."""

    def __init__(self, mechanism: str = "uedp", privacy: PrivacyConfig | None = None, *, num_users: int,
                 rounds: int, noise_multiplier: float) -> None:
        spec = get(mechanism)
        if spec.local:
            raise ConfigError(f"mechanism {mechanism!r} has no rounds (a local mechanism): there is nothing to account "
                              "round by round")
        for name, value in (("num_users", num_users), ("rounds", rounds)):
            positive_int(name, value)
        privacy = (privacy if privacy is not None else PrivacyConfig()).checked()
        if spec.truncate and privacy.m_max == "auto":  # automatic: truncation charges at most 1% of delta
            privacy = dataclasses.replace(privacy, m_max=safe_m_max(num_users, privacy.q_u, rounds, privacy.delta))
        if isinstance(noise_multiplier, bool) or not isinstance(noise_multiplier, int | float):
            raise ConfigError(f"noise_multiplier must be a number, got {noise_multiplier!r}")
        z = float(noise_multiplier)
        if spec.private and not (z > 0 and math.isfinite(z)):
            raise ConfigError(f"noise_multiplier must be > 0 for the private mechanism {spec.name!r}, got {z!r}")
        self._spec = spec
        self._privacy = privacy
        self._claims = tuple(spec.claims_for(privacy))  # privacy.target_on names epsilons this mechanism claims
        self._num_users = num_users
        self._rounds = rounds
        self._z = z if spec.private else 0.0
        self._ledger = Ledger(delta=privacy.delta, num_users=num_users)

    # -- what it accounts ---------------------------------------------------------------------------------
    @property
    def spec(self) -> MechanismSpec:
        return self._spec

    @property
    def mechanism(self) -> str:
        return self._spec.name

    @property
    def privacy(self) -> PrivacyConfig:
        """The privacy settings (a copy), the automatic cohort cap resolved."""
        return dataclasses.replace(self._privacy)

    @property
    def num_users(self) -> int:
        return self._num_users

    @property
    def rounds(self) -> int:
        """The rounds planned."""
        return self._rounds

    @property
    def noise_multiplier(self) -> float:
        return self._z

    @property
    def claims(self) -> tuple[str, ...]:
        """The adjacencies whose epsilon the run promises ("uedp", "undetected", "user"); () if noiseless."""
        return self._claims if self._spec.private else ()

    @property
    def delta(self) -> float:
        return self._privacy.delta

    @property
    def max_epsilon(self) -> float | None:
        """The budget: privacy.target_epsilon (None: no target, the run is not stopped)."""
        return self._privacy.target_epsilon if self._spec.private else None

    # -- Flower's accountant vocabulary -----------------------------------------------------------------------
    @property
    def num_releases(self) -> int:
        """Rounds charged (released)."""
        return len(self._ledger)

    @property
    def ledger(self) -> Ledger:
        """A copy of the ledger (compose through the accountant, never into the copy)."""
        return self._ledger.copy()

    @property
    def head(self) -> Any:
        """The ledger's head (last round and its hash: uedp.privacy.ledger.Head)."""
        return self._ledger.head

    @property
    def last_round(self) -> int:
        return self._ledger.last_round or 0

    def check(self, record: RoundRecord, max_epsilon: float | None = None) -> BudgetCheck | None:
        """The budget check of charging `record` next (each claimed epsilon after it), against `max_epsilon`
        (default: the accountant's); None when there is no budget or nothing is claimed."""
        target = self.max_epsilon if max_epsilon is None else max_epsilon
        if target is None or not self.claims:
            return None
        return self._ledger.check_budget(record, target_epsilon=target, adjacency=self.claims)

    def would_exceed(self, record: RoundRecord, max_epsilon: float | None = None) -> bool:
        """Whether charging `record` next would take a claimed epsilon past the budget."""
        check = self.check(record, max_epsilon)
        return check is not None and not check.allowed

    def compose(self, record: RoundRecord) -> None:
        """Charge `record` (the next round; the ledger refuses a repeated or skipped round)."""
        if record.rule != self._spec.rule or not math.isclose(record.z, self._z, rel_tol=1e-12, abs_tol=0.0):
            raise ConfigError(f"round {record.round} records rule {record.rule!r} with z = {record.z}; this "
                              f"accountant's mechanism is {self._spec.rule!r} with z = {self._z}")
        self._ledger.append(record)

    def epsilons(self, delta: float | None = None) -> dict[str, Any]:
        """Every epsilon of the ledger (eps_uedp, eps_user, eps_undetected, eps_rdp_bound, the undetected bound's
        name, delta_trunc); {} before the first round or for a noiseless mechanism."""
        if not self._spec.private or not len(self._ledger):
            return {}
        return self._ledger.epsilons(delta)

    def claimed(self, delta: float | None = None) -> dict[str, float]:
        """Each claimed epsilon after the rounds charged ({f"eps_{adjacency}": value})."""
        if not self.claims or not len(self._ledger):
            return {}
        from uedp.privacy.accounting import epsilon_of

        d = self.delta if delta is None else delta
        runs = self._ledger.runs()
        return {f"eps_{c}": epsilon_of(runs, c, delta=d, num_users=self._num_users) for c in self.claims}

    def get_epsilon(self, delta: float | None = None) -> float:
        """The LARGEST claimed epsilon at `delta` (0 before the first round; inf for a noiseless mechanism)."""
        if not self._spec.private:
            return math.inf
        return max(self.claimed(delta).values(), default=0.0)

    def get_privacy_spent(self, delta: float | None = None) -> ClaimedPrivacySpent:
        """Flower's PrivacySpent with each claim beside the largest one (`ClaimedPrivacySpent`)."""
        claims = self.claimed(delta)
        worst = max(claims.values(), default=0.0) if self._spec.private else math.inf
        names = ", ".join(f"eps_{c}" for c in self.claims) or "none (a noiseless mechanism)"
        return ClaimedPrivacySpent(epsilon=worst, delta=self.delta if delta is None else delta,
                                   num_releases=self.num_releases,
                                   accounting_method=f"uedp pld ledger: the largest of {names}", claims=claims)

    def state_dict(self) -> dict[str, Any]:
        """The accountant's state: the ledger's document (ledger.json)."""
        return self._ledger.to_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue a saved ledger (its chain is checked: uedp.privacy.ledger); it must be of this accountant's
        delta, N, rule and z."""
        ledger = Ledger.from_dict(state)
        if not math.isclose(ledger.delta, self.delta, rel_tol=1e-12) or ledger.num_users != self._num_users:
            raise ConfigError(f"the saved ledger has delta={ledger.delta}, num_users={ledger.num_users}; this "
                              f"accountant has delta={self.delta}, num_users={self._num_users}")
        for record in ledger.records:
            if record.rule != self._spec.rule:
                raise ConfigError(f"the saved ledger records {record.rule!r} rounds; this accountant's mechanism is "
                                  f"{self._spec.name!r} ({self._spec.rule!r})")
        self._ledger = ledger

    def save(self, path: Any) -> Any:
        """Write the ledger to `path` (atomic: uedp.privacy.ledger.Ledger.save)."""
        return self._ledger.save(path)

    def __repr__(self) -> str:
        return (f"UeDPAccountant({self._spec.name!r}, N={self._num_users}, rounds={self._rounds}, z={self._z:.6g}, "
                f"claims={list(self.claims)}, charged={self.num_releases})")


def refuse_foreign_accountant(accountant: Any) -> UeDPAccountant:
    """`accountant` if it is UeDP's; TypeError explaining why otherwise (Flower's own accountants, anything else)."""
    if isinstance(accountant, UeDPAccountant):
        return accountant
    raise TypeError(
        f"UserEntityDP takes uedp's own accountant (uedp.flower.UeDPAccountant), got {type(accountant).__name__}: "
        "Flower's accountants (flwr.supercore.privacy_accounting, e.g. RdpAccountant) compose one Gaussian per "
        "round at user level, which cannot account a UeDP round (a user AND an entity, keyed entity sampling, "
        "truncation, the entity cap); UeDPAccountant accounts each round from its ledger record and reports an "
        "epsilon per claim")
