"""The mechanism specs: one frozen description per training mechanism, in one registry.

A `MechanismSpec` says everything the rest of the code needs to know about a mechanism, so that no module
keeps its own list of mechanism names:

    config        strategy.name (+ strategy.estimator for UeDP) picks the spec: `spec_for(strategy, estimator)`
    strategy      cohort truncation at m_max, slots for the entity cap, round key, noise or plain mean
    accountant    `rule` (the accounting rule: uedp.privacy.sensitivity.RULES, the round's `RoundRecord.rule`,
                  recorded in ledger.json under the key "method") and the sampling rates `rates(privacy)` it
                  is accounted with
    client        `keyed` (entity sampling by the round key, with the rates' q_e and q_s: q_s = 0 means no
                  extended entity), `deidentify` (entities replaced by placeholders before training)
    budget check  `adjacency`: the mechanism's adjacency ("uedp" or "user": `MECHANISM_ADJACENCIES`, those of
                  uedp.privacy.accounting.ADJACENCIES a mechanism is built for), None for the non-private
                  baselines; `claims`: every epsilon the run promises, calibrates to and stops on (UeDP:
                  eps_uedp AND eps_undetected; user-level DP: eps_user), `claims_for(privacy)` the subset
                  privacy.target_on names
    summary.json  `summary_method`: what the run's summary records as its "method" (the accounting rule of
                  its rounds for a central mechanism; a local mechanism, which has no rounds, its own name);
                  `summary_methods()` is every value it can take
    audit         `audited`: the crafted-update audit's exact law (uedp.audit.mechanism) is written for it; the
                  audit reads truncation, cap, keying, rates and claims from the spec

The sampling-rate rule (which q_e and q_s a round is accounted with) is written once, in
`sampling_rates`; the ledger's records are validated against it too (uedp.privacy.accounting).

Adding a mechanism: one `register(MechanismSpec(...))` below. Its name is what the server sends to the
client (uedp.protocol), its `strategy`/`estimator` what the config says, and a Hydra preset
`strategy=<name>` is generated from it (runtime/hydra_job.py). A new accounting rule also needs its case in
uedp.privacy.sensitivity. A local mechanism names its `summary_method` (refused at registration otherwise);
the crafted-update audit covers a mechanism only if it sets `audited` (its law must then hold for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from uedp.config_values import AUTO
from uedp.errors import ConfigError
from uedp.privacy.sensitivity import RULES

ESTIMATORS = ("f_E+", "f_E")  # UeDP's estimators (config strategy.estimator): with / without extended entities
# the adjacency a mechanism is built for (uedp.privacy.accounting.ADJACENCIES: "undetected" is claimed with
# "uedp", never alone)
MECHANISM_ADJACENCIES = ("uedp", "user")


class PrivacyParams(Protocol):
    """What a spec reads from the run's privacy settings (uedp.config.PrivacyConfig)."""

    q_e: float
    q_s: float
    m_max: int | str  # "auto": not resolved yet
    k_cap: int | None
    target_on: str
    gamma: float | str  # "auto": from k_cap, beta and m_max
    beta: float


def sampling_rates(rule: str, *, q_e: float, q_s: float) -> tuple[float, float]:
    """(q_e, q_s) a round of this accounting rule is accounted with: a mechanism that uses every sentence
    of a sampled user samples no entity (1, 1); the naive f_E never uses extended entities (q_s = 0)."""
    if rule not in RULES:
        raise ConfigError(f"accounting rule must be one of {', '.join(RULES)}, got {rule!r}")
    if rule in ("user_dp", "noiseless"):
        return 1.0, 1.0
    if rule == "uedp_naive":
        return float(q_e), 0.0
    return float(q_e), float(q_s)  # uedp, uedp_split


