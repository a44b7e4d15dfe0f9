"""Set-up of a run: from a RunConfig (and injected components) to a frozen `RunContext` and its `RunState`.

`setup` prepares the data, picks the mechanism spec the config names (uedp.privacy.mechanisms), fixes the
cohort cap (privacy.m_max = 0: the smallest whose truncation charge is at most 1% of delta for this N,
uedp.privacy.accounting.safe_m_max) and the noise multiplier (given, or calibrated so that every claimed
epsilon, privacy.target_on, reaches privacy.target_epsilon over federation.rounds), builds the strategy,
model, server optimizer and ledger, and, with federation.resume, continues the saved ledger from the last
checkpoint, fail-closed (server/resume.py).

`Components` are the seams: the noise source, the aggregation function and the noise multiplier may be
passed in instead of being built from the config. Real runs pass none. The audit's broken controls pass a
noise source that draws too little noise or an aggregator without the norm re-check, and say so in
`broken`, which every output of the run then carries as its warning (such a run is never private).
"""

from __future__ import annotations

import dataclasses
import json
import random
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from server.metrics import MetricsWriter
from server.optimizer import ServerOptimizer
from server.resume import ResumeError, resume_state
from strategies import MechanismStrategy
from uedp.config import RunConfig
from uedp.errors import ConfigError
from uedp.models.base import UedpModel, get_weights
from uedp.models.public_start import load_public_start
from uedp.pipeline import EncodedSentences
from uedp.privacy.accounting import safe_m_max
from uedp.privacy.aggregation import Aggregator, aggregate
from uedp.privacy.calibration import calibrate_claims
from uedp.privacy.ledger import Ledger
from uedp.privacy.mechanisms import MechanismSpec, spec_for
from uedp.privacy.noise import FIXED_SEED_WARNING, NoiseSource, noise_source
from uedp.server_data import server_data
from uedp.tasks import get_task
from uedp.training import evaluate_encoded


@dataclass(frozen=True)
class Components:
    noise: NoiseSource | None = None  # None: noise_source(privacy.noise; privacy.seed for reproduction)
    aggregator: Aggregator = aggregate
    noise_multiplier: float | None = None  # None: privacy.noise_multiplier or calibrated to the target
    broken: str | None = None  # why an injected component voids the guarantee (audit controls only)


@dataclass(frozen=True)
class RunContext:
    """What stays fixed for the whole run."""

    cfg: RunConfig
    spec: MechanismSpec
    out: Path
    population: int
    strategy: MechanismStrategy  # holds the run's noise multiplier (`z`, read below)
    test: EncodedSentences | None  # the evaluation set (None: no central evaluation)
    metric_name: str
    warning: str | None  # fixed seed, broken component or private-split tokenizer: the run is not private
    metrics: MetricsWriter
    stream: TextIO
    tokenizer: dict | None = None  # what the tokenizer was trained on (Manifest.tokenizer_info)
    initial_model: dict | None = None  # {"source": "random"} or a public start's file and corpus (model.init)

    @property
    def private(self) -> bool:
        return self.spec.private and self.warning is None

    @property
    def z(self) -> float:
        """The run's noise multiplier, as the strategy holds it (its one holder)."""
        return self.strategy.z


@dataclass
class RunState:
    """What the rounds change."""

    model: UedpModel
    optimizer: ServerOptimizer
    ledger: Ledger
    first_round: int
    initial: dict[str, float]
    last_eval: dict[str, float]
    eps: dict[str, float] = field(default_factory=dict)
    stopped_by_budget: bool = False


PAPER_Z_WARNING = ("not private: privacy.paper_z computes Z from the entity and extended-entity counts of the "
                   "users' data (W_e, W_s), outside the privacy proof (docs/proofs.md section 7)")


def resolve_m_max(cfg: RunConfig, spec: MechanismSpec, *, population: int) -> RunConfig:
    """cfg with privacy.m_max = 0 replaced by the automatic cap (safe_m_max for N places, q_u, the planned
    rounds and delta), for mechanisms that truncate; unchanged otherwise."""
    p = cfg.privacy
    if p.m_max > 0 or not spec.truncate:
        return cfg
    m_max = safe_m_max(population, p.q_u, cfg.federation.rounds, p.delta)
    return dataclasses.replace(cfg, privacy=dataclasses.replace(p, m_max=m_max))


def noise_multiplier(cfg: RunConfig, spec: MechanismSpec, *, population: int) -> float:
    """privacy.noise_multiplier, or the smallest z with which every claimed epsilon (privacy.target_on;
    UeDP: eps_uedp and eps_undetected) reaches privacy.target_epsilon in federation.rounds rounds; 0 for a
    noiseless mechanism."""
    p = cfg.privacy
    if not spec.private:
        return 0.0
    if p.target_epsilon <= 0:
        if p.noise_multiplier <= 0:
            raise ConfigError("privacy.noise_multiplier must be > 0 when privacy.target_epsilon is 0")
        return p.noise_multiplier
    q_e, q_s = spec.rates(p)
    return calibrate_claims(
        p.target_epsilon, spec.claims_for(p), method=spec.accounting, q_u=p.q_u, q_e=q_e, q_s=q_s,
        m_max=spec.m_max(p), k_cap=spec.k_cap(p), rounds=cfg.federation.rounds, delta=p.delta,
        num_users=population, tol=1e-3, gamma=spec.gamma(p) / p.beta,
    )


