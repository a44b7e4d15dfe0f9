"""The public base a model starts from, checked on every node: only what is trained travels.

    UserEntityDP(..., records=base_records(model_dir))     # server: each training message carries the digest
    verify_base(msg, model_dir)                            # node, in the train function: refuse another base

With LoRA (or any frozen weights) a node receives only the trainable arrays; the frozen base is loaded by
each node from its own copy. Every node must start from the SAME public base, or the updates mean something
else on each node and the release is trained on a model nobody published. The server sends the SHA-256 of
the base's config.json and weight files (`uedp.models.checkpoints.base_digest`) in a "base" record with every
training message, and `verify_base` raises `BaseCheckpointMismatch` (naming both digests, no data) when this
node's copy differs; the client mod turns the exception into an error reply, which the server counts as a
zero contribution. The digest is public: the base is.
"""

from __future__ import annotations

from pathlib import Path

from flwr.app import ConfigRecord, Message

from uedp.models.checkpoints import BaseCheckpointMismatch, base_digest
from uedp.protocol import BASE_RECORD


def base_records(path: str | Path) -> dict[str, ConfigRecord]:
    """The record every training message carries about the base checkpoint in directory `path`: pass it as
    `UserEntityDP(records=...)`."""
    return {BASE_RECORD: ConfigRecord({"digest": base_digest(Path(path))})}


def verify_base(msg: Message, path: str | Path) -> None:
    """BaseCheckpointMismatch unless this node's base checkpoint (directory `path`) has the digest the
    training message carries (a message without one was sent by a server that checks no base: nothing to do)."""
    record = msg.content.config_records.get(BASE_RECORD)
    if record is None:
        return
    ours, theirs = base_digest(Path(path)), str(record.get("digest", ""))
    if ours != theirs:
        raise BaseCheckpointMismatch(f"this node's base checkpoint {path} has digest {ours}, the server trains from "
                                     f"{theirs}: refusing to train (every node loads the same public base)")