@dataclass(frozen=True)
class MechanismSpec:
    name: str  # unique; sent to clients in the training message
    strategy: str  # config strategy.name
    estimator: str | None  # config strategy.estimator this spec answers (None: the estimator is not used)
    rule: str  # the accounting rule (uedp.privacy.sensitivity.RULES); RoundRecord.rule, ledger.json's "method"
    adjacency: str | None  # the adjacency of the promised epsilon ("uedp" | "user"); None: no guarantee
    keyed: bool  # clients select sentences by keyed-hash entity sampling (a round key is sent)
    truncate: bool  # the cohort is truncated at m_max (the sensitivities assume it)
    entity_cap: bool  # slots are assigned when privacy.k_cap > 0
    deidentify: bool = False  # clients replace detected protected entities by placeholders
    local: bool = False  # no rounds: clients rewrite their text under local DP once (server/local_dp.py)
    split: bool = False  # clients return the entity-free part (clip beta) and the entity part (clip gamma)
    aliases: tuple[str, ...] = ()  # extra names of its Hydra preset (strategy=<alias>)
    description: str = ""
    # summary.json's "method": the accounting rule (the default) for a central mechanism, its own name
    # for a local one (no rounds, no ledger)
    summary_method: str = ""
    audited: bool = False  # the crafted-update audit (uedp.audit.mechanism) covers it

    def __post_init__(self) -> None:
        object.__setattr__(self, "summary_method", self.summary_method or self.rule)
        if self.rule not in RULES:
            raise ValueError(f"{self.name}: the accounting rule must be one of {RULES}, got {self.rule!r}")
        if self.adjacency not in (*MECHANISM_ADJACENCIES, None):
            raise ValueError(f"{self.name}: adjacency must be one of {MECHANISM_ADJACENCIES} or None, got "
                             f"{self.adjacency!r}")
        if (self.adjacency is None) != (self.rule == "noiseless"):
            raise ValueError(f"{self.name}: exactly the noiseless mechanisms claim nothing")
        if self.entity_cap and not self.keyed:
            raise ValueError(f"{self.name}: the entity cap needs keyed entity sampling")
        if self.estimator is not None and self.estimator not in ESTIMATORS:
            raise ValueError(f"{self.name}: estimator must be one of {ESTIMATORS} or None")
        if self.split != (self.rule == "uedp_split") or (self.split and (self.entity_cap or not self.keyed)):
            raise ValueError(f"{self.name}: a split update is keyed, has no slots, and is accounted as uedp_split")
        if self.local == (self.summary_method in RULES) or (
                not self.local and self.summary_method != self.rule):
            raise ValueError(f"{self.name}: a central mechanism's summary method is its accounting rule "
                             f"({self.rule!r}), a local one's a name of its own (not one of {RULES}); "
                             f"got {self.summary_method!r}")
        if self.audited and (self.local or self.split or not self.private
                             or not self.truncate == self.keyed == self.entity_cap):
            raise ValueError(f"{self.name}: the audit's law covers central, unsplit, private mechanisms, "
                             "truncated, keyed and capped or none of these")

    @property
    def private(self) -> bool:
        """Noise, clipping and a claimed epsilon (False for the noiseless baselines)."""
        return self.adjacency is not None

    @property
    def claims(self) -> tuple[str, ...]:
        """Every epsilon the mechanism promises (uedp.privacy.accounting adjacencies): UeDP's user-entity epsilon
        and its undetected-entity epsilon (docs/proofs.md Theorem 2); user-level DP's user epsilon."""
        if self.adjacency is None:
            return ()
        return ("uedp", "undetected") if self.adjacency == "uedp" else (self.adjacency,)

    def claims_for(self, privacy: PrivacyParams) -> tuple[str, ...]:
        """The claimed epsilons privacy.target_epsilon bounds: privacy.target_on ("" = all of `claims`)."""
        named = tuple(dict.fromkeys(x.strip() for x in privacy.target_on.split(",") if x.strip()))
        if not named:
            return self.claims
        wrong = [x for x in named if x not in self.claims]
        if wrong:
            raise ConfigError(f"privacy.target_on = {privacy.target_on!r}: {self.name} claims "
                              f"{', '.join(self.claims) or 'no epsilon'}, not {', '.join(wrong)}")
        return named

    def rates(self, privacy: PrivacyParams) -> tuple[float, float]:
        """(q_e, q_s) of this mechanism's rounds: what clients are told and what the ledger records."""
        return sampling_rates(self.rule, q_e=privacy.q_e, q_s=privacy.q_s)

    def gamma(self, privacy: PrivacyParams) -> float:
        """The entity part's clip of a split update (0 for every other mechanism): privacy.gamma, or
        (privacy.gamma = "auto") max(k_cap, 1) * beta / m_max, the entity budget of the slot rule: the same s_e =
        2 k_cap w_max beta, spread over every usable entity sentence of every sampled client."""
        if not self.split:
            return 0.0
        if privacy.gamma != AUTO and privacy.gamma > 0:
            return float(privacy.gamma)
        if privacy.m_max == AUTO or privacy.m_max < 1:
            raise ConfigError('the automatic gamma needs m_max (resolved from privacy.m_max = "auto" by the server)')
        return max(privacy.k_cap or 0, 1) * privacy.beta / privacy.m_max

    def k_cap(self, privacy: PrivacyParams) -> int | None:
        """The entity cap in force (None: off)."""
        return privacy.k_cap if (self.entity_cap and privacy.k_cap) else None

    def m_max(self, privacy: PrivacyParams) -> int | None:
        """The cohort truncation in force (None: plain Poisson sampling)."""
        return privacy.m_max if self.truncate else None


_SPECS: dict[str, MechanismSpec] = {}
_BY_CONFIG: dict[tuple[str, str | None], MechanismSpec] = {}


def register(spec: MechanismSpec) -> MechanismSpec:
    key = (spec.strategy, spec.estimator)
    if spec.name in _SPECS or key in _BY_CONFIG:
        raise ValueError(f"mechanism {spec.name!r} (strategy {key}) is registered twice")
    _SPECS[spec.name] = spec
    _BY_CONFIG[key] = spec
    return spec


