"""Set-up of a run: from a RunConfig (and injected components) to a frozen `RunContext` and its `RunState`.

`setup` prepares the data, picks the mechanism spec the config names (uedp.privacy.mechanisms), fixes the
cohort cap (privacy.m_max = "auto": the smallest whose truncation charge is at most 1% of delta for this N,
uedp.privacy.accounting.safe_m_max), builds the model (or a public start) and the project's strategy around it
(strategies.build: the place map, the server optimizer wrapped in `uedp.flower.UserEntityDP`, which holds the
noise multiplier, the ledger and the checkpoints, and with federation.resume continues the saved ledger), then
starts the model from a resumed run's checkpoint and labels what makes the run not private.

`Components` are the seams: the noise source, the aggregation function, the noise multiplier and the place
map may be passed in instead of being built from the config. Real runs pass none. The audit's broken controls
pass a noise source that draws too little noise or an aggregator without the norm re-check, and say so in
`broken`, which every output of the run then carries as its warning (such a run is never private); the
in-process runner passes the place map of its own owners (runtime/local_grid.py).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from flwr.app import ArrayRecord

from server.metrics import MetricsWriter
from strategies import PAPER_Z_WARNING, build_strategy, paper_denominator, run_places
from uedp.config import AUTO, RunConfig
from uedp.devices import evaluation_model, resolve_device
from uedp.flower.places import Places
from uedp.flower.store import RunStore
from uedp.flower.strategy import Seams, UserEntityDP
from uedp.models.base import UedpModel, get_weights, parameter_counts, set_weights
from uedp.models.checkpoints import base_digest, checkpoint_of, recorded_public_corpus_of
from uedp.models.public_start import load_public_start, refuse_private_start
from uedp.pipeline import EncodedSentences, model_spec, private_dataset, server_data
from uedp.privacy.accounting import safe_m_max
from uedp.privacy.aggregation import Aggregator, aggregate
from uedp.privacy.mechanisms import MechanismSpec, spec_for
from uedp.privacy.noise import FIXED_SEED_WARNING, NoiseSource
from uedp.protocol import BASE_RECORD
from uedp.tasks import get_task
from uedp.tokenization import TextTokenizer
from uedp.training import LocalTraining, evaluate_encoded


@dataclass(frozen=True)
class Components:
    noise: NoiseSource | None = None  # None: noise_source(privacy.noise; privacy.seed for reproduction)
    aggregator: Aggregator = aggregate
    noise_multiplier: float | None = None  # None: privacy.noise_multiplier or calibrated to the target
    broken: str | None = None  # why an injected component voids the guarantee (audit controls only)
    places: Places | None = None  # None: from the config (module docstring)


@dataclass(frozen=True)
class RunContext:
    """What stays fixed for the whole run."""

    cfg: RunConfig
    spec: MechanismSpec
    out: Path
    population: int
    strategy: UserEntityDP  # holds the run's accountant (noise multiplier, ledger) and checkpoints
    places: Places  # which node stands in each place (the strategy's)
    store: RunStore  # the run's folder as the strategy writes it (ledger, checkpoint, operator log)
    test: EncodedSentences | None  # the evaluation set (None: no central evaluation)
    metric_name: str
    warning: str | None  # fixed seed, broken component or private-split tokenizer: the run is not private
    metrics: MetricsWriter
    stream: TextIO
    tokenizer: dict | None = None  # what the tokenizer was trained on (Manifest.tokenizer_info)
    initial_model: dict | None = None  # {"source": "random"} or a public start's file and corpus (model.init)
    device: str = "cpu"  # where the server evaluates: federation.device resolved here (uedp.devices)
    base_model: dict | None = None  # a checkpoint's {entry, path, digest, lora} (summary.json base_model)
    text_tokenizer: TextTokenizer | None = None  # the run's tokenizer (the release saves it beside the model)

    @property
    def private(self) -> bool:
        return self.spec.private and self.warning is None

    @property
    def z(self) -> float:
        """The run's noise multiplier, as the strategy's accountant holds it (its one holder)."""
        return self.strategy.accountant.noise_multiplier

    def train_config(self) -> dict[str, Any]:
        """The nodes' local training settings (each training message's "config" record), with the lr schedule
        (train.lr_schedule, train.warmup_rounds, federation.rounds) from which the strategy sets each round's lr
        (uedp.config.ClientTrainConfig.for_round)."""
        return {**LocalTraining.from_config(self.cfg.train).to_record(),
                **self.cfg.train.schedule_record(self.cfg.federation.rounds)}


@dataclass
class RunState:
    """What the rounds change (the ledger and epsilons live in the strategy)."""

    model: UedpModel
    arrays: ArrayRecord  # the global arrays the rounds start from (a resumed run's checkpoint)
    initial: dict[str, float]  # the initial model's evaluation (at round 0)
    last_eval: dict[str, float]
    stopped_by_budget: bool = False


def resolve_m_max(cfg: RunConfig, spec: MechanismSpec, *, population: int) -> RunConfig:
    """cfg with privacy.m_max = "auto" replaced by the automatic cap (safe_m_max for N places, q_u, the planned
    rounds and delta), for mechanisms that truncate; unchanged otherwise."""
    p = cfg.privacy
    if p.m_max != AUTO or not spec.truncate:
        return cfg
    m_max = safe_m_max(population, p.q_u, cfg.federation.rounds, p.delta)
    return dataclasses.replace(cfg, privacy=dataclasses.replace(p, m_max=m_max))


def setup(cfg: RunConfig, *, components: Components, stream: TextIO) -> tuple[RunContext, RunState]:
    out = Path(cfg.federation.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = server_data(cfg)  # owners mode: public things only, no private text
    population = data.population
    spec = spec_for(cfg.strategy.name, cfg.strategy.estimator)
    cfg = resolve_m_max(cfg, spec, population=population)
    places = components.places or run_places(cfg, spec, population)
    (out / "config.json").write_text(json.dumps(cfg.to_nested(), indent=1))
    p = cfg.privacy
    fixed = p.seed is not None
    if components.broken:
        print(f"WARNING: {components.broken}; this run is NOT private", file=stream, flush=True)
    device = str(resolve_device(cfg.federation.device))
    print(f"device: {device} (federation.device = {cfg.federation.device}; the server evaluates there, each node "
          "resolves it for its own training)", file=stream, flush=True)
    cut = data.test.truncation() if data.test is not None else None  # the evaluation set's text only
    if cut is not None:
        print(cut.line("evaluation", longest=False), file=stream, flush=True)
    model = data.new_model(model_spec(cfg), seed=p.seed)
    initial_model: dict[str, Any] = {"source": "random"}
    if cfg.model.init:  # a public start: weights trained on public text only (uedp.models.public_start)
        initial_model = {"source": "public", **load_public_start(
            cfg.model.init, model, model_name=cfg.model.name, model_options=cfg.model.option_dict(),
            tokenizer=data.tokenizer, private=private_dataset(cfg))}
        print(f"public start: {cfg.model.init} (trained on {initial_model['corpus']})", file=stream, flush=True)
    base_model, base_record = describe_model(cfg, model, stream)
    shipped = data.shipped()
    extra = {**({"tokenizer": shipped} if shipped is not None else {}), **base_record}
    store = RunStore(out, checkpoint_every=cfg.federation.checkpoint_every, resume=cfg.federation.resume)
    paper_z = paper_denominator(cfg, spec, data, population)
    strategy = build_strategy(cfg, spec, model, places=places, store=store, records=extra or None,
                              noise_multiplier=components.noise_multiplier,
                              seams=Seams(noise=components.noise, aggregator=components.aggregator,
                                          denominator=paper_z))
    arrays = strategy.initial_arrays(ArrayRecord(get_weights(model)))
    set_weights(model, arrays.to_numpy_ndarrays())  # a resumed run continues from its checkpoint's model
    initial: dict[str, float] = {}  # evaluated at round 0 of Flower's start (server/round_log.py)
    warning = components.broken or (FIXED_SEED_WARNING if fixed else None)
    labels = [data.tokenizer_warning,  # tokenizer.source=private_split: refused nowhere, labelled
              PAPER_Z_WARNING if paper_z is not None else None,
              places.not_private if spec.private else None]  # places by node order outside a simulation
    for label in filter(None, labels):
        print(f"WARNING: {label}", file=stream, flush=True)
        warning = f"{warning}; {label}" if warning else label
    ctx = RunContext(
        cfg=cfg, spec=spec, out=out, population=population, strategy=strategy, places=places, store=store,
        test=data.test,
        metric_name=get_task(cfg.task.name).metric, warning=warning,
        metrics=MetricsWriter(out, stream=stream), stream=stream, tokenizer=data.tokenizer_info,
        initial_model=initial_model, device=device, base_model=base_model, text_tokenizer=data.tokenizer,
    )
    state = RunState(model=model, arrays=arrays, initial=initial, last_eval=initial)
    return ctx, state


def describe_model(cfg: RunConfig, model: UedpModel, stream: TextIO) -> tuple[dict | None, dict[str, dict]]:
    """Print what the run trains (the noised dimension, its share of the model, a checkpoint's base and LoRA) and
    return summary.json's base_model record and the record every training message carries about the base
    ({BASE_RECORD: {"digest": ...}} for a checkpoint, else {}): the base never travels, nodes check its digest."""
    trainable, total = parameter_counts(model)
    checkpoint = checkpoint_of(cfg.model.name, cfg.model.option_dict())
    lora = cfg.model.lora
    adapters = f", LoRA r={lora.r} alpha={lora.alpha:g}" if lora.r else ""
    if checkpoint is None:
        print(f"model {cfg.model.name}: {trainable:,} of {total:,} parameters trained and sent "
              f"({trainable / total:.2%}; the noised dimension {trainable:,}){adapters}", file=stream, flush=True)
        return None, {}
    digest = base_digest(checkpoint.path)
    print(f"model {cfg.model.name} from checkpoint {checkpoint.path} (base digest {digest[:16]}...){adapters}: "
          f"{trainable:,} of {total:,} parameters trained and sent ({trainable / total:.2%}; the noised dimension "
          f"{trainable:,}); the base stays on every node", file=stream, flush=True)
    record = {"entry": cfg.model.name, "path": str(checkpoint.path), "digest": digest,
              "lora": dataclasses.asdict(lora) if lora.r else None}
    corpus = recorded_public_corpus_of(checkpoint.path)  # a public start this project saved as a checkpoint
    if corpus is not None:
        refuse_private_start(corpus, private_dataset(cfg), where=checkpoint.where)
        print(f"the checkpoint was pretrained on public text: {corpus}", file=stream, flush=True)
        record["public_corpus"] = corpus
    return record, {BASE_RECORD: {"digest": digest}}


def evaluate(model: UedpModel, test: EncodedSentences | None, *, device: str = "cpu") -> dict[str, float]:
    """Central evaluation on the server's evaluation set ({} when the run has none), on `device`: the server's
    model itself on the CPU; elsewhere one copy of it kept there for the run, its weights refreshed in place
    before each evaluation (uedp.devices.evaluation_model: no deep copy per evaluation). The model, its
    optimizer and every release stay on the CPU, so a run's global models do not depend on where it evaluates."""
    if test is None:
        return {}
    return evaluate_encoded(evaluation_model(model, device), test)
