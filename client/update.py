"""The data owner's side of a round (contract steps 3-6): from a training message to the update it returns.

`ClientRound()(cfg, partition_id, weights, ins)`: read the user's sentences and entity sets (user
`partition_id` of the run's prepared corpus, cached in this process; or, with `.owner(...)`, the owner's own
file, node config data-path, cached on its disk: uedp.owners), select sentences as the round's mechanism says
(uedp.privacy.mechanisms: keyed-hash entity sampling with the "every entity sampled" rule and the entity-cap
slot, or every sentence), train from the received global model with entity weights, then clip the WHOLE update
theta_local - theta_t to beta ONCE and scale it by w_u. In private runs nothing but the update is returned: no
loss, count or entity statistic, and nothing about the round is logged.

`client_update` is the instance every real run uses. Two parts are injectable, for the audit's broken controls
only (uedp.audit.controls): a hook on the gradients before each local step, and the function that bounds the
update (`bound_update` here). Nothing else differs, so a control is this code with one part swapped, never a
copy of it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from uedp.config import RunConfig
from uedp.models.base import UedpModel, get_weights, set_weights
from uedp.owners import model_shape, owner_data
from uedp.pipeline import UserData, load_manifest, load_user_data, new_model
from uedp.privacy.clipping import clip_update, scale
from uedp.privacy.selection import SelectionParams, select_sentences
from uedp.protocol import SplitUpdate, TrainInstructions
from uedp.tokenization import TextTokenizer
from uedp.training import LocalTraining, local_train

GradientHook = Callable[[TrainInstructions, Sequence[torch.nn.Parameter]], None]
UpdateBound = Callable[[list[np.ndarray], TrainInstructions], list[np.ndarray]]


# Encoded user data, per process. A simulation runs every virtual client of a run in its few actor processes
# (~100 users each on 2 cores at N = 200); the cache must hold an actor's share of the population, or each
# sampled user's data is read and encoded again (~8 ms) nearly every round. ~40-100 kB a user here: the
# 5,000-user runs (2,500 users an actor) stay under ~250 MB per actor.
USER_CACHE_SIZE = 4096


@functools.lru_cache(maxsize=USER_CACHE_SIZE)
def _user_data(cfg_key: tuple, partition_id: int, deidentified: bool) -> UserData:
    return load_user_data(RunConfig.from_flat(dict(cfg_key)), partition_id, deidentified=deidentified)


@functools.lru_cache(maxsize=2)
def _model(cfg_key: tuple):
    cfg = RunConfig.from_flat(dict(cfg_key))
    return new_model(cfg, load_manifest(cfg))


def select(data: UserData, ins: TrainInstructions) -> tuple[np.ndarray, np.ndarray]:
    """Rows used this round and their weights omega(x)."""
    if not ins.spec.keyed:  # every sentence of the sampled user, weight 1
        n = len(data.sids)
        return np.arange(n), np.ones(n)
    params = SelectionParams(
        q_e=ins.q_e, q_s=ins.q_s, k_cap=ins.k_cap or None, m_max=ins.m_max if ins.k_cap else None,
        slot=ins.slot if ins.k_cap else None,
    )
    sel = select_sentences(ins.key, user=data.user, sids=data.sids.tolist(), entities=data.entities,
                           params=params)
    rows = np.flatnonzero(sel.mask)
    return rows, sel.weights[rows]


def bound_update(delta: list[np.ndarray], ins: TrainInstructions) -> list[np.ndarray]:
    """ONE clip of the whole update to beta, then the user weight: norm <= w_u * beta exactly. beta = 0
    (no clip) only in noiseless runs: TrainInstructions refuses it in private ones."""
    if ins.beta > 0:
        return clip_update(delta, ins.beta, w_u=ins.w_u)[0]
    return scale(delta, ins.w_u)


@dataclass(frozen=True)
class ClientRound:
    gradient_hook: GradientHook | None = None  # hook(ins, parameters with .grad) before each local step
    bound: UpdateBound = bound_update

    def __call__(self, cfg: RunConfig, partition_id: int, weights: list[np.ndarray], ins: TrainInstructions
                 ) -> tuple[list[np.ndarray], dict[str, float]]:
        """The update user `partition_id` of the run's corpus returns for one round, and (non-private runs
        only) training metrics."""
        key = tuple(sorted(cfg.to_flat().items()))
        return self.train(_user_data(key, partition_id, ins.spec.deidentify), _model(key), weights, ins)

    def owner(self, cfg: RunConfig, data_path: str, tokenizer: TextTokenizer, weights: list[np.ndarray],
              ins: TrainInstructions, *, identity: str) -> tuple[list[np.ndarray], dict[str, float]]:
        """The same for a data owner who reads only its own file (node config data-path; uedp.owners),
        encoded with the tokenizer the server shipped. `identity` is unique to this node (its Flower node
        id): it prefixes the file's own "user" name in the extended entities' identities, so two owners
        whose files name the same user never share an S-coin (docs/proofs.md section 2)."""
        data = owner_data(cfg, data_path, tokenizer, deidentified=ins.spec.deidentify)
        data = dataclasses.replace(data, user=f"node {identity}: {data.user}")
        return self.train(data, new_model(cfg, model_shape(cfg, tokenizer)), weights, ins)

    def train(self, data: UserData, model: UedpModel, weights: list[np.ndarray], ins: TrainInstructions
              ) -> tuple[list[np.ndarray] | SplitUpdate, dict[str, float]]:
        """Select, train from `weights`, bound the update (see the module docstring). A split update
        (uedp_split) trains twice from `weights`: on the selected entity-free sentences (bounded by beta)
        and on the selected sentences with entities (bounded by gamma), and returns both parts."""
        rows, omega = select(data, ins)
        if not ins.spec.split:
            return self._bounded_update(data, model, weights, rows, omega, ins)
        has_entity = np.fromiter((len(e) > 0 for e in data.entities), dtype=bool, count=len(data.sids))[rows]
        free = self._part(data, model, weights, rows[~has_entity], omega[~has_entity], ins)
        entity = self._part(data, model, weights, rows[has_entity], omega[has_entity],
                            dataclasses.replace(ins, beta=ins.gamma))
        return SplitUpdate(free=free, entity=entity), {}

    def _part(self, data: UserData, model: UedpModel, weights: list[np.ndarray], rows: np.ndarray,
              omega: np.ndarray, ins: TrainInstructions) -> list[np.ndarray]:
        """One part of a split update; a part whose training fails (non-finite, cannot be clipped) is ZERO
        and the other part is still sent. Failing the whole reply would make the free part's presence depend
        on the entity sentences (docs/proofs.md section 9, F1). Nothing about the failure is logged."""
        try:
            return self._bounded_update(data, model, weights, rows, omega, ins)[0]
        except (ValueError, ArithmeticError):
            return [np.zeros_like(w, dtype=np.float32) for w in weights]

    def _bounded_update(self, data: UserData, model: UedpModel, weights: list[np.ndarray], rows: np.ndarray,
                        omega: np.ndarray, ins: TrainInstructions) -> tuple[list[np.ndarray], dict[str, float]]:
        """Train from `weights` on `rows` with weights `omega`, then bound the update (ins.beta)."""
        set_weights(model, weights)
        w = torch.zeros(len(data.sids), dtype=torch.float32)
        w[torch.as_tensor(rows, dtype=torch.long)] = torch.as_tensor(omega, dtype=torch.float32)
        training = LocalTraining(optimizer=ins.optimizer, lr=ins.lr, momentum=ins.momentum,
                                 local_epochs=ins.local_epochs, local_steps=ins.local_steps,
                                 batch_size=ins.batch_size)
        generator = None
        if ins.seed >= 0:  # reproduction runs only
            torch.manual_seed(ins.seed)
            generator = torch.Generator().manual_seed(ins.seed)
        hook = None if self.gradient_hook is None else functools.partial(self.gradient_hook, ins)
        loss, steps = local_train(model, data.encoded, torch.as_tensor(rows, dtype=torch.long), w, training,
                                  generator=generator, before_step=hook)
        delta = [new - old for new, old in zip(get_weights(model), weights)]
        delta = self.bound(delta, ins)
        metrics = {} if ins.private else {"train_loss": loss, "sentences": float(len(rows)), "steps": float(steps)}
        return [np.asarray(d, dtype=np.float32) for d in delta], metrics


client_update = ClientRound()
