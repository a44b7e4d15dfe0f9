"""The data owner's side of a round (docs/mechanism.md steps 3-5): from a training message to the model it trains.

`ClientRound()(cfg, partition_id, weights, ins, training)`: read the user's sentences and entity sets (user
`partition_id` of the run's prepared corpus, cached in this process and, in a simulation, shared by its actors:
client/shared_users.py; or, with `.owner(...)`, the owner's own file, node config data-path, cached on its disk:
uedp.owners), select sentences as the round's mechanism says
(uedp.flower.selection: keyed-hash entity sampling with the "every entity sampled" rule and the entity-cap
slot, an entity-free sentence's extended entity named by its stable id, which no other sentence or user
changes; or every sentence), and train from the received global model with entity weights (`training`: the
message's "config" record). It returns the NEW model (a split update: two, `SplitModels`) and, in
non-private runs only, training metrics. The update theta_local - theta_t is taken, clipped ONCE as a whole
to beta and scaled by w_u by the client mod around the ClientApp (uedp.flower.mod), the code every node runs:
this module never sends anything, and nothing about the round is logged.

The node's own log. Before its first training of a run (`log_share=True`, which the train function passes once per
node: client/app.py), a node logs the expected share of its training sentences a sampled round may train on, by
number of distinct entities per sentence (uedp.privacy.trainable, at the rates, cap and m_max the message carries)
and, in the same line, how many of them task.max_len cuts, at INFO, and a WARNING below
uedp.privacy.trainable.TINY_SHARE, on logger NODE_LOGGER ("uedp.node") only: counts of its own sentences and the
public settings, never an entity, a text or the round key, and never in a reply. That logger does not propagate to
the root logger (a process that runs the server too, the in-process grid or a Hydra job, never prints it through its
handlers) and has no handler of its own but a NullHandler (so no "last resort" line on stderr): a node's line is
printed only where the ClientApp attaches a stderr handler, on a node of its own (`node_log_to_stderr`:
client/app.py).

The model trains on the device federation.device resolves to on this node (uedp.devices: cpu, or cuda where
there is a GPU); the new model comes back as CPU float32 arrays (get_weights), so the update and its clip
are computed the same way on every device.

`client_update` is the instance every real run uses. A hook on the gradients before each local step is
injectable, for the audit's broken control only (uedp.audit.controls, with the mod's `bound` replaced too);
nothing else differs, so a control is this code with one part swapped, never a copy of it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from client.shared_users import shared_user_data
from uedp.config import RunConfig
from uedp.devices import resolve_device
from uedp.flower.selection import select_rows
from uedp.models.base import UedpModel, get_weights, set_weights
from uedp.owners import model_shape, owner_data
from uedp.pipeline import UserData, load_manifest, load_user_data, new_model, owner_task
from uedp.privacy.trainable import TINY_SHARE, trainable_share
from uedp.protocol import RoundInstructions
from uedp.tokenization import TextTokenizer
from uedp.training import LocalTraining, local_train

GradientHook = Callable[[RoundInstructions, Sequence[torch.nn.Parameter]], None]
Weights = list[np.ndarray]


@dataclass(frozen=True)
class SplitModels:
    """A split update's two new models (uedp_split), each trained from the same global model: `free` on the
    selected entity-free sentences, `entity` on the selected sentences with entities (the mod clips each to
    its own bound, beta and gamma)."""

    free: Weights
    entity: Weights


# Encoded user data, per process. A simulation runs every virtual client of a run in its few actor processes
# (~100 users each on 2 cores at N = 200); the cache must hold an actor's share of the population, or each
# sampled user's data is read and encoded again (~8 ms) nearly every round. ~40-100 kB a user here: the
# 5,000-user runs (2,500 users an actor) stay under ~250 MB per actor. Behind it, in a simulation, the actors
# share what each encoded (client/shared_users.py): a user is encoded once per simulation, not once per actor.
USER_CACHE_SIZE = 4096


@functools.lru_cache(maxsize=USER_CACHE_SIZE)
def _user_data(cfg_key: tuple, partition_id: int, deidentified: bool) -> UserData:
    return shared_user_data(RunConfig.from_flat(dict(cfg_key)), partition_id, deidentified, load_user_data,
                            flat=cfg_key)


@functools.lru_cache(maxsize=2)
def _model(cfg_key: tuple):
    cfg = RunConfig.from_flat(dict(cfg_key))
    return on_device(cfg, new_model(cfg, load_manifest(cfg)))


def on_device(cfg: RunConfig, model: UedpModel) -> UedpModel:
    """`model` on the device federation.device resolves to on this node (uedp.devices): its local training
    runs there (uedp.training.local_train moves each batch to it); get_weights copies the new model back to
    the CPU, where the client mod takes and clips the update."""
    device = resolve_device(cfg.federation.device)
    return model if device.type == "cpu" else model.to(device)


NODE_LOGGER = "uedp.node"  # the node's own log (module docstring)
node_log = logging.getLogger(NODE_LOGGER)
node_log.setLevel(logging.INFO)
node_log.propagate = False
node_log.addHandler(logging.NullHandler())


def node_log_to_stderr() -> bool:
    """Print the node's log on this process's stderr (idempotent), unless this process is a Ray worker: a
    simulation's node, whose output Ray forwards to the driver, the process that runs the server. Whether a
    handler is attached now."""
    ray = sys.modules.get("ray")
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        return False
    if not any(getattr(h, "uedp_node_stderr", False) for h in node_log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.uedp_node_stderr = True  # type: ignore[attr-defined]
        node_log.addHandler(handler)
    return True


def truncation_note(data: UserData) -> str:
    """How many of this node's training sentences task.max_len cuts (uedp.pipeline.EncodedSentences.truncation:
    a count, a share and the longest framed length), as a sentence for the node's log; "" where the lengths are
    unknown (an owner's data read back from its cache) or cannot be counted. Never raises."""
    try:
        cut = data.encoded.truncation()
    except Exception:  # noqa: BLE001 - the node's log line must never change the round
        return ""
    return "" if cut is None else cut.line("training")


def log_trainable_share(data: UserData, ins: RoundInstructions) -> dict | None:
    """Log (NODE_LOGGER) the expected share of this node's training sentences a sampled round of `ins`'s
    mechanism may train on (uedp.privacy.trainable), by distinct entities per sentence, and in the same line how
    many of them task.max_len cuts (`truncation_note`); a WARNING below TINY_SHARE. Counts and public settings
    only. Returns trainable_share's dict (None where it could not be computed: that is logged, never raised, so
    the round goes on exactly as without this line)."""
    note = truncation_note(data)
    try:
        keyed = ins.spec.keyed  # every other mechanism uses every sentence
        cap = ins.k_cap if keyed else 0
        t = trainable_share([len(set(e)) for e in data.entities], q_e=ins.q_e if keyed else 1.0,
                            q_s=ins.q_s if keyed else 1.0, k_cap=cap, m_max=ins.m_max if cap else None)
    except Exception as exc:  # noqa: BLE001 - the node's log line must never change the round
        node_log.warning("could not compute this node's expected trainable share (%s)%s", type(exc).__name__,
                         f"; {note}" if note else "")
        return None
    rows = t["by_entities"]
    parts = [f"{r['entities']}: {r['sentences']} at {r['probability']:.3g}" for r in rows if r["entities"] < 3]
    rest = [r for r in rows if r["entities"] >= 3]
    if rest:
        parts.append(f"3+: {sum(r['sentences'] for r in rest)} (expected {sum(r['expected'] for r in rest):.3g})")
    setting = t["setting"]
    node_log.info("expected share of this node's %d training sentences a sampled round of %s may train on: "
                  "%.3g%% (%.4g sentences; by entities per sentence, sentences at P(selectable): %s; q_e %g, "
                  "q_s %g, k_cap %d, m_max %s)%s", t["sentences"], ins.mechanism, 100 * t["share"], t["expected"],
                  "; ".join(parts) or "none", setting["q_e"], setting["q_s"], setting["k_cap"],
                  setting["m_max"] if setting["k_cap"] else "-", f"; {note}" if note else "")
    if t["share"] < TINY_SHARE:
        node_log.warning("a sampled round of %s may train on only %.3g%% of this node's sentences (below %g%%): "
                         "its text is entity-dense for this setting and it will barely train (uedp corpus-stats "
                         "shows the share by entities per sentence)", ins.mechanism, 100 * t["share"],
                         100 * TINY_SHARE)
    return t


def select(data: UserData, ins: RoundInstructions) -> tuple[np.ndarray, np.ndarray]:
    """Rows used this round and their weights omega(x). The extended entities are (data.user, stable id):
    the ids depend on each sentence alone, never on the corpus's row numbering (UserData.stable_ids)."""
    return select_rows(ins, owner=data.user, entities=data.entities, sids=data.stable_ids.tolist())


@dataclass(frozen=True)
class ClientRound:
    gradient_hook: GradientHook | None = None  # hook(ins, parameters with .grad) before each local step

    def __call__(self, cfg: RunConfig, partition_id: int, weights: Weights, ins: RoundInstructions,
                 training: LocalTraining, *, log_share: bool = False,
                 key: tuple | None = None) -> tuple[Weights | SplitModels, dict[str, float]]:
        """The new model user `partition_id` of the run's corpus trains in one round, and (non-private runs
        only) training metrics. `log_share`: first log the node's expected trainable share (module docstring).
        `key`: `cfg`'s flat items, sorted, where the caller holds them (client/app.py's NodeSetup)."""
        if key is None:
            key = tuple(sorted(cfg.to_flat().items()))
        return self.train(_user_data(key, partition_id, ins.spec.deidentify), _model(key), weights, ins, training,
                          log_share=log_share)

    def owner(self, cfg: RunConfig, data_path: str, tokenizer: TextTokenizer, weights: Weights,
              ins: RoundInstructions, training: LocalTraining, *, identity: str,
              log_share: bool = False) -> tuple[Weights | SplitModels, dict[str, float]]:
        """The same for a data owner who reads only its own file (node config data-path; uedp.owners),
        encoded with the tokenizer the server shipped. `identity` is unique to this node (its Flower node
        id): it prefixes the file's own "user" name in the extended entities' identities, so two owners
        whose files name the same user never share an S-coin (docs/proofs.md section 2)."""
        task = owner_task(cfg)
        data = owner_data(data_path, tokenizer, task, deidentified=ins.spec.deidentify)
        data = dataclasses.replace(data, user=f"node {identity}: {data.user}")
        model = on_device(cfg, new_model(cfg, model_shape(tokenizer, task)))
        return self.train(data, model, weights, ins, training, log_share=log_share)

    def train(self, data: UserData, model: UedpModel, weights: Weights, ins: RoundInstructions,
              training: LocalTraining, *, log_share: bool = False) -> tuple[Weights | SplitModels, dict[str, float]]:
        """Select, then train from `weights` (see the module docstring). A split update (uedp_split) trains
        twice from `weights`: on the selected entity-free sentences and on the selected sentences with
        entities, and returns both models. `log_share`: first log the node's expected trainable share."""
        if log_share:
            log_trainable_share(data, ins)
        rows, omega = select(data, ins)
        if not ins.spec.split:
            return self._trained(data, model, weights, rows, omega, ins, training)
        has_entity = np.fromiter((len(e) > 0 for e in data.entities), dtype=bool, count=len(data.sids))[rows]
        free = self._part(data, model, weights, rows[~has_entity], omega[~has_entity], ins, training)
        entity = self._part(data, model, weights, rows[has_entity], omega[has_entity], ins, training)
        return SplitModels(free=free, entity=entity), {}

    def _part(self, data: UserData, model: UedpModel, weights: Weights, rows: np.ndarray, omega: np.ndarray,
              ins: RoundInstructions, training: LocalTraining) -> Weights:
        """One part of a split update; a part whose training fails in ANY way is the global model itself (a
        zero update) and the other part is still sent. Failing the whole reply would make the free part's
        presence depend on the entity sentences (docs/proofs.md section 9, F1). Nothing about the failure is
        logged."""
        try:
            return self._trained(data, model, weights, rows, omega, ins, training)[0]
        except Exception:  # noqa: BLE001 - whatever the entity part raises, the free part stays as it is
            return [np.array(w, copy=True) for w in weights]

    def _trained(self, data: UserData, model: UedpModel, weights: Weights, rows: np.ndarray, omega: np.ndarray,
                 ins: RoundInstructions, training: LocalTraining) -> tuple[Weights, dict[str, float]]:
        """Train from `weights` on `rows` with weights `omega`; the new model and (non-private) metrics."""
        set_weights(model, weights)
        w = torch.zeros(len(data.sids), dtype=torch.float32)
        w[torch.as_tensor(rows, dtype=torch.long)] = torch.as_tensor(omega, dtype=torch.float32)
        generator = None
        if ins.seed >= 0:  # reproduction runs only
            torch.manual_seed(ins.seed)
            generator = torch.Generator().manual_seed(ins.seed)
        hook = None if self.gradient_hook is None else functools.partial(self.gradient_hook, ins)
        loss, steps = local_train(model, data.encoded, torch.as_tensor(rows, dtype=torch.long), w, training,
                                  generator=generator, before_step=hook)
        metrics = {} if ins.private else {"train_loss": loss, "sentences": float(len(rows)), "steps": float(steps)}
        return get_weights(model), metrics


client_update = ClientRound()
