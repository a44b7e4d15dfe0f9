"""UeDP as a Flower strategy wrapper, run by Flower's own `Strategy.start`.

    accountant = UeDPAccountant("uedp", PrivacyConfig(q_u=0.1, beta=0.5, target_epsilon=8), num_users=N,
                                rounds=R, noise_multiplier=1.1)
    dp = UserEntityDP(FedAvg(), places=N, accountant=accountant, store=RunStore("outputs/run"))
    # or calibrated to the target (uedp.privacy.calibration), as Opacus's make_private_with_epsilon:
    dp = UserEntityDP.make_private_with_epsilon(FedAvg(), places=N, num_rounds=R, privacy=..., store=...)
    try:
        result = dp.start(grid, dp.initial_arrays(arrays), dp.rounds_left, train_config=..., evaluate_fn=...)
    except PrivacyBudgetExhausted:
        ...  # a round would have taken a claimed epsilon past the target; dp.report.arrays is the last release

It is used like Flower's own DP wrappers (`DifferentialPrivacyClientSideFixedClipping(strategy, ...,
accountant=...)`), with the client mod uedp.flower.mod on the ClientApp, but the wrapped strategy's role is the
SERVER OPTIMIZER only (uedp.flower.optimizer: FedAvg applies the released update, FedAdam / FedYogi /
FedAdagrad / FedAvgM step with it). Everything else is UeDP's (docs/mechanism.md, proved in docs/proofs.md):

start (before any budget is spent), `preflight` (uedp.flower.preflight):
  places: an int N (SortedNodes) is refused on a deployment's grid (uedp.flower.places); on a simulation's
    grid the wrapper waits for the nodes to register and refuses more places than nodes;
  client mod: on a deployment's grid the app bundle's ClientApp must mount `uedp_mod`, read from the bundle
    (uedp.flower.bundle: the same whoever is connected); on a simulation's, every node that stands in a place
    is sent one probe (uedp.protocol), which the mod answers itself; answers of which none carries the marker
    refuse the run, naming `uedp_mod`; silence (and the SuperLink's error reply for a node) decides nothing;
  a round_period: the period must exceed the timeout, the grid's margin and 1.25 times the server's
    worst-case work and `evaluate_fn` (measured before round 1), or the run is refused. Each round then waits
    for its replies until its public deadline and releases at a public time (uedp.flower.schedule:
    `ScheduledGrid`, `RoundSchedule.hold_release`).
configure_train (round t):
  budget: before a round that would take a claimed epsilon past the target, raise Flower's
    `PrivacyBudgetExhausted` (nothing of that round is sampled, sent or charged);
  plan: `plan_round` (uedp.flower.plan) samples the N public places (Poisson, truncation at m_max, slots),
    draws the round key, and instructs each sampled place that a connected node stands in: one Message per
    node with the global arrays, the app's train config (plus "server-round"; its "lr" the round's when it
    carries an lr schedule: uedp.config.ClientTrainConfig.for_round) and the round's
    `RoundInstructions` ("uedp" record).
aggregate_train:
  a reply counts only if it answers one of this round's messages, from its node, once (uedp.privacy.replies);
  every counted update is re-checked, summed, noised with the round's sigma and divided by the public
  denominator Z (uedp.flower.release); the round is charged to the accountant and the ledger SAVED, and only
  then is the update applied; a checkpoint every `checkpoint_every` rounds and at the last planned round.
  Returns the new global arrays and a MetricRecord of PUBLIC values only: the round and the claimed
  epsilons (a noiseless mechanism, which has no guarantee to keep, also returns the counts). The round's
  counts (sampled, replies, missing, failed, ...), its seconds and whether it started late go to the store's
  operator log (uedp.flower.store), never to the ServerApp's output: Flower's `start` logs every MetricRecord,
  and `flwr log` hands the ServerApp's output to whoever ran `flwr run`.
configure_evaluate: no message, ever (evaluating on the nodes' private data would be a release outside the
  guarantee). Evaluate centrally with `start(evaluate_fn=...)` on data that is not the users'.

Where today's options went (the constructor takes 7): the mechanism, its privacy settings, N, the planned
rounds and the noise multiplier are the ACCOUNTANT's (uedp.privacy.accountant.UeDPAccountant, which also holds
the ledger and the claims); out_dir, checkpoint_every and resume are the STORE's (uedp.flower.store.RunStore);
the set-up and resume lines go to the "flwr.uedp" logger (Flower's own handler prints them: they reach `flwr
run`'s output) instead of a stream; the audit's injected noise and aggregator, a data-derived denominator (the
paper's Z, labelled not private) and the schedule's clock are `Seams`; `records` are records every training
message carries (the project's owners mode: its tokenizer; a checkpoint's base digest).

The round key and the training seeds live in a round's plan only, for that round: never logged or stored.
With `privacy.seed >= 0` the run is a reproduction (keys, cohorts and noise from the seed) and says so loudly:
it is not private (the report's `not_private`).
"""

