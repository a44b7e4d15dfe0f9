"""The data owner's side of a round (contract steps 3-6), as a Flower ClientApp.

Per training message: read the user's sentences and entity sets (cached in this process after the first
round), select sentences by keyed hash with the round key ("every entity sampled", slot permission with
the entity cap), train from the received global model with entity weights, then clip the WHOLE update
theta_local - theta_t to beta ONCE, scale by w_u, and reply with the update only. In private runs no
loss, count or entity statistic leaves the client, and nothing about the round is logged.

`make_client_app(cfg)` binds a RunConfig (Hydra entry point, tests); the module-level `app` reads the
config from `context.run_config` (`flwr run`).
"""

from __future__ import annotations

import functools
import time

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from uedp.config import RunConfig
from uedp.models.base import get_weights, set_weights
from uedp.pipeline import UserData, load_manifest, load_user_data, new_model
from uedp.privacy.clipping import clip_update, scale
from uedp.privacy.selection import SelectionParams, select_sentences
from uedp.protocol import TrainInstructions
from uedp.training import LocalTraining, local_train


@functools.lru_cache(maxsize=64)
def _user_data(cfg_key: tuple, partition_id: int, deidentified: bool) -> UserData:
    return load_user_data(RunConfig.from_flat(dict(cfg_key)), partition_id, deidentified=deidentified)


@functools.lru_cache(maxsize=2)
def _model(cfg_key: tuple):
    cfg = RunConfig.from_flat(dict(cfg_key))
    return new_model(cfg, load_manifest(cfg))


def select(data: UserData, ins: TrainInstructions) -> tuple[np.ndarray, np.ndarray]:
    """Rows used this round and their weights omega(x)."""
    if ins.mode in ("user_dp", "all", "deid"):
        n = len(data.sids)
        return np.arange(n), np.ones(n)
    params = SelectionParams(
        q_e=ins.q_e, q_s=ins.q_s, mode=ins.mode,
        k_cap=ins.k_cap or None, m_max=ins.m_max if ins.k_cap else None,
        slot=ins.slot if ins.k_cap else None,
    )
    sel = select_sentences(ins.key, user=data.user, sids=data.sids.tolist(), entities=data.entities,
                           params=params)
    rows = np.flatnonzero(sel.mask)
    return rows, sel.weights[rows]


def client_update(cfg: RunConfig, partition_id: int, weights: list[np.ndarray], ins: TrainInstructions
                  ) -> tuple[list[np.ndarray], dict[str, float]]:
    """The update this user returns for one round, and (non-private runs only) training metrics."""
    key = tuple(sorted(cfg.to_flat().items()))
    data = _user_data(key, partition_id, ins.mode == "deid")
    model = _model(key)
    set_weights(model, weights)
    rows, omega = select(data, ins)
    w = torch.zeros(len(data.sids), dtype=torch.float32)
    w[torch.as_tensor(rows, dtype=torch.long)] = torch.as_tensor(omega, dtype=torch.float32)
    training = LocalTraining(optimizer=ins.optimizer, lr=ins.lr, momentum=ins.momentum,
                             local_epochs=ins.local_epochs, local_steps=ins.local_steps,
                             batch_size=ins.batch_size)
    generator = None
    if ins.seed >= 0:  # reproduction runs only
        torch.manual_seed(ins.seed)
        generator = torch.Generator().manual_seed(ins.seed)
    loss, steps = local_train(model, data.encoded, torch.as_tensor(rows, dtype=torch.long), w, training,
                              generator=generator)
    delta = [new - old for new, old in zip(get_weights(model), weights)]
    if ins.beta > 0:  # ONE clip of the whole update, then the user weight: norm <= w_u * beta exactly
        delta, _ = clip_update(delta, ins.beta, w_u=ins.w_u)
    else:  # noiseless FedAvg only (TrainInstructions refuses beta = 0 in private runs)
        delta = scale(delta, ins.w_u)
    metrics = {} if ins.private else {"train_loss": loss, "sentences": float(len(rows)), "steps": float(steps)}
    return [np.asarray(d, dtype=np.float32) for d in delta], metrics


def inject_fault(fault: str) -> None:
    """Fault injection for the fault-tolerance tests (experiments/federation.py), set per node with node
    config `fault`: "raise" (the ClientApp raises: an error reply) or "hang:SECONDS" (it sleeps past the
    round time-out: a missing reply). Empty (the default): nothing. Either way the server treats the
    user as a zero contribution under the fixed denominator, so the privacy accounting is unchanged."""
    if not fault:
        return
    kind, _, arg = fault.partition(":")
    if kind == "raise":
        raise RuntimeError("injected fault (node config fault='raise')")
    if kind == "hang":
        time.sleep(float(arg or 3600))
        return
    raise ValueError(f"node config fault={fault!r}: expected 'raise' or 'hang:SECONDS'")


def make_client_app(cfg: RunConfig | None = None) -> ClientApp:
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        torch.set_num_threads(1)
        run_cfg = cfg if cfg is not None else RunConfig.from_flat(dict(context.run_config))
        inject_fault(str(context.node_config.get("fault", "")))
        ins = TrainInstructions.from_record(msg.content["config"])
        weights = msg.content["arrays"].to_numpy_ndarrays()
        update, metrics = client_update(run_cfg, int(context.node_config["partition-id"]), weights, ins)
        content = RecordDict({"update": ArrayRecord(update)})
        if metrics:
            content["metrics"] = MetricRecord(metrics)
        return Message(content, reply_to=msg)

    return app


app = make_client_app()
