"""The server's intake of one round's replies: which replies count, and what a counted one carries
(docs/mechanism.md step 7: privacy never depends on clients behaving; a reply is hostile until checked).

    stamp(message)                                     -> message, with a fresh id (configure_train)
    intake(messages, replies, records=, shapes=, private=) -> Intake

Tie to the plan. A reply counts only if it answers one of THIS round's plan messages: a flwr Message whose
`reply_to_message_id` is that message's (non-empty, unique) id, whose `src_node_id` is that message's
destination node, and whose run, group (the round) and message type are the message's; and only the first
such reply of a node counts (at most one reply per sampled node, ever). The one other reply tied to a
message is the SuperLink's own error reply for it (source SUPERLINK_NODE_ID, a node or reply unavailable),
unless a plan message goes to a node of that id (the in-process grid's node ids are 0..N-1): it counts as
that node's failed reply. Anything else is REFUSED: a late reply to an earlier round, a reply to no message
of the plan, one from a node that was not sent the message, one without metadata, a node's second reply
(counted also as `duplicate`). A refused reply contributes exactly zero, like a missing one. Plan messages
get an id when they are built (`stamp`); a Flower grid replaces it with its own when it pushes them (the
same Message objects: the plan sees the grid's ids).

Read the content. A counted reply FAILS if it is an error reply or is MALFORMED (counted also as
`malformed`): its records are not exactly the protocol's (`records`, each an ArrayRecord; in non-private
runs an optional MetricRecord "metrics" whose values are all finite numbers (its train_loss, if any, is
averaged for the operator); nothing else: a private reply carries nothing but its update). A failed
reply contributes zero.

Decode the update. The arrays of a well-formed reply are decoded only if the record holds exactly the
template's number of arrays, each a plain numeric .npy payload (no object, string or structured dtype) with
the template's shape in its header and exactly that many bytes after it; otherwise the part decodes to an
EMPTY update, which the re-check (uedp.privacy.aggregation.recheck) drops as a wrong shape. So a payload
far larger than the model, or a header that claims one, is never built (no np.load: it would allocate what
the header claims), and every counted update still goes through the re-check exactly as before.

Counts only, never a per-client value. Every reply is exactly one of: an update, failed, refused; every
sampled place is answered (an update or failed) or missing.
"""

from __future__ import annotations

import io
import math
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord
from flwr.common.constant import SUPERLINK_NODE_ID

from uedp.protocol import METRICS_RECORD

TRAIN_LOSS = "train_loss"
NUMPY_STYPE = "numpy.ndarray"  # flwr's SType.NUMPY
NUMERIC_KINDS = "biufc"  # bool, int, uint, float, complex: the re-check drops all but float, by dtype
HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Intake:
    """What a round's replies give the aggregation: the counted updates (one tuple of decoded parts per
    counted, well-formed reply, in reply order: the summation order), the non-private runs' train losses,
    and the counts."""

    updates: list[tuple[list[np.ndarray], ...]]
    train_loss: list[float]
    answered: int  # sampled places whose message got a counted reply (an update or a failure)
    failed: int  # error replies and malformed ones
    malformed: int
    refused: int  # not a reply to one of this round's messages from its node, or a node's second reply
    duplicate: int

    def counts(self) -> dict[str, int]:
        return {"failed": self.failed, "malformed": self.malformed, "refused": self.refused,
                "duplicate": self.duplicate}


def stamp(message: Message) -> Message:
    """Give a plan message a fresh id, as a grid does when it pushes it (so that replies can name it before
    any push: the in-process grid, tests). A Flower grid overwrites it with its own."""
    message.metadata.__dict__["_message_id"] = uuid.uuid4().hex
    return message


def _plan_index(messages: Sequence[Message]) -> dict[str, Message]:
    """The plan's messages by id; an empty or repeated id names no message (nothing can tie to it)."""
    ids = Counter(m.metadata.message_id for m in messages)
    return {m.metadata.message_id: m for m in messages if m.metadata.message_id and ids[m.metadata.message_id] == 1}


def tied_message(reply: Any, sent: dict[str, Message], *, superlink_errors: bool) -> Message | None:
    """The plan message `reply` answers, or None (then it is refused). `superlink_errors`: whether an error
    reply from SUPERLINK_NODE_ID ties to the message it names (no plan message goes to a node of that id)."""
    if not isinstance(reply, Message):
        return None
    got = reply.metadata
    msg = sent.get(got.reply_to_message_id) if isinstance(got.reply_to_message_id, str) else None
    if msg is None:
        return None
    if superlink_errors and got.src_node_id == SUPERLINK_NODE_ID and reply.has_error():
        return msg
    want = msg.metadata
    if (got.src_node_id, got.run_id, got.group_id, got.message_type) != (
            want.dst_node_id, want.run_id, want.group_id, want.message_type):
        return None
    return msg


def _finite_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an int beyond float range
        return False