from __future__ import annotations

import copy
import logging
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from uedp.config import ClientTrainConfig, PrivacyConfig
from uedp.errors import ConfigError
from uedp.flower.optimizer import ServerOptimizer
from uedp.flower.options import Seams, check_options, mechanism_settings, place_count, place_map, round_rng
from uedp.flower.places import Places, grid_kind
from uedp.flower.plan import plan_round
from uedp.flower.preflight import PROBE_TIMEOUT, MissingClientMod, run_preflight
from uedp.flower.release import release
from uedp.flower.report import RoundMessages, RoundReport, UeDPReport
from uedp.flower.resume import ResumeError
from uedp.flower.schedule import RoundSchedule, ScheduledGrid
from uedp.flower.store import RunStore
from uedp.privacy.accountant import ClaimedPrivacySpent, UeDPAccountant, refuse_foreign_accountant
from uedp.privacy.ledger import RoundRecord
from uedp.privacy.mechanisms import MechanismSpec
from uedp.privacy.noise import FIXED_SEED_WARNING, NoiseSource, noise_source
from uedp.privacy.replies import decode_update, stamp
from uedp.protocol import CONFIG_RECORD, INSTRUCTIONS_RECORD, reply_content

try:  # Flower >= 1.35: the exception its own DP wrappers raise, which its ServerApp reports as unmet precondition
    from flwr.serverapp.exception import PrivacyBudgetExhausted
except ImportError:  # pragma: no cover - not within the supported range (flwr >= 1.38), kept for a clear import
    class PrivacyBudgetExhausted(Exception):  # type: ignore[no-redef]
        """Raised before a release would exceed the privacy budget."""

# Under Flower's own logger, so that Flower's handler prints these lines where it prints its own: the ServerApp's
# output, which `flwr run` streams. Only public things are logged here (module docstring).
log = logging.getLogger("flwr.uedp")

FIXED_SEED_LABEL = f"{FIXED_SEED_WARNING} (privacy.seed >= 0: keys, cohorts and noise from the seed)"
# Imported from here too (tests, the project's server): the wrapper's options, errors and what it returns
__all__ = ["FIXED_SEED_LABEL", "MissingClientMod", "PrivacyBudgetExhausted", "RoundMessages", "RoundReport", "Seams",
           "UeDPReport", "UserEntityDP"]


@dataclass
class _Pending:
    sent: RoundMessages
    arrays: ArrayRecord
    config: ConfigRecord
    started: float
    late: bool
    connected: int
    ignored: int