def setup(cfg: RunConfig, *, components: Components, stream: TextIO) -> tuple[RunContext, RunState]:
    out = Path(cfg.federation.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = server_data(cfg)  # owners mode: public things only, no private text
    population = data.population
    spec = spec_for(cfg.strategy.name, cfg.strategy.estimator)
    cfg = resolve_m_max(cfg, spec, population=population)
    (out / "config.json").write_text(json.dumps(cfg.to_nested(), indent=1))
    p = cfg.privacy
    fixed = p.seed >= 0
    if fixed:
        print(f"WARNING: {FIXED_SEED_WARNING} (privacy.seed={p.seed}); this run is for reproduction only",
              file=stream, flush=True)
    noise = components.noise or noise_source(seed=p.seed if fixed else None, kind=p.noise)
    if components.broken:
        print(f"WARNING: {components.broken}; this run is NOT private", file=stream, flush=True)
    rng: random.Random = random.Random(p.seed) if fixed else secrets.SystemRandom()
    resumed = resume_state(out, delta=p.delta, num_users=population) if cfg.federation.resume else None
    if resumed is not None and len(resumed.ledger) and resumed.ledger.records[-1].method != spec.accounting:
        raise ResumeError(f"cannot resume in {out}: its ledger records {resumed.ledger.records[-1].method!r} "
                          f"rounds, this run is {spec.name!r} ({spec.accounting!r})")
    z = components.noise_multiplier
    if z is None:  # a resumed run keeps its recorded z; a new one calibrates (or takes the configured z)
        z = resumed.z if resumed is not None and resumed.z is not None else noise_multiplier(
            cfg, spec, population=population)
    strategy = MechanismStrategy(
        spec, privacy=p, train=cfg.train, noise_multiplier=z, population=population, noise=noise, rng=rng,
        num_entities=data.num_entities, num_extended=data.num_extended, aggregator=components.aggregator,
        shipped=data.shipped(),
    )
    if resumed is not None:  # the saved state's z must be the z this run continues with
        resumed.check_z(strategy.z)
    model = data.new_model(cfg, seed=p.seed if fixed else None)
    initial_model: dict[str, Any] = {"source": "random"}
    if cfg.model.init:  # a public start: weights trained on public text only (uedp.models.public_start)
        initial_model = {"source": "public", **load_public_start(
            cfg.model.init, model, model_name=cfg.model.name, model_options=cfg.model.option_dict(),
            tokenizer=data.tokenizer)}
        print(f"public start: {cfg.model.init} (trained on {initial_model['corpus']})", file=stream, flush=True)
    optimizer = ServerOptimizer(model, name=cfg.server.optimizer, lr=cfg.server.lr, momentum=cfg.server.momentum)
    strategy.set_template(get_weights(model))
    ledger = Ledger(delta=p.delta, num_users=population)
    first_round = 1
    if resumed is not None:
        ledger, ckpt, first_round = resumed.ledger, resumed.checkpoint, resumed.next_round
        if ckpt is not None:
            model.load_state_dict(ckpt.model_state)
            optimizer.load_state_dict(ckpt.optimizer_state)
        lost = (ledger.last_round or 0) - (ckpt.round if ckpt else 0)
        print(f"resuming after round {ledger.last_round or 0} (checkpoint of round "
              f"{ckpt.round if ckpt else 0}; {lost} round(s) after it stay charged; z from the ledger)",
              file=stream, flush=True)
    strategy.summary()
    print(f"{cfg.strategy.name} ({spec.accounting}): z={strategy.z:.4f} sigma={strategy.sigma:.4g} Z={strategy.Z:.4g} "
          f"population={population} rounds={cfg.federation.rounds}", file=stream, flush=True)
    initial = evaluate(model, data.test)
    warning = components.broken or (FIXED_SEED_WARNING if fixed else None)
    labels = [data.tokenizer_warning,  # tokenizer.source=private_split: refused nowhere, labelled
              PAPER_Z_WARNING if spec.private and p.paper_z and spec.keyed else None]
    for label in filter(None, labels):
        print(f"WARNING: {label}", file=stream, flush=True)
        warning = f"{warning}; {label}" if warning else label
    ctx = RunContext(
        cfg=cfg, spec=spec, out=out, population=population, strategy=strategy, test=data.test,
        metric_name=get_task(cfg.task.name).metric, warning=warning,
        metrics=MetricsWriter(out, stream=stream), stream=stream, tokenizer=data.tokenizer_info,
        initial_model=initial_model,
    )
    eps = ledger.epsilons() if len(ledger) and spec.private else {}
    state = RunState(model=model, optimizer=optimizer, ledger=ledger, first_round=first_round, initial=initial,
                     last_eval=initial, eps=eps)
    return ctx, state


def evaluate(model: UedpModel, test: EncodedSentences | None) -> dict[str, float]:
    """Central evaluation on the server's evaluation set ({} when the run has none)."""
    return {} if test is None else evaluate_encoded(model, test)
