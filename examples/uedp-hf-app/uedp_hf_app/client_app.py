"""The app's ClientApp: a data owner's node. UeDP adds the client mod and the sentence selection."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from uedp.entities.plain import detect, load_detector, protected_keys  # UeDP
from uedp.flower import RoundInstructions, select_rows, stable_sids, uedp_mod, verify_base  # UeDP
from uedp_hf_app.task import load_model, train, trainable, user_texts

app = ClientApp(mods=[uedp_mod])  # UeDP: the update is clipped once, as a whole, and nothing else is sent


def model_dir(context: Context) -> str:
    """This node's copy of the public base: its node config's model-dir, else the run config's."""
    return str(context.node_config.get("model-dir", context.run_config["model-dir"]))


@app.lifespan()
def warm_up(context: Context) -> Iterator[None]:
    """The model loads once per process, in the first message it handles, not inside the first round's
    training (with UeDP the detector too; that first message is the server's probe, before round 1). A failure
    here is left to the training message, which fails then: the probe's answer is the app's, not this node's."""
    with contextlib.suppress(Exception):
        load_detector(str(context.run_config["detector"]))  # UeDP
        load_model(model_dir(context), int(context.run_config["lora-r"]))
    yield


@app.train()
def local_training(msg: Message, context: Context) -> Message:
    cfg, config = context.run_config, msg.content["config"]
    verify_base(msg, model_dir(context))  # UeDP: this node's base is the one the server trains from
    data_path = str(context.node_config.get("data-path", cfg["data-path"]))
    user, texts = user_texts(data_path, int(context.node_config.get("partition-id", 0)))
    entities = protected_keys(detect(list(texts), detector=str(cfg["detector"])))  # UeDP
    rows, weights = select_rows(RoundInstructions.of(msg), owner=f"node {context.node_id}: {user}",  # UeDP
                                entities=entities, sids=stable_sids(list(texts), entities))  # UeDP
    model, tokenizer = load_model(model_dir(context), int(cfg["lora-r"]))
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict(), strict=False)
    train(model, tokenizer, [texts[i] for i in rows], [float(w) for w in weights], lr=float(config["lr"]),
          epochs=int(config["epochs"]), max_len=int(cfg["max-len"]))
    content = RecordDict({"arrays": ArrayRecord(trainable(model)),
                          "metrics": MetricRecord({"num-examples": len(rows)})})  # dropped in private runs
    return Message(content, reply_to=msg)