class UserEntityDP(Strategy):
    """UeDP around a server-optimizer strategy (module docstring).

    strategy      the server optimizer (uedp.flower.optimizer: FedAvg, FedAdam, ... or `apply_update`)
    places        N, the public number of places (an int: sorted node ids fill them; simulations only), or a
                  `Places` map (uedp.flower.places.KeyedPlaces: places by registered public key; deployments)
    accountant    uedp.privacy.accountant.UeDPAccountant: the mechanism, privacy settings, N, planned rounds,
                  z, the ledger and the claims (Flower's own accountants are refused: they account one
                  Gaussian at user level)
    store         uedp.flower.store.RunStore: out_dir (ledger.json before each release, checkpoint.pt, the
                  operator log), checkpoint_every, resume; required for a private mechanism
    round_period  seconds between the starts of consecutive rounds, from `start` (a public schedule: the rounds'
                  timing then depends on no one's data or presence); checked before round 1 against the
                  timeout and the server's measured work; None: back to back, the timing outside the guarantee
    records       records every training message carries (the project's owners mode: its tokenizer)
    seams         test seams (`Seams`): the audit's noise and aggregator, a data-derived denominator, the clock
    """

    def __init__(self, strategy: Any, *, places: int | Places, accountant: UeDPAccountant,
                 store: RunStore | None = None, round_period: float | None = None,
                 records: Mapping[str, Any] | None = None, seams: Seams | None = None) -> None:
        super().__init__()
        acc = refuse_foreign_accountant(accountant)
        spec = acc.spec
        self._places: Places = place_map(places, num_users=acc.num_users)
        check_options(round_period=round_period, store=store, private=spec.private)
        self._accountant = acc
        self._spec: MechanismSpec = spec
        self._optimizer = ServerOptimizer.of(strategy)
        self._inner = strategy
        self._store = store
        self._records = {k: v if isinstance(v, ConfigRecord) else ConfigRecord(dict(v))
                         for k, v in (records or {}).items()}
        seams = seams or Seams()
        period = None if round_period is None else float(round_period)
        self._schedule = RoundSchedule(period, clock=seams.clock, sleep=seams.sleep)
        privacy = acc.privacy
        seeded = privacy.seed is not None
        self._noise: NoiseSource = seams.noise or noise_source(seed=privacy.seed, choice=privacy.noise)
        self._aggregator = seams.aggregator
        self._rng = round_rng(privacy.seed)
        labels = [FIXED_SEED_LABEL if seeded else None, getattr(self._places, "not_private", None)]
        self._not_private = tuple(x for x in labels if x)
        if seeded:
            log.warning("%s; this run is for reproduction only", FIXED_SEED_LABEL)
        self._settings = mechanism_settings(acc, self._places.size, self._noise, seams.denominator, seeded=seeded)
        self._offset = 0
        self._start_arrays: ArrayRecord | None = None
        self._checkpoint_round = 0
        if store is not None:
            self._resume(store)
        self._arrays: ArrayRecord | None = None
        self._model_round = self._checkpoint_round
        self._last: RoundReport | None = None
        self._claimed: dict[str, float] = {}  # the claimed epsilons after the rounds charged (the budget check's)
        self._pending: dict[int, _Pending] = {}
        self._template: list[np.ndarray] | None = None
        self._late = 0
        self._ready = False  # preflight done (places, nodes, probe)
        self._grid_kind = ""  # the preflight's grid_kind

    def _resume(self, store: RunStore) -> None:
        """Continue what `store` holds (store.resume: the ledger, fail-closed, and the last checkpoint's arrays
        and server optimizer state); nothing without resume."""
        acc, spec = self._accountant, self._spec
        resumed = store.resumed(delta=acc.delta, num_users=acc.num_users)
        if resumed is None:
            return
        if len(resumed.ledger) and resumed.ledger.records[-1].rule != spec.rule:
            raise ResumeError(f"cannot resume in {store.out}: its ledger records {resumed.ledger.records[-1].rule!r} "
                              f"rounds, this run is {spec.name!r} ({spec.rule!r})")
        resumed.check_z(acc.noise_multiplier)
        acc.load_state_dict(resumed.ledger.to_dict())
        self._offset = acc.last_round
        ckpt = resumed.checkpoint
        if ckpt is not None:
            self._start_arrays = ArrayRecord({k: Array(np.asarray(v)) for k, v in ckpt.arrays.items()})
            self._optimizer.load_state_dict(ckpt.optimizer_state)
            self._checkpoint_round = ckpt.round
        for path in resumed.temporaries_removed:
            log.info("removed %s, the temporary of a write that was killed before its rename", path.name)
        log.info("resuming after round %d (checkpoint of round %d; %d round(s) after it stay charged; z from the "
                 "ledger)", self._offset, self._checkpoint_round, self._offset - self._checkpoint_round)

    # -- construction from a target or a run config ---------------------------------------------------------
    @classmethod
    def make_private_with_epsilon(cls, strategy: Any, *, places: int | Places, num_rounds: int,
                                  privacy: PrivacyConfig, mechanism: str = "uedp", store: RunStore | None = None,
                                  **options: Any) -> UserEntityDP:
        """The wrapper whose z is the smallest with which every claimed epsilon reaches `privacy.target_epsilon`
        in `num_rounds` rounds (and, with privacy.target_holders = K, the epsilon for an entity with K other
        holders): the single calibration entry point, uedp.privacy.calibration.run_noise_multiplier (disk-
        cached). A resumed run keeps the z its ledger recorded (never recalibrated). `options`: the
        constructor's round_period, records, seams."""
        from uedp.privacy.calibration import run_noise_multiplier
        from uedp.privacy.mechanisms import get

        spec = get(mechanism)
        size = place_count(places)
        privacy = privacy.checked()  # target_epsilon 0 (its run-config spelling) is None
        if spec.private and privacy.target_epsilon is None:
            raise ConfigError("make_private_with_epsilon needs privacy.target_epsilon > 0 (with None, pass an "
                              "accountant of your noise multiplier to UserEntityDP)")
        recorded = store.recorded_z(delta=privacy.delta, num_users=size) if store is not None else None
        # the accountant resolves the automatic cohort cap first: the calibration is for that cap
        resolved = UeDPAccountant(mechanism, privacy, num_users=size, rounds=num_rounds,
                                  noise_multiplier=1.0 if spec.private else 0.0).privacy
        z = recorded if recorded is not None else run_noise_multiplier(spec, resolved, rounds=num_rounds,
                                                                       num_users=size)
        accountant = UeDPAccountant(mechanism, resolved, num_users=size, rounds=num_rounds, noise_multiplier=z)
        return cls(strategy, places=places, accountant=accountant, store=store, **options)

    @classmethod
    def from_run_config(cls, strategy: Any, run_config: Mapping[str, Any], *, places: int | Places, num_rounds: int,
                        store: RunStore | None = None, **options: Any) -> UserEntityDP:
        """The wrapper as a Flower run config sets it: the mechanism (`uedp.strategy.name`, and
        `uedp.strategy.estimator` for UeDP) and the privacy settings (`uedp.privacy.*`) from the run config's
        `uedp.` keys (uedp.config.RunConfig.from_run_config: an app's own keys pass through, an unknown key
        inside the namespace is refused, naming it). privacy.target_epsilon calibrates z to it
        (`make_private_with_epsilon`); None (in the run config 0) uses privacy.noise_multiplier."""
        from uedp.config import RunConfig
        from uedp.privacy.mechanisms import spec_for

        cfg = RunConfig.from_run_config(run_config)
        return cls.from_privacy(strategy, places=places, num_rounds=num_rounds, privacy=cfg.privacy,
                                mechanism=spec_for(cfg.strategy.name, cfg.strategy.estimator).name, store=store,
                                **options)

    @classmethod
    def from_privacy(cls, strategy: Any, *, places: int | Places, num_rounds: int, privacy: PrivacyConfig,
                     mechanism: str = "uedp", store: RunStore | None = None, noise_multiplier: float | None = None,
                     **options: Any) -> UserEntityDP:
        """The wrapper of privacy settings as a run config means them: `noise_multiplier` when given (z fixed),
        else privacy.target_epsilon calibrates z to it (`make_private_with_epsilon`), and None (or 0, its
        run-config spelling) uses privacy.noise_multiplier. `options`: the constructor's round_period, records,
        seams."""
        from uedp.privacy.mechanisms import get

        private = get(mechanism).private
        privacy = privacy.checked()
        if private and noise_multiplier is None and privacy.target_epsilon is not None:
            return cls.make_private_with_epsilon(strategy, places=places, num_rounds=num_rounds, privacy=privacy,
                                                 mechanism=mechanism, store=store, **options)
        z = privacy.noise_multiplier if noise_multiplier is None else noise_multiplier
        accountant = UeDPAccountant(mechanism, privacy, num_users=place_count(places), rounds=num_rounds,
                                    noise_multiplier=z if private else 0.0)
        return cls(strategy, places=places, accountant=accountant, store=store, **options)

    # -- what it reports -------------------------------------------------------------------------------------
    @property
    def accountant(self) -> UeDPAccountant:
        return self._accountant

    @property
    def rounds_left(self) -> int:
        """Rounds still planned: what to pass to `start` (the planned rounds less those a resumed ledger holds)."""
        return max(0, self._accountant.rounds - self._offset)

    @property
    def report(self) -> UeDPReport:
        """The wrapper's state, read-only (`UeDPReport`)."""
        acc = self._accountant
        return UeDPReport(
            settings=self._settings, claims=acc.claims,
            rounds_planned=acc.rounds, rounds_charged=acc.num_releases, rounds_left=self.rounds_left,
            model_round=self._model_round, checkpoint_round=self._checkpoint_round, late_rounds=self._late,
            arrays=self._arrays, last_round=self._last, not_private=self._not_private,
        )

    def privacy_spent(self) -> ClaimedPrivacySpent | None:
        """Flower's PrivacySpent: the LARGEST claimed epsilon, each claim beside it (`claims`); None for a
        noiseless mechanism."""
        return self._accountant.get_privacy_spent() if self._spec.private else None

    def initial_arrays(self, default: ArrayRecord) -> ArrayRecord:
        """The arrays `start` begins from: a resumed run's checkpoint, else `default`."""
        start = self._start_arrays if self._start_arrays is not None else default
        self._arrays = start
        return start

    # -- before the first round ------------------------------------------------------------------------------
    def start(self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int = 3, timeout: float = 3600,
              train_config: ConfigRecord | None = None, evaluate_config: ConfigRecord | None = None,
              evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None) -> Any:
        """Flower's `Strategy.start`, after the preflight (module docstring) and with `evaluate_fn` timed at
        round 0 (for the round schedule's check)."""
        if self._arrays is None:
            self._arrays = initial_arrays
        schedule = self._schedule
        schedule.timeout = float(timeout)
        schedule.begin()
        if schedule.period is not None:  # each round's replies to a public deadline, and its end held to it
            grid = ScheduledGrid(grid, schedule)
        self.preflight(grid, timeout=timeout)
        return super().start(grid, initial_arrays, num_rounds, timeout, train_config, evaluate_config,
                             schedule.timed(evaluate_fn))

    def preflight(self, grid: Grid, *, timeout: float = PROBE_TIMEOUT) -> None:
        """Before any budget is spent (uedp.flower.preflight): the place map against the grid, a simulation's
        nodes, and the client mod: read from the app bundle on a deployment's grid, asked of the nodes by the
        probe on a simulation's. Done once (`start` calls it; a loop of your own may, or configure_train does at
        its first round)."""
        if self._ready:
            return
        kind = self._grid_kind = grid_kind(grid)
        run_preflight(grid, self._places, kind=kind, timeout=timeout, clock=self._schedule.clock,
                      sleep=self._schedule.sleep)
        self._ready = True

    def _measure_release(self, arrays: ArrayRecord, record: RoundRecord) -> float:
        """Seconds of a worst-case round's server work: the budget check of round `record` (not charged), m_max
        (else N) replies decoded, their updates re-checked, summed and noised (a fresh noise source: the run's own
        draws are untouched), applied to a copy of the server optimizer, and the ledger and a checkpoint written
        to temporary files beside the run's."""
        s = self._settings
        clock = self._schedule.clock
        template = [np.asarray(a.numpy()) for a in arrays.values()]
        update = [np.full(t.shape, 1.0, dtype=t.dtype) for t in template]
        cohort = s.m_max or s.places
        t0 = clock()
        self._accountant.check(record)
        shapes = [t.shape for t in template]
        # each reply built and decoded: the stand-in for pulling and inflating m_max model-sized replies
        decoded = [decode_update(reply_content(update, None)["update"], shapes) for _ in range(cohort)]
        mean, _ = self._aggregator(decoded, template=template, w_max=s.w_max, beta=s.beta + s.gamma,
                                   sigma=s.sigma, denominator=s.denominator,
                                   noise=noise_source(seed=None, choice="secure"))
        copy.deepcopy(self._optimizer).apply(1, arrays, [np.asarray(m, dtype=t.dtype) for m, t in zip(mean, template)],
                                             ConfigRecord({}))
        if self._store is not None:
            self._store.out.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=self._store.out, prefix=".uedp-timing-") as tmp:
                probe_store = RunStore(tmp)
                probe_store.save_ledger(self._accountant)
                probe_store.save_checkpoint(0, {k: a.numpy() for k, a in arrays.items()}, self._optimizer.state_dict(),
                                            self._accountant)
        return clock() - t0

    # -- Strategy API ---------------------------------------------------------------------------------------
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> RoundMessages:
        rnd = self._offset + server_round
        if rnd in self._pending:
            raise RuntimeError(f"round {rnd} is configured already and not aggregated: a round is configured once")
        schedule = self._schedule
        schedule.begin()
        self.preflight(grid, timeout=schedule.timeout or PROBE_TIMEOUT)
        record = self._settings.record(rnd)
        schedule.check(lambda: self._measure_release(arrays, record), self._grid_kind)
        late = schedule.keep(server_round)
        schedule.scheduled_round = server_round
        started = time.monotonic()
        check = self._accountant.check(record)
        if check is not None:
            if not check.allowed:
                self._late += late  # a late start whose round never runs is still a late round
                over = ", ".join(f"eps_{k} to {check.epsilons_after[k]:.4f}" for k in check.exceeded)
                log.warning("budget stop before round %d: it would take %s > target %g; nothing of it was sampled, "
                            "sent or charged, and the last released model is round %d's (report.arrays)", rnd, over,
                            check.target_epsilon, self._model_round)
                raise PrivacyBudgetExhausted(f"round {rnd} would take {over} > target {check.target_epsilon}")
            self._claimed = {f"eps_{k}": float(v) for k, v in check.epsilons_after.items()}
        else:
            self._claimed = {}
        if self._template is None:
            self._template = [np.zeros_like(a.numpy()) for a in arrays.values()]
        assignment = self._places.assign(grid)
        plan = plan_round(rnd, settings=self._settings, record=record, assignment=assignment, rng=self._rng)
        # the round's lr from the record's schedule (the ledger's round number: a resumed run sends the same lr)
        train_config = ConfigRecord(ClientTrainConfig.for_round({**dict(config or {}), "server-round": rnd}, rnd))
        messages = []
        for item in plan:
            content = RecordDict({"arrays": arrays, CONFIG_RECORD: train_config,
                                  INSTRUCTIONS_RECORD: item.instructions.to_record(), **self._records})
            messages.append(stamp(Message(content, dst_node_id=item.node_id, message_type="train",
                                          group_id=str(rnd))))
        sent = RoundMessages(plan, tuple(messages))
        self._pending[rnd] = _Pending(sent, arrays, train_config, started, late, assignment.connected,
                                      assignment.ignored)
        return sent

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        rnd = self._offset + server_round
        if rnd not in self._pending or self._template is None:
            raise RuntimeError(f"round {rnd} has no plan: configure_train comes first, and a round is aggregated once")
        expected = self._accountant.last_round + 1
        if rnd != expected:  # the ledger's rounds are contiguous: a round is charged after the one before it
            raise RuntimeError(f"round {rnd} cannot be aggregated before round {expected}")
        pending = self._pending.pop(rnd)  # taken back: a plan serves its own round, once
        update, counts = release(pending.sent.plan, pending.sent.messages, replies, settings=self._settings,
                                 template=self._template, aggregator=self._aggregator, noise=self._noise)
        # Account for the round BEFORE the new global arrays exist anywhere.
        self._accountant.compose(pending.sent.record)
        if self._store is not None:
            self._store.save_ledger(self._accountant)
        new = self._optimizer.apply(rnd, pending.arrays, update, pending.config)
        self._arrays, self._model_round = new, rnd
        seconds = time.monotonic() - pending.started  # the round: configure, replies, release, ledger, update
        head = self._accountant.head.hash
        if self._store is not None and self._store.wants_checkpoint(rnd, self._accountant.rounds):
            self._store.save_checkpoint(rnd, {k: a.numpy() for k, a in new.items()}, self._optimizer.state_dict(),
                                        self._accountant)
        late = self._schedule.hold_release(server_round) or pending.late
        self._late += late
        if self._store is not None:
            self._store.operator_log({"round": rnd, **counts, "connected": pending.connected,
                                      "ignored": pending.ignored, "seconds": round(seconds, 3), "late": late,
                                      "ledger_hash": head})
        self._last = RoundReport(rnd, head, seconds, late)
        if not self._spec.private:  # no guarantee to keep: the counts (and a train loss) are the app's to see
            return new, MetricRecord({"round": rnd, **counts})
        if not self._claimed:  # no budget check this round: compute the claims now
            self._claimed = self._accountant.claimed()
        return new, MetricRecord({"round": rnd, **self._claimed})  # public values only (module docstring)

    def claimed_epsilons(self) -> dict[str, float]:
        """The claimed epsilons after the rounds charged ({f"eps_{adjacency}": value}; {} if noiseless)."""
        if not self._spec.private or not self._accountant.num_releases:
            return {}
        if not self._claimed:
            self._claimed = self._accountant.claimed()
        return dict(self._claimed)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return []  # never: the nodes' data is private (module docstring); evaluate centrally (evaluate_fn)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return None

    def summary(self) -> None:
        """The set-up line (public settings only), through the "flwr.uedp" logger: Flower's `start` calls it."""
        r = self.report
        log.info("%s (%s): z=%.4f sigma=%.4g Z=%.4g places=%d q_u=%g q_e=%g q_s=%g m_max=%s k_cap=%s beta=%g "
                 "rounds=%d; server optimizer: %s%s", r.mechanism, r.rule, r.z, r.sigma, r.denominator, r.places,
                 r.q_u, r.q_e, r.q_s, r.m_max, r.k_cap, r.beta, r.rounds_planned, type(self._inner).__name__,
                 "; " + "; ".join(r.not_private).upper() if r.not_private else "")
