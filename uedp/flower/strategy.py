"""UeDP as a Flower strategy wrapper, run by Flower's own `Strategy.start`.

    dp = UserEntityDP(FedAvg(), places=N, num_rounds=R, privacy=PrivacyConfig(q_u=0.1, beta=0.5, ...),
                      out_dir="outputs/run")
    try:
        result = dp.start(grid, dp.initial_arrays(arrays), dp.rounds_left, train_config=..., evaluate_fn=...)
    except PrivacyBudgetExhausted:
        ...  # a round would have taken a claimed epsilon past the target; dp.arrays is the last release

It is used like Flower's own DP wrappers (`DifferentialPrivacyClientSideFixedClipping(strategy, ...)`), with
the client mod uedp.flower.mod on the ClientApp, but the wrapped strategy's role is the SERVER OPTIMIZER only
(uedp.flower.optimizer: FedAvg applies the released update, FedAdam / FedYogi / FedAdagrad / FedAvgM step
with it). Everything else is UeDP's (docs/mechanism.md, proved in docs/proofs.md):

configure_train (round t):
  budget: before a round that would take a claimed epsilon past `privacy.target_epsilon`, raise Flower's
    `PrivacyBudgetExhausted` (nothing of that round is sampled, sent or charged);
  plan: `plan_round` (uedp.flower.plan) samples the N public places (Poisson, truncation at m_max, slots),
    draws the round key, and instructs each sampled place that a connected node stands in
    (uedp.flower.places): one Message per node with the global arrays, the app's train config (plus
    "server-round") and the round's `RoundInstructions` ("uedp" record). Per-node instructions: Flower's
    FedAvg sends every node the same content and weights replies by "num-examples", which a private
    reply does not carry.
aggregate_train:
  a reply counts only if it answers one of this round's messages, from its node, once (uedp.privacy.replies);
  every counted update is re-checked (shape, finite, norm <= w_max beta: re-clipped or dropped), summed,
  noised with the round's sigma and divided by the public denominator Z (uedp.privacy.aggregation); the
  round is recorded in the ledger and the ledger SAVED, and only then is the update applied (the new global
  arrays exist only after their round is accounted for); a checkpoint every `checkpoint_every` rounds and
  at the last planned round. Returns the new global arrays and the round's counts and claimed epsilons.
configure_evaluate: no message, ever: evaluating on the nodes' private data would be a release outside
  the guarantee (Flower's DP wrappers delegate it to the inner strategy, whose default evaluates on every
  node each round). Evaluate centrally with `start(evaluate_fn=...)` on data that is not the users'.

`privacy_spent()` answers with Flower's PrivacySpent: ONE epsilon, the largest of the claimed ones (UeDP
claims eps_uedp AND eps_undetected: docs/proofs.md Theorems 1-2; user-level DP eps_user); `epsilons()` gives
each of them (and eps_user, eps_rdp_bound) from the ledger, `ledger` is the ledger itself.

Resume (`resume=True` with `out_dir`): the ledger and the last checkpoint are read fail-closed
(uedp.flower.resume); `initial_arrays(default)` gives the checkpoint's arrays, `rounds_left` the rounds still
planned; Flower's start numbers rounds from 1, so the wrapper offsets them by the rounds already charged.

The round key and the training seeds live in a round's plan only, for that round: never logged or stored.
Metrics hold counts, never a per-node number; with `privacy.seed >= 0` the run is a reproduction (keys,
cohorts and noise from the seed) and says so loudly: it is not private.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import secrets
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from uedp.config import PrivacyConfig
from uedp.errors import ConfigError
from uedp.flower.checkpoint import Checkpoint, save_checkpoint
from uedp.flower.optimizer import ServerOptimizer
from uedp.flower.places import Places, SortedNodes
from uedp.flower.plan import MechanismSettings, RoundPlan, plan_round
from uedp.flower.release import release
from uedp.flower.resume import CHECKPOINT_HEAD, LEDGER, Resumed, ResumeError, resume_state
from uedp.privacy.accounting import safe_m_max
from uedp.privacy.aggregation import (
    Aggregator,
    aggregate,
)
from uedp.privacy.aggregation import denominator as public_denominator
from uedp.privacy.calibration import run_noise_multiplier
from uedp.privacy.cohort import Cohort
from uedp.privacy.ledger import Ledger, RoundRecord
from uedp.privacy.mechanisms import MechanismSpec, get
from uedp.privacy.noise import FIXED_SEED_WARNING, NoiseSource, noise_source
from uedp.privacy.replies import stamp
from uedp.protocol import CONFIG_RECORD, INSTRUCTIONS_RECORD, RoundInstructions

try:  # Flower >= 1.35: the exception its own DP wrappers raise, which its ServerApp reports as unmet precondition
    from flwr.serverapp.exception import PrivacyBudgetExhausted
except ImportError:  # pragma: no cover - not within the supported range (flwr >= 1.38), kept for a clear import
    class PrivacyBudgetExhausted(Exception):  # type: ignore[no-redef]
        """Raised before a release would exceed the privacy budget."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundReport:
    """What the last aggregated round released for the operator: its counts (`metrics`), the ledger's head hash
    after it, and its wall time (from configure_train to the new global arrays; its claimed epsilons:
    `UserEntityDP.claimed_epsilons()`)."""

    round: int
    metrics: dict[str, float]
    ledger_hash: str
    seconds: float


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