def read_content(content: Any, *, records: Sequence[str],
                 private: bool) -> tuple[list[ArrayRecord], float | None] | None:
    """(the update records, the train loss or None) of a reply's content, or None if it is malformed."""
    allowed = set(records) if private else {*records, METRICS_RECORD}
    try:
        names = set(content.keys())
    except AttributeError:
        return None
    if not set(records) <= names <= allowed:
        return None
    parts = [content[name] for name in records]
    if not all(isinstance(p, ArrayRecord) for p in parts):
        return None
    loss = None
    if METRICS_RECORD in names:
        metrics = content[METRICS_RECORD]
        if not isinstance(metrics, MetricRecord) or not all(_finite_number(v) for v in metrics.values()):
            return None
        loss = float(metrics[TRAIN_LOSS]) if TRAIN_LOSS in metrics else None
    return parts, loss


_MAGIC = b"\x93NUMPY"
LENGTH_BYTES = {(1, 0): 2, (2, 0): 4}  # the header length field of each .npy version HEADER_READERS reads
PARSED_HEADERS: dict[bytes, tuple[Shape, bool, np.dtype, int]] = {}  # header bytes -> what numpy read in them
PARSED_HEADERS_MAX = 1024  # headers remembered: a stream of new ones is still parsed, never remembered past this


def _header(data: bytes) -> tuple[Shape, bool, np.dtype, int] | None:
    """(shape, fortran order, dtype, offset of the payload) that the .npy header of `data` says, or None where
    numpy reads none. numpy's parser (literal evaluation, ~30 us a header) reads each distinct header once: a
    model's arrays have the same headers every round."""
    size = LENGTH_BYTES.get((data[6], data[7])) if len(data) >= 8 and data[:6] == _MAGIC else None
    if size is None or len(data) < 8 + size:
        return None
    key = data[:8 + size + int.from_bytes(data[8:8 + size], "little")]
    known = PARSED_HEADERS.get(key)
    if known is not None:
        return known
    fp = io.BytesIO(key)
    try:
        read_header = HEADER_READERS[np.lib.format.read_magic(fp)]
        got, fortran, dtype = read_header(fp)
    except Exception:  # whatever a hostile header makes numpy raise: the payload is refused
        return None
    parsed = (tuple(got), bool(fortran), dtype, fp.tell())
    if len(PARSED_HEADERS) < PARSED_HEADERS_MAX:
        PARSED_HEADERS[key] = parsed
    return parsed


def decode_array(array: Any, shape: Shape | None = None) -> np.ndarray | None:
    """The array of a plain numeric .npy payload of exactly `shape` (None: whatever shape its header says),
    or None. Reads the header only (at most 10,000 bytes, evaluated literally) before any array exists; the
    result is a read-only view of the payload, never larger than it (no copy: faster than Array.numpy())."""
    if not isinstance(array, Array) or array.stype != NUMPY_STYPE or not isinstance(array.data, bytes):
        return None
    data = array.data
    header = _header(data)
    if header is None:
        return None
    got, fortran, dtype, offset = header
    if shape is None:
        shape = got
    if got != tuple(shape) or dtype.hasobject or dtype.kind not in NUMERIC_KINDS:
        return None
    count = math.prod(shape)
    if len(data) - offset != count * dtype.itemsize:
        return None
    return np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape, order="F" if fortran else "C")


def decode_update(record: ArrayRecord, shapes: Sequence[Shape]) -> list[np.ndarray]:
    """The record's arrays in order, if they are the template's (count, shapes; numeric dtypes); otherwise
    the empty update (the re-check drops it as a wrong shape)."""
    if len(record) != len(shapes):
        return []
    arrays = [decode_array(a, s) for a, s in zip(record.values(), shapes)]
    return [] if any(a is None for a in arrays) else arrays  # type: ignore[misc]


def intake(messages: Sequence[Message], replies: Iterable[Any], *, records: Sequence[str],
           shapes: Sequence[Shape], private: bool) -> Intake:
    """Tie each reply to the plan, read and decode the counted ones (see the module docstring)."""
    sent = _plan_index(messages)
    superlink_errors = all(m.metadata.dst_node_id != SUPERLINK_NODE_ID for m in messages)
    answered: set[int] = set()
    updates: list[tuple[list[np.ndarray], ...]] = []
    losses: list[float] = []
    failed = malformed = refused = duplicate = 0
    for reply in replies:
        msg = tied_message(reply, sent, superlink_errors=superlink_errors)
        if msg is None:
            refused += 1
            continue
        node = msg.metadata.dst_node_id
        if node in answered:
            refused += 1
            duplicate += 1
            continue
        answered.add(node)
        if reply.has_error():
            failed += 1
            continue
        read = read_content(reply.content, records=records, private=private)
        if read is None:
            failed += 1
            malformed += 1
            continue
        parts, loss = read
        updates.append(tuple(decode_update(p, shapes) for p in parts))
        if loss is not None:
            losses.append(loss)
    return Intake(updates, losses, len(answered), failed, malformed, refused, duplicate)
