"""The client side of UeDP as a Flower client mod: the whole update, clipped once, and nothing else sent.

    app = ClientApp(mods=[uedp_mod])

    @app.train()
    def train(msg, context):
        ins = RoundInstructions.of(msg)          # the round's privacy instructions (uedp.protocol)
        rows, weights = select_rows(ins, ...)    # which of this node's sentences the round may use
        ...train from msg.content["arrays"] on those rows, loss weighted by `weights`...
        return Message(RecordDict({"arrays": ArrayRecord(new_model)}), reply_to=msg)

The train function returns its NEW model, as in any Flower app. The mod answers the server's probe itself (a
"train" message holding only the "uedp-probe" record, sent once before the first private round: the answer
tells the server that this ClientApp has the mod; the train function is not called). Around the train
function, for a UeDP training message (one with a "uedp" record; any other message passes through untouched):
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

While it calls the train function, the mod hands it what it read of that message, the instructions and the
global arrays (`received(msg)`: read-only views), so that a node parses and decodes them once; a train function
may equally read them from the message itself, as above.

The bound is injectable (`UeDPMod(bound=...)`) for the audit's broken controls only; `uedp_mod` is the sound
one every real run uses. Nothing about the round is logged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord, Context, Error, Message, MetricRecord
from flwr.common.constant import ErrorCode

from uedp.privacy.clipping import clip_update, scale
from uedp.privacy.replies import decode_array
from uedp.protocol import (
    ARRAYS_RECORD,
    ENTITY_ARRAYS_RECORD,
    METRICS_RECORD,
    RoundInstructions,
    SplitUpdate,
    is_probe,
    probe_answer,
    reply_content,
)

UpdateBound = Callable[[list[np.ndarray], RoundInstructions], list[np.ndarray]]
CallNext = Callable[[Message, Context], Message]


@dataclass(frozen=True)
class Received:
    """What the mod read of the training message it is handling: the round's instructions and the global arrays
    (read-only views of the message's buffers), handed to the train function inside it (`received`), which then
    neither parses nor decodes them again."""

    message: Message
    instructions: RoundInstructions
    arrays: list[np.ndarray]


_RECEIVED: ContextVar[Received | None] = ContextVar("uedp_received", default=None)


def received(msg: Message) -> Received | None:
    """What a UeDP mod around this train function read of `msg`: set while the mod calls the train function with
    this very message; None otherwise (no mod, or a mod in between passed another message), when the train
    function reads the message itself (`RoundInstructions.of`, `decoded`)."""
    got = _RECEIVED.get()
    return got if got is not None and got.message is msg else None


def bound_update(delta: list[np.ndarray], ins: RoundInstructions) -> list[np.ndarray]:
    """ONE clip of the whole update to ins.beta, then the node weight: norm <= w_u * beta exactly. beta = 0 (no
    clip) only in noiseless runs: RoundInstructions refuses it in private ones."""
    if ins.beta > 0:
        return clip_update(delta, ins.beta, w_u=ins.w_u)[0]
    return scale(delta, ins.w_u)


def model_update(new: Sequence[np.ndarray] | None, old: Sequence[np.ndarray]) -> list[np.ndarray]:
    """theta_local - theta_t, array by array in the model's dtype; ValueError if `new` is missing, has another
    number of arrays or shapes, or the update is not finite."""
    if new is None:
        raise ValueError(f"the train function's reply has no {ARRAYS_RECORD!r} ArrayRecord (its new model) with the "
                         "global model's keys")
    if len(new) != len(old):
        raise ValueError(f"the new model has {len(new)} arrays, the global model {len(old)}")
    delta = []
    for after, before in zip(new, old):
        if after.shape != before.shape:
            raise ValueError(f"an array has shape {after.shape}, the global model's {before.shape}")
        d = after - before
        if not np.issubdtype(d.dtype, np.floating) or not np.isfinite(d).all():
            raise ValueError("the update is not finite (NaN/Inf) or not floating point")
        delta.append(d)
    return delta


def decoded(record: ArrayRecord | None, keys: list[str] | None = None) -> list[np.ndarray] | None:
    """The arrays of `record` by `keys` (None: its own order), decoded without a copy where the payload is a
    plain .npy (uedp.privacy.replies.decode_array); None if it is missing or its keys are not `keys`."""
    if not isinstance(record, ArrayRecord) or (keys is not None and list(record.keys()) != keys):
        return None
    out = []
    for array in record.values():
        fast = decode_array(array)
        out.append(fast if fast is not None else array.numpy())
    return out


def error_reply(msg: Message, exc: BaseException) -> Message:
    """The node's reply when its round failed: an error naming the exception's type only. Flower's own error
    reply would carry str(exc), which can quote the node's text (a corpus error names its sentence)."""
    return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                         reason=f"the train function or the update failed ({type(exc).__name__}); its message "
                                "stays on the node"), reply_to=msg)