def get(name: str) -> MechanismSpec:
    """The spec of this name (as sent in a training message)."""
    try:
        return _SPECS[name]
    except KeyError:
        raise ConfigError(f"unknown mechanism {name!r}; known: {', '.join(_SPECS)}") from None


def specs() -> tuple[MechanismSpec, ...]:
    """Every registered spec, in registration order."""
    return tuple(_SPECS.values())


def summary_methods() -> tuple[str, ...]:
    """Every value summary.json's "method" can take (a registered spec's `summary_method`), in registration
    order."""
    return tuple(dict.fromkeys(s.summary_method for s in _SPECS.values()))


def audited_spec(name: str) -> MechanismSpec:
    """The spec of this name, which the crafted-update audit must cover (ConfigError otherwise)."""
    spec = get(name)
    if not spec.audited:
        raise ConfigError(f"the crafted-update audit does not cover mechanism {name!r}; it covers "
                          f"{', '.join(s.name for s in _SPECS.values() if s.audited)}")
    return spec


def strategies() -> tuple[str, ...]:
    """The values config strategy.name accepts."""
    return tuple(dict.fromkeys(s for s, _ in _BY_CONFIG))


def spec_for(strategy: str, estimator: str) -> MechanismSpec:
    """The spec the configuration selects (strategy.name, strategy.estimator)."""
    if estimator not in ESTIMATORS:
        raise ConfigError(f"strategy.estimator must be one of {', '.join(ESTIMATORS)}, got {estimator!r}")
    spec = _BY_CONFIG.get((strategy, estimator)) or _BY_CONFIG.get((strategy, None))
    if spec is None:
        raise ConfigError(f"strategy.name must be one of {', '.join(strategies())}, got {strategy!r}")
    return spec


register(MechanismSpec(
    name="uedp", strategy="uedp", estimator="f_E+", rule="uedp", adjacency="uedp", keyed=True,
    truncate=True, entity_cap=True, audited=True,
    description="UeDP-Alg (f_E+): sentences whose entities are all sampled, plus sampled extended entities",
))
register(MechanismSpec(
    name="uedp_naive", strategy="uedp", estimator="f_E", rule="uedp_naive", adjacency="uedp", keyed=True,
    truncate=True, entity_cap=True,
    description="UeDP with the naive estimator f_E: extended entities are never used (q_s = 0)",
))
register(MechanismSpec(
    name="uedp_split", strategy="uedp_split", estimator=None, rule="uedp_split", adjacency="uedp", keyed=True,
    truncate=True, entity_cap=False, split=True,
    description="UeDP with a split update: entity-free sentences (S sampled) clipped to beta, sentences whose "
                "entities are all sampled clipped to gamma, no slot rule (docs/proofs.md Theorem 3)",
))
register(MechanismSpec(
    name="user_dp", strategy="user_dp", estimator=None, rule="user_dp", adjacency="user", keyed=False,
    truncate=False, entity_cap=False, audited=True,
    description="user-level DP (DP-FedAvg, estimator f_f): every sentence of a Poisson-sampled user",
))
register(MechanismSpec(
    name="fedavg", strategy="fedavg", estimator=None, rule="noiseless", adjacency=None, keyed=False,
    truncate=False, entity_cap=False, aliases=("noiseless",),
    description="noiseless FedAvg: unclipped, mean of the replies; no guarantee (the utility reference)",
))
register(MechanismSpec(
    name="deid", strategy="deid", estimator=None, rule="noiseless", adjacency=None, keyed=False,
    truncate=False, entity_cap=False, deidentify=True,
    description="de-identification: FedAvg on text with detected entities replaced by [CATEGORY]; no guarantee",
))
register(MechanismSpec(
    # the crafted-update audit sends crafted updates, never text: its law and result for this spec are
    # user_dp's exactly, so its evidence is user_dp's rows and `audited` stays False (no duplicate name in
    # uedp.audit.scenario.METHODS)
    name="deid_dp", strategy="deid_dp", estimator=None, rule="user_dp", adjacency="user", keyed=False,
    truncate=False, entity_cap=False, deidentify=True,
    description="de-identification + user-level DP: DP-FedAvg (as user_dp: every sentence of a Poisson-sampled "
                "user, one clip, Gaussian noise; claims eps_user) on text with detected entities replaced by "
                "[CATEGORY]; the guarantee is user_dp's exactly (a neighbour removes a user, de-identified text "
                "and all), de-identification changes only what the model sees",
))
register(MechanismSpec(
    name="dp_bart", strategy="dp_bart", estimator=None, rule="noiseless", adjacency=None, keyed=False,
    truncate=False, entity_cap=False, local=True, summary_method="local_dp",
    description="DP-BART: each client rewrites its sentences under local DP (rewrite.*), the server trains on "
                "the rewrites; no central claim, a local one per document (docs/dp-bart-system.md)",
))
