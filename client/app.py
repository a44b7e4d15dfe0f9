"""The ClientApp: the data owner's side of a round (client/update.py) behind Flower's Message API.

Per query message (strategy=dp_bart): client/rewrite.py rewrites this owner's sentences under local DP and
replies with the rewrites only. Per training message: decode the instructions (uedp.protocol), run
`client_update` on this node's data
(federation.data = "corpus": user partition-id of the run's corpus; "owners": only the file node config `data-
path` names, encoded with the tokenizer the message carries), and reply with the update only (plus training
metrics in non-private runs). In private runs nothing about the round is logged.

`make_client_app(cfg)` binds a RunConfig (Hydra entry point, tests); the module-level `app` reads the config
from `context.run_config` (`flwr run`).
"""

from __future__ import annotations

import time

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from client.rewrite import client_rewrite
from client.update import client_update
from uedp.config import RunConfig
from uedp.owners import shipped_tokenizer
from uedp.protocol import REWRITES_RECORD, TOKENIZER_RECORD, TrainInstructions


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
        data_path = str(context.node_config.get("data-path", ""))
        if run_cfg.federation.data == "owners":  # this owner's own file, the tokenizer the server shipped
            if not data_path:
                raise ValueError("federation.data = owners: start this SuperNode with node config data-path")
            tokenizer = shipped_tokenizer(dict(msg.content[TOKENIZER_RECORD]))
            update, metrics = client_update.owner(run_cfg, data_path, tokenizer, weights, ins)
        else:
            update, metrics = client_update(run_cfg, int(context.node_config["partition-id"]), weights, ins)
        content = RecordDict({"update": ArrayRecord(update)})
        if metrics:
            content["metrics"] = MetricRecord(metrics)
        return Message(content, reply_to=msg)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        """strategy=dp_bart: rewrite this owner's sentences under local DP; reply with the rewrites only."""
        torch.set_num_threads(1)
        run_cfg = cfg if cfg is not None else RunConfig.from_flat(dict(context.run_config))
        inject_fault(str(context.node_config.get("fault", "")))
        partition = context.node_config.get("partition-id")
        record = client_rewrite(run_cfg, partition_id=None if partition is None else int(partition),
                                data_path=str(context.node_config.get("data-path", "")))
        return Message(RecordDict({REWRITES_RECORD: record}), reply_to=msg)

    return app


app = make_client_app()