@dataclass(frozen=True)
class UeDPMod:
    """The client mod (module docstring); `bound` is the sound `bound_update` unless a control replaces it.

    Its parts serve a train function that already holds numpy arrays too (the project's ClientApp:
    client/app.py): `reply(msg, ins, old, new_parts, metrics)` makes the reply from the global and new models'
    arrays, and `guarded(msg, fn)` turns any exception of `fn()` into `error_reply`: one implementation of the
    update, its clip and the reply, whichever way a node's models arrive."""

    bound: UpdateBound = bound_update

    def _bounded(self, new: Sequence[np.ndarray] | None, old: Sequence[np.ndarray],
                 ins: RoundInstructions) -> list[np.ndarray]:
        bounded = self.bound(model_update(new, old), ins)
        return [np.asarray(d, dtype=o.dtype) for d, o in zip(bounded, old)]  # the model's dtype, as sent

    def _part(self, new: Sequence[np.ndarray] | None, old: Sequence[np.ndarray],
              ins: RoundInstructions) -> list[np.ndarray]:
        """One part of a split update, ZERO if it cannot be bounded (every exception: module docstring)."""
        try:
            return self._bounded(new, old, ins)
        except Exception:  # noqa: BLE001 - any failure of one part must leave the other part as it is
            return [np.zeros_like(o) for o in old]

    def update(self, ins: RoundInstructions, old: Sequence[np.ndarray],
               new_parts: Sequence[Sequence[np.ndarray] | None]) -> list[np.ndarray] | SplitUpdate:
        """The bounded update of the new model (a split update: of its two new models, part by part)."""
        if ins.spec.split:
            return SplitUpdate(free=self._part(new_parts[0], old, ins),
                               entity=self._part(new_parts[1] if len(new_parts) > 1 else None, old,
                                                 dataclasses.replace(ins, beta=ins.gamma)))
        return self._bounded(new_parts[0], old, ins)

    def reply(self, msg: Message, ins: RoundInstructions, old: Sequence[np.ndarray],
              new_parts: Sequence[Sequence[np.ndarray] | None], metrics: Mapping[str, float] | MetricRecord | None,
              *, keys: list[str] | None = None) -> Message:
        """The reply to `msg`: the bounded update (by the global record's `keys`), and `metrics` only in a
        non-private run."""
        update = self.update(ins, old, new_parts)
        return Message(reply_content(update, None if ins.private else metrics, keys=keys), reply_to=msg)

    def guarded(self, msg: Message, fn: Callable[[], Message]) -> Message:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - whatever failed, the reply says only that it failed
            return error_reply(msg, exc)

    def __call__(self, msg: Message, context: Context, call_next: CallNext) -> Message:
        if msg.metadata.message_type != "train":
            return call_next(msg, context)
        if is_probe(msg):  # the server asks whether this ClientApp has the mod: answered here, never by the app
            return probe_answer(msg)
        ins = RoundInstructions.of(msg)
        if ins is None:  # not a UeDP training message
            return call_next(msg, context)
        return self.guarded(msg, lambda: self._from_records(msg, context, call_next, ins))

    def _from_records(self, msg: Message, context: Context, call_next: CallNext, ins: RoundInstructions) -> Message:
        glob = msg.content.array_records[ARRAYS_RECORD]
        keys = list(glob.keys())
        old = decoded(glob)
        assert old is not None
        for a in old:  # the train function gets these very arrays (`received`): never written in place
            a.flags.writeable = False
        token = _RECEIVED.set(Received(msg, ins, old))
        try:
            reply = call_next(msg, context)
        finally:
            _RECEIVED.reset(token)
        if reply.has_error():
            return Message(Error(code=reply.error.code, reason="the train function replied with an error"),
                           reply_to=msg)
        records = reply.content.array_records
        new_parts = [decoded(records.get(ARRAYS_RECORD), keys), decoded(records.get(ENTITY_ARRAYS_RECORD), keys)]
        return self.reply(msg, ins, old, new_parts, reply.content.metric_records.get(METRICS_RECORD), keys=keys)


uedp_mod = UeDPMod()
