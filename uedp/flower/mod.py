"""The client side of UeDP as a Flower client mod: the whole update, clipped once, and nothing else sent.

    app = ClientApp(mods=[uedp_mod])

    @app.train()
    def train(msg, context):
        ins = RoundInstructions.of(msg)          # the round's privacy instructions (uedp.protocol)
        rows, weights = select_rows(ins, ...)    # which of this node's sentences the round may use
        ...train from msg.content["arrays"] on those rows, loss weighted by `weights`...
        return Message(RecordDict({"arrays": ArrayRecord(new_model)}), reply_to=msg)

The train function returns its NEW model, as in any Flower app. The mod, around it, for a UeDP training
message (one with a "uedp" record; any other message passes through untouched):
  1. keeps the global arrays theta_t the message carries;
  2. calls the train function;
  3. computes the update theta_local - theta_t (per array, in the arrays' dtype, by the global record's
     keys), refuses NaN/Inf, and bounds it: ONE clip of the WHOLE update to beta (all arrays together,
     never per step), times w_u: norm <= w_u beta exactly (uedp.privacy.clipping);
  4. replies with the update only ("update"; uedp.protocol), plus the train function's "metrics" record in a
     non-private run: a private reply carries no loss, count or other statistic.
A split update (mechanism uedp_split) has a second part: the train function also returns "arrays_entity"
(trained from the same theta_t on the sentences whose entities were all sampled), bounded to gamma. Each
part that cannot be bounded (missing, wrong keys or shapes, NaN/Inf, a clip that fails) is ZERO and the other
part is still sent: failing the whole reply would make the entity-free part's presence depend on the entity
sentences (docs/proofs.md Theorem 3). An update of one part that cannot be bounded, or a train function
that raises, gives an error reply, which the server counts as a zero contribution, exactly like a missing
one; its reason names the exception's type only (Flower's own error reply would quote the exception's
message, which can quote the node's text).

The bound is injectable (`UeDPMod(bound=...)`) for the audit's broken controls only; `uedp_mod` is the sound
one every real run uses. Nothing about the round is logged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord, Context, Error, Message
from flwr.common.constant import ErrorCode

from uedp.privacy.clipping import clip_update, scale
from uedp.protocol import (
    ARRAYS_RECORD,
    ENTITY_ARRAYS_RECORD,
    METRICS_RECORD,
    RoundInstructions,
    SplitUpdate,
    reply_content,
)

UpdateBound = Callable[[list[np.ndarray], RoundInstructions], list[np.ndarray]]
CallNext = Callable[[Message, Context], Message]


def bound_update(delta: list[np.ndarray], ins: RoundInstructions) -> list[np.ndarray]:
    """ONE clip of the whole update to ins.beta, then the node weight: norm <= w_u * beta exactly. beta = 0 (no
    clip) only in noiseless runs: RoundInstructions refuses it in private ones."""
    if ins.beta > 0:
        return clip_update(delta, ins.beta, w_u=ins.w_u)[0]
    return scale(delta, ins.w_u)


def model_update(new: ArrayRecord | None, keys: list[str], old: list[np.ndarray]) -> list[np.ndarray]:
    """theta_local - theta_t by the global record's keys; ValueError if `new` is missing, has other keys or
    shapes, or is not finite."""
    if not isinstance(new, ArrayRecord):
        raise ValueError(f"the train function's reply has no {ARRAYS_RECORD!r} ArrayRecord (its new model)")
    if list(new.keys()) != keys:
        raise ValueError("the new model's arrays are not the global model's (keys or order differ)")
    delta = []
    for key, before in zip(keys, old):
        after = new[key].numpy()
        if after.shape != before.shape:
            raise ValueError(f"array {key!r} has shape {after.shape}, the global model's {before.shape}")
        d = after - before
        if not np.issubdtype(d.dtype, np.floating) or not np.isfinite(d).all():
            raise ValueError("the update is not finite (NaN/Inf) or not floating point")
        delta.append(d)
    return delta


@dataclass(frozen=True)
class UeDPMod:
    """The client mod (module docstring); `bound` is the sound `bound_update` unless a control replaces it."""

    bound: UpdateBound = bound_update

    def _bounded(self, new: ArrayRecord | None, keys: list[str], old: list[np.ndarray],
                 ins: RoundInstructions) -> list[np.ndarray]:
        bounded = self.bound(model_update(new, keys, old), ins)
        return [np.asarray(d, dtype=o.dtype) for d, o in zip(bounded, old)]  # the model's dtype, as sent

    def _part(self, new: ArrayRecord | None, keys: list[str], old: list[np.ndarray],
              ins: RoundInstructions) -> list[np.ndarray]:
        """One part of a split update, ZERO if it cannot be bounded (every exception: module docstring)."""
        try:
            return self._bounded(new, keys, old, ins)
        except Exception:  # noqa: BLE001 - any failure of one part must leave the other part as it is
            return [np.zeros_like(o) for o in old]

    def __call__(self, msg: Message, context: Context, call_next: CallNext) -> Message:
        if msg.metadata.message_type != "train":
            return call_next(msg, context)
        ins = RoundInstructions.of(msg)
        if ins is None:  # not a UeDP training message
            return call_next(msg, context)
        try:
            return self._reply(msg, context, call_next, ins)
        except Exception as exc:  # noqa: BLE001 - whatever failed, the reply says only that it failed
            # Flower's own error reply would carry str(exc), which can quote the node's text (a corpus error
            # names its sentence); the exception's type names the library that raised it, nothing of the data.
            return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                 reason=f"the train function or the update failed ({type(exc).__name__}); "
                                        "its message stays on the node"), reply_to=msg)

    def _reply(self, msg: Message, context: Context, call_next: CallNext, ins: RoundInstructions) -> Message:
        glob = msg.content.array_records[ARRAYS_RECORD]
        keys = list(glob.keys())
        old = [glob[k].numpy() for k in keys]
        reply = call_next(msg, context)
        if reply.has_error():
            return Message(Error(code=reply.error.code, reason="the train function replied with an error"),
                           reply_to=msg)
        records = reply.content.array_records
        if ins.spec.split:
            update: list[np.ndarray] | SplitUpdate = SplitUpdate(
                free=self._part(records.get(ARRAYS_RECORD), keys, old, ins),
                entity=self._part(records.get(ENTITY_ARRAYS_RECORD), keys, old,
                                  dataclasses.replace(ins, beta=ins.gamma)))
        else:
            update = self._bounded(records.get(ARRAYS_RECORD), keys, old, ins)
        metrics = None if ins.private else reply.content.metric_records.get(METRICS_RECORD)
        return Message(reply_content(update, metrics, keys=keys), reply_to=msg)


uedp_mod = UeDPMod()