@dataclass
class _Pending:
    sent: RoundMessages
    arrays: ArrayRecord
    config: ConfigRecord
    started: float


def _rng(seed: int) -> random.Random:
    return random.Random(seed) if seed >= 0 else secrets.SystemRandom()


class UserEntityDP(Strategy):
    """UeDP around a server-optimizer strategy (module docstring).

    strategy         the server optimizer (uedp.flower.optimizer: FedAvg, FedAdam, ... or `apply_update`)
    places           N, the public number of places (an int: the connected nodes, sorted, fill them), or a
                     `Places` map (uedp.flower.places.KeyedPlaces: places by registered public key)
    num_rounds       the rounds planned (calibration spends the target over them; m_max = 0 is chosen for them)
    mechanism        a registered mechanism: uedp, uedp_naive, uedp_split, user_dp, fedavg, deid, deid_dp
    privacy          uedp.config.PrivacyConfig: q_u, q_e, q_s, m_max, k_cap, beta, w_max, target_epsilon,
                     target_on, noise_multiplier (used when target_epsilon is 0), gamma, delta, seed, noise
    out_dir          where ledger.json (saved each round before the model is released) and checkpoint.pt go;
                     required for a private mechanism
    checkpoint_every a checkpoint every this many rounds (and at the last planned round); 0: none
    resume           continue the ledger and checkpoint in out_dir (fail-closed)
    noise_multiplier use exactly this z (no calibration); None: privacy.noise_multiplier or calibrated
    noise, aggregator  injected parts (the audit's broken controls); None / the sound aggregation by default
    denominator      the public Z (None: q_u N); a data-derived Z is outside the proof: the caller labels it
    extra_records    records every training message carries (the project's owners mode: its tokenizer)
    stream           where the set-up and resume lines are printed (None: the log)
    round_period     seconds between the starts of consecutive rounds, from the first (a public schedule: the
                     rounds' timing then depends on no one's data or presence; it must exceed the start's
                     timeout); 0: back to back, and the timing is outside the guarantee (docs/proofs.md
                     section 1, "Timing")
    """

    def __init__(
        self,
        strategy: Any,
        *,
        places: int | Places,
        num_rounds: int,
        mechanism: str = "uedp",
        privacy: PrivacyConfig | None = None,
        out_dir: str | Path | None = None,
        checkpoint_every: int = 0,
        resume: bool = False,
        noise_multiplier: float | None = None,
        noise: NoiseSource | None = None,
        aggregator: Aggregator = aggregate,
        denominator: float | None = None,
        extra_records: Mapping[str, Any] | None = None,
        stream: TextIO | None = None,
        round_period: float = 0.0,
    ) -> None:
        self.spec: MechanismSpec = get(mechanism)
        if self.spec.local:
            raise ConfigError(f"mechanism {mechanism!r} has no rounds (a local mechanism): it cannot wrap a strategy")
        self.places: Places = SortedNodes(places) if isinstance(places, int) else places
        if isinstance(num_rounds, bool) or not isinstance(num_rounds, int) or num_rounds < 1:
            raise ConfigError(f"num_rounds must be a positive integer, got {num_rounds!r}")
        if not (isinstance(round_period, int | float) and round_period >= 0 and math.isfinite(round_period)):
            raise ConfigError(f"round_period must be a number of seconds >= 0, got {round_period!r}")
        if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 0:
            raise ConfigError(f"checkpoint_every must be an integer >= 0, got {checkpoint_every!r}")
        privacy = dataclasses.replace(privacy) if privacy is not None else PrivacyConfig()
        privacy.validate()
        self.spec.claims_for(privacy)  # privacy.target_on names epsilons this mechanism claims
        if self.spec.private and out_dir is None:
            raise ConfigError("out_dir: a private run writes its privacy ledger there before each round's model "
                              "is released")
        if resume and out_dir is None:
            raise ConfigError("resume needs out_dir, where the ledger and checkpoint are")
        self.optimizer = ServerOptimizer.of(strategy)
        self.inner = strategy
        self.num_rounds = num_rounds
        self.out = Path(out_dir) if out_dir is not None else None
        self.checkpoint_every = checkpoint_every
        self.round_period = float(round_period)
        self.schedule_overruns = 0  # rounds that started after their scheduled time (round_period > 0)
        self._schedule_start: float | None = None
        self.stream = stream
        self.aggregator = aggregator
        self.extra_records = {k: v if isinstance(v, ConfigRecord) else ConfigRecord(dict(v))
                              for k, v in (extra_records or {}).items()}
        n = self.places.size
        if self.spec.truncate and privacy.m_max == 0:  # automatic: truncation charges at most 1% of delta
            privacy = dataclasses.replace(privacy, m_max=safe_m_max(n, privacy.q_u, num_rounds, privacy.delta))
        self.privacy = privacy
        self.claims = self.spec.claims_for(privacy)
        seeded = privacy.seed >= 0
        if seeded:
            self._say(f"WARNING: {FIXED_SEED_WARNING} (privacy.seed={privacy.seed}); this run is for reproduction "
                      "only: its round keys, cohorts and noise come from the seed")
        self.noise = noise or noise_source(seed=privacy.seed if seeded else None, choice=privacy.noise)
        self.rng = _rng(privacy.seed)
        self.resumed: Resumed | None = None
        if resume and self.out is not None:
            self.resumed = resume_state(self.out, delta=privacy.delta, num_users=n)
            last = self.resumed.ledger.records[-1] if len(self.resumed.ledger) else None
            if last is not None and last.rule != self.spec.rule:
                raise ResumeError(f"cannot resume in {self.out}: its ledger records {last.rule!r} rounds, this run "
                                  f"is {self.spec.name!r} ({self.spec.rule!r})")
        z = self._noise_multiplier(noise_multiplier)
        q_e, q_s = self.spec.rates(privacy)
        if not self.spec.private:
            z_denominator = 1.0
        elif denominator is not None:
            z_denominator = float(denominator)
        else:
            z_denominator = public_denominator(self.spec.rule, q_u=privacy.q_u, num_users=n)
        self.settings = MechanismSettings(
            spec=self.spec, places=n, q_u=privacy.q_u, q_e=q_e, q_s=q_s, m_max=self.spec.m_max(privacy),
            k_cap=self.spec.k_cap(privacy), m_max_sent=privacy.m_max, beta=privacy.beta, w_max=privacy.w_max,
            gamma=self.spec.gamma(privacy), z=z if self.spec.private else 0.0, denominator=z_denominator,
            noise=getattr(self.noise, "mode", "unrecorded") if self.spec.private else "none", seeded=seeded,
        )
        self.ledger = Ledger(delta=privacy.delta, num_users=n)
        self.offset = 0
        self._start_arrays: ArrayRecord | None = None
        if self.resumed is not None:
            self.resumed.check_z(self.settings.z)
            self.ledger = self.resumed.ledger
            self.offset = self.ledger.last_round or 0
            ckpt = self.resumed.checkpoint
            if ckpt is not None:
                self._start_arrays = ArrayRecord({k: Array(np.asarray(v)) for k, v in ckpt.arrays.items()})
                self.optimizer.load_state_dict(ckpt.optimizer_state)
            for path in self.resumed.temporaries_removed:
                self._say(f"removed {path.name}, the temporary of a write that was killed before its rename")
            lost = self.offset - (ckpt.round if ckpt else 0)
            self._say(f"resuming after round {self.offset} (checkpoint of round {ckpt.round if ckpt else 0}; {lost} "
                      "round(s) after it stay charged; z from the ledger)")
        self.arrays: ArrayRecord | None = None  # the last global arrays released (or the start)
        self.model_round = self.checkpoint_round  # the round after which `arrays` were released (0: the start)
        self.last_round: RoundReport | None = None
        self.eps: dict[str, float] = {}  # the claimed epsilons after `_eps_rounds` rounds (claimed_epsilons)
        self._eps_rounds = -1
        self._pending: dict[int, _Pending] = {}
        self._template: list[np.ndarray] | None = None
        self._ignored = 0
        self._eps_after: dict[str, float] | None = None  # the budget check's claimed epsilons after the round

    @classmethod
    def from_run_config(cls, strategy: Any, run_config: Mapping[str, Any], *, places: int | Places,
                        num_rounds: int, out_dir: str | Path, **options: Any) -> UserEntityDP:
        """The wrapper as a Flower run config sets it: the mechanism (`uedp.strategy.name`, and
        `uedp.strategy.estimator` for UeDP) and the privacy settings (`uedp.privacy.*`) from the run config's
        `uedp.` keys (uedp.config.RunConfig.from_run_config: an app's own keys pass through, an unknown key
        inside the namespace is refused, naming it); `options`: the constructor's other keyword options."""
        from uedp.config import RunConfig
        from uedp.privacy.mechanisms import spec_for

        cfg = RunConfig.from_run_config(run_config)
        mechanism = spec_for(cfg.strategy.name, cfg.strategy.estimator).name
        return cls(strategy, places=places, num_rounds=num_rounds, mechanism=mechanism, privacy=cfg.privacy,
                   out_dir=out_dir, **options)

    # -- set-up --------------------------------------------------------------------------------------
    def _say(self, line: str) -> None:
        if self.stream is not None:
            print(line, file=self.stream, flush=True)
        else:
            log.warning(line) if line.startswith("WARNING") else log.info(line)

    def _noise_multiplier(self, given: float | None) -> float:
        """The run's z: `given`; a resumed run's recorded z; otherwise the privacy settings' (calibrated to the
        target over num_rounds: uedp.privacy.calibration.run_noise_multiplier)."""
        if not self.spec.private:
            return 0.0
        if given is not None:  # a resumed run checks it against its recorded z (Resumed.check_z)
            return float(given)
        if self.resumed is not None and self.resumed.z is not None:
            return self.resumed.z
        return run_noise_multiplier(self.spec, self.privacy, rounds=self.num_rounds, num_users=self.places.size)

    @property
    def z(self) -> float:
        """The run's noise multiplier (0 for a noiseless mechanism)."""
        return self.settings.z

    @property
    def sigma(self) -> float:
        return self.settings.sigma

    @property
    def denominator(self) -> float:
        """The public denominator, Z of docs/mechanism.md step 8 (summary.json's key "Z"); NaN for a noiseless
        mechanism, which divides by its valid replies."""
        return self.settings.denominator if self.spec.private else math.nan

    @property
    def rounds_left(self) -> int:
        """Rounds still planned: what to pass to `start` (num_rounds less the rounds a resumed ledger holds)."""
        return max(0, self.num_rounds - self.offset)

    @property
    def checkpoint_round(self) -> int:
        """The round of the checkpoint a resumed run starts from (0: none)."""
        ckpt = self.resumed.checkpoint if self.resumed is not None else None
        return ckpt.round if ckpt is not None else 0

    def initial_arrays(self, default: ArrayRecord) -> ArrayRecord:
        """The arrays `start` begins from: a resumed run's checkpoint, else `default`."""
        start = self._start_arrays if self._start_arrays is not None else default
        self.arrays = start
        return start

    def round_record(self, server_round: int) -> RoundRecord:
        """The ledger record of round `server_round` (in the ledger's numbering)."""
        return self.settings.record(server_round)

    # -- accounting ------------------------------------------------------------------------------------
    def epsilons(self) -> dict[str, Any]:
        """Every epsilon of the ledger (eps_uedp, eps_user, eps_undetected, eps_rdp_bound, ...); {} if no round
        ran or the mechanism is noiseless."""
        return self.ledger.epsilons() if self.spec.private and len(self.ledger) else {}

    def privacy_spent(self) -> Any:
        """Flower's PrivacySpent: the LARGEST claimed epsilon (its `accounting_method` names the claims and
        where each one is: `epsilons()`); None for a noiseless mechanism."""
        if not self.spec.private:
            return None
        from flwr.supercore.privacy_accounting import PrivacySpent

        eps = self.epsilons()
        worst = max((float(eps[f"eps_{c}"]) for c in self.claims), default=0.0)
        return PrivacySpent(epsilon=worst, delta=self.privacy.delta, num_releases=len(self.ledger),
                            accounting_method=f"uedp pld: max of {', '.join(f'eps_{c}' for c in self.claims)} "
                                              "(UserEntityDP.epsilons() has each)")

    # -- Strategy API ----------------------------------------------------------------------------------
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> RoundMessages:
        rnd = self.offset + server_round
        self._keep_schedule(server_round)
        started = time.monotonic()
        if rnd in self._pending:
            raise RuntimeError(f"round {rnd} is configured already and not aggregated: a round is configured once")
        record = self.round_record(rnd)
        p = self.privacy
        if self.spec.private and p.target_epsilon > 0:
            check = self.ledger.check_budget(record, target_epsilon=p.target_epsilon, adjacency=self.claims)
            self._eps_after = check.epsilons_after
            if not check.allowed:
                over = ", ".join(f"eps_{k} to {check.epsilons_after[k]:.4f}" for k in check.exceeded)
                raise PrivacyBudgetExhausted(f"round {rnd} would take {over} > target {p.target_epsilon}")
        else:
            self._eps_after = None
        if self._template is None:
            self._template = [np.zeros_like(a.numpy()) for a in arrays.values()]
        assignment = self.places.assign(grid)
        if assignment.ignored != self._ignored:
            self._ignored = assignment.ignored
            if assignment.ignored:
                self._say(f"{assignment.ignored} connected node(s) stand in none of the {self.places.size} places "
                          "and are never sent a message")
        plan = plan_round(rnd, settings=self.settings, record=record, assignment=assignment, rng=self.rng)
        train_config = ConfigRecord({**dict(config or {}), "server-round": rnd})
        messages = []
        for item in plan:
            content = RecordDict({"arrays": arrays, CONFIG_RECORD: train_config,
                                  INSTRUCTIONS_RECORD: item.instructions.to_record(), **self.extra_records})
            messages.append(stamp(Message(content, dst_node_id=item.node_id, message_type="train",
                                          group_id=str(rnd))))
        sent = RoundMessages(plan, tuple(messages))
        self._pending[rnd] = _Pending(sent, arrays, train_config, started)
        return sent

    def _keep_schedule(self, server_round: int) -> None:
        """With round_period > 0, wait until this round's public start: the first round's start plus
        (server_round - 1) periods. A round that is late (the server was slower than the period) starts at
        once and is counted: its start time may then depend on the previous round (stated in the summary)."""
        if self.round_period <= 0:
            return
        now = time.monotonic()
        if self._schedule_start is None:
            self._schedule_start = now
        due = self._schedule_start + (server_round - 1) * self.round_period
        if now > due + 1.0:
            self.schedule_overruns += 1
            self._say(f"WARNING: round {self.offset + server_round} starts {now - due:.1f} s after its scheduled "
                      "time (federation.round_period is too short for this server): its timing is outside the "
                      "guarantee")
        elif now < due:
            time.sleep(due - now)

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        rnd = self.offset + server_round
        if rnd not in self._pending or self._template is None:
            raise RuntimeError(f"round {rnd} has no plan: configure_train comes first, and a round is aggregated once")
        expected = (self.ledger.last_round or 0) + 1
        if rnd != expected:  # the ledger's rounds are contiguous: a round is charged after the one before it
            raise RuntimeError(f"round {rnd} cannot be aggregated before round {expected}")
        pending = self._pending.pop(rnd)  # taken back: a plan serves its own round, once
        update, metrics = release(pending.sent.plan, pending.sent.messages, replies, settings=self.settings,
                                  template=self._template, aggregator=self.aggregator, noise=self.noise)
        # Account for the round BEFORE the new global arrays exist anywhere.
        self.ledger.append(pending.sent.record)
        if self.out is not None:
            self.ledger.save(self.out / LEDGER)
        new = self.optimizer.apply(rnd, pending.arrays, update, pending.config)
        self.arrays, self.model_round = new, rnd
        seconds = time.monotonic() - pending.started  # the round: configure, replies, release, ledger, update
        if rnd == self.num_rounds or (self.checkpoint_every and rnd % self.checkpoint_every == 0):
            self.save_checkpoint(rnd, new)
        self.last_round = RoundReport(rnd, metrics, self.ledger.head.hash, seconds)
        if self.spec.private and self._eps_after is not None:  # the budget check computed them already
            self.eps = {f"eps_{k}": float(v) for k, v in self._eps_after.items()}
            self._eps_rounds = len(self.ledger)
        return new, MetricRecord({**metrics, **self.claimed_epsilons()})  # every private round carries them

    def claimed_epsilons(self) -> dict[str, float]:
        """The claimed epsilons after the rounds run ({f"eps_{adjacency}": value}; {} for a noiseless mechanism):
        the budget check's, or computed from the ledger once per round (after the round's own time is taken)."""
        if not self.spec.private or not len(self.ledger):
            return {}
        if self._eps_rounds != len(self.ledger):
            from uedp.privacy.accounting import epsilon

            self.eps = {f"eps_{k}": epsilon(k, self.ledger.groups(), delta=self.privacy.delta,
                                            num_users=self.places.size) for k in self.claims}
            self._eps_rounds = len(self.ledger)
        return dict(self.eps)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return []  # never: the nodes' data is private (module docstring); evaluate centrally (evaluate_fn)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return None

    def summary(self) -> None:
        p, s = self.privacy, self.settings
        self._say(f"{self.spec.name} ({self.spec.rule}): z={s.z:.4f} sigma={s.sigma:.4g} "
                  f"Z={self.denominator:.4g} places={s.places} q_u={p.q_u} q_e={s.q_e} q_s={s.q_s} "
                  f"m_max={s.m_max} k_cap={s.k_cap} beta={p.beta} rounds={self.num_rounds}; "
                  f"server optimizer: {type(self.inner).__name__}")

    # -- checkpoints -----------------------------------------------------------------------------------
    def save_checkpoint(self, rnd: int, arrays: ArrayRecord) -> None:
        """checkpoint.pt in out_dir: the global arrays after round `rnd`, the server optimizer's state, a copy
        of the ledger, z and the ledger's head (after the ledger is saved: uedp.flower.resume)."""
        if self.out is None:
            return
        save_checkpoint(self.out, Checkpoint(
            rnd, {k: a.numpy() for k, a in arrays.items()}, self.optimizer.state_dict(), self.ledger.to_dict(),
            {"z": self.z, CHECKPOINT_HEAD: self.ledger.head.to_dict()}))

