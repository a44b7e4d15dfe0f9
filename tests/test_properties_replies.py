"""Property tests (hypothesis): the server treats client replies as hostile (docs/mechanism.md step 7).

Malformed replies reach UserEntityDP.aggregate_train: wrong shapes, wrong dtypes (int, bool, complex,
float16, float128, big-endian, str), NaN/Inf, extra and missing arrays, crafted .npy payloads (object
dtype, a header claiming a huge array, truncated or padded data, a torch stype, garbage), payloads far
larger than the model, missing, extra and mistyped records, error replies, garbage metrics (non-private
runs), replies to another round's messages, to no message of the plan, from a node that was not sent the
message, without metadata, and a node's second reply. Each must be refused (counted `refused`, of which
`duplicate`), failed (`failed`, of which `malformed`) or re-checked (the re-check statuses), with no
exception; the released sum must equal the sum of the re-checked updates of the FIRST reply each node
sent to its own message of this round, and so stay within the sensitivity bound (at most one counted
update per sampled node, each of norm <= w_max beta). Each generated reply carries what it was built to
be, and an oracle here derives the round's expected counts and sum from that alone.

Inputs tried per case: EXAMPLES (hypothesis max_examples; no example database, no deadline), one round per
input. Tiny models: two arrays, 10 coordinates, 4 nodes; noise switched off (exact zeros), so that the
released update times Z is the sum itself.
"""

from __future__ import annotations

import dataclasses
import io
import math
import tempfile
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, MetricRecord, RecordDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from runtime.local_grid import set_local_task_identity
from tests.helpers import ZeroNoise, operator_rows, split_probes
from uedp.config import PrivacyConfig
from uedp.flower.store import RunStore
from uedp.flower.strategy import Seams, UserEntityDP
from uedp.privacy.accountant import UeDPAccountant
from uedp.privacy.aggregation import STATUSES, recheck, recheck_split
from uedp.privacy.replies import stamp

TEMPLATE = [np.zeros((2, 3), np.float32), np.zeros(4, np.float32)]
SHAPES = [(2, 3), (4,)]
NODES, BETA, GAMMA = 4, 0.5, 0.25
# Inputs (rounds) tried per case: the numbers to report.
EXAMPLES = {"payloads": 150, "records": 100, "provenance": 150, "metrics": 80, "split": 80, "mixed": 150}


def _settings(case: str) -> settings:
    return settings(max_examples=EXAMPLES[case], deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


OUT: list[Any] = []  # the wrappers' ledger folder (one for the module; no run here is ever resumed)
OUTS: dict[int, Path] = {}  # each wrapper's own folder in it


@pytest.fixture(autouse=True, scope="module")
def _task_identity(tmp_path_factory):
    set_local_task_identity()  # flwr Messages outside a running app
    OUT[:] = [tmp_path_factory.mktemp("ledgers")]


class _Nodes:
    in_process_simulation = True  # a stand-in for a simulation's grid

    def get_node_ids(self):
        return range(10, 10 + NODES)  # not 1, Flower's SUPERLINK_NODE_ID (as a Flower node's random id)

    def send_and_receive(self, messages, *, timeout=None):
        return split_probes(messages)[0]  # its nodes run the client mod: they answer the probe


def _strategy(name: str = "user_dp") -> UserEntityDP:
    """The wrapper around Flower's FedAvg, applying each round's update to the zero model (so its new global
    arrays are the released update), no noise, every node sampled."""
    from flwr.serverapp.strategy import FedAvg

    privacy = PrivacyConfig(q_u=1.0, q_e=1.0, q_s=1.0, m_max=NODES, k_cap=0, beta=BETA, w_max=1.0,
                            gamma=GAMMA if name == "uedp_split" else 0.0, seed=0, target_epsilon=None)
    accountant = UeDPAccountant(name, privacy, num_users=NODES, rounds=10, noise_multiplier=1.0)
    out = Path(tempfile.mkdtemp(dir=OUT[0]))  # its own folder: its operator log holds its rounds' counts
    dp = UserEntityDP(FedAvg(), places=NODES, accountant=accountant, store=RunStore(out),
                      seams=Seams(noise=ZeroNoise()))
    OUTS[id(dp)] = out
    return dp


def _last_counts(s: UserEntityDP) -> dict[str, Any]:
    """The counts of the wrapper's last round, from its operator log (operator.jsonl)."""
    return operator_rows(OUTS[id(s)])[-1]


def _plan(s: UserEntityDP, rnd: int):
    plan = s.configure_train(rnd, ArrayRecord(TEMPLATE), ConfigRecord(), _Nodes())
    assert len(plan) == NODES  # q_u = 1: every node, one message each
    return plan


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _header(descr: str, shape: tuple[int, ...], *, fortran: bool = False) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": fortran, "shape": shape})
    return buf.getvalue()


def _norm(arrays) -> float:
    return math.sqrt(sum(float(np.sum(np.square(np.asarray(a, np.float64)))) for a in arrays))


# -- what a reply carries: (content, what the client "sent" as it would decode, or None) ---------------------------
@dataclasses.dataclass(frozen=True)
class Body:
    """A reply's content and what it was built to be: "update" (`arrays`: its parts as numpy would decode
    them, None for a part that cannot be decoded), "malformed" or "error"."""

    kind: str
    make: Any  # () -> RecordDict | Error (fresh per reply)
    arrays: tuple[list[np.ndarray] | None, ...] = ()


def _floats(width: int, bound: float | None = None):
    if bound is None:
        return st.floats(width=width, allow_nan=True, allow_infinity=True)
    return st.floats(-bound, bound, width=width)


HONEST = st.tuples(*[hnp.arrays(np.float32, s, elements=_floats(32, 2.0)) for s in SHAPES]).map(list)
DTYPES = [np.float16, np.float32, np.float64, np.longdouble, ">f4", ">f8", np.int8, np.int64, np.uint8, np.bool_,
          np.complex64, np.complex128, "<U3"]
ODD_SHAPES = [(2, 3), (3, 2), (4,), (6,), (), (0,), (2, 3, 1), (1, 4), (2, 300), (4000,)]


@st.composite
def _values(draw):
    """Template shapes, a float dtype, any values (NaN, Inf, huge, subnormal)."""
    dtype, width = draw(st.sampled_from([(np.float16, 16), (np.float32, 32), (np.float64, 64)]))
    return [draw(hnp.arrays(dtype, s, elements=_floats(width))) for s in SHAPES]


@st.composite
def _dtypes(draw):
    """Template shapes, any dtype numpy can save without pickling."""
    out = []
    for s in SHAPES:
        dtype = np.dtype(draw(st.sampled_from(DTYPES)))
        base = draw(hnp.arrays(np.float64, s, elements=_floats(64, 3.0)))
        out.append(base.astype(dtype))
    return out


@st.composite
def _structure(draw):
    """Missing, extra, reshaped and oversized arrays (up to 4 of 4,000 floats, for a model of 10)."""
    shapes = draw(st.lists(st.sampled_from(ODD_SHAPES), max_size=4))
    return [np.full(s, draw(_floats(32, 1.0)), np.float32) for s in shapes]


def _crafted_arrays() -> list[tuple[str, list[Array], list[np.ndarray] | None]]:
    """Hand-made .npy payloads in the first array's place: (name, the two Arrays, the decoded update or None)."""
    good0 = np.arange(6, dtype=np.float32).reshape(2, 3) / 20
    good1 = Array(np.zeros(4, np.float32))
    body = good0.tobytes()
    fortran = np.asfortranarray(good0)
    cases = [
        ("object dtype", Array("object", (2, 3), "numpy.ndarray", _header("|O", (2, 3)) + b"x" * 48), None),
        ("header claims 1e11 float64", Array("float64", (2, 3), "numpy.ndarray", _header("<f8", (10**11,))), None),
        ("header claims the template, data truncated", Array("float32", (2, 3), "numpy.ndarray",
                                                              _header("<f4", (2, 3)) + body[:-4]), None),
        ("trailing bytes", Array("float32", (2, 3), "numpy.ndarray", _header("<f4", (2, 3)) + body + b"\0" * 8), None),
        ("torch stype", Array("float32", (2, 3), "torch.Tensor", _npy(good0)), None),
        ("garbage bytes", Array("float32", (2, 3), "numpy.ndarray", b"\x93NUMPY garbage"), None),
        ("not npy at all", Array("float32", (2, 3), "numpy.ndarray", body), None),
        ("structured dtype", Array("V8", (2, 3), "numpy.ndarray", _header("<f4,<f4", (2, 3)) + body * 2), None),
        ("declared shape lies, header true", Array("float32", (999,), "numpy.ndarray", _npy(good0)), [good0]),
        ("fortran order", Array("float32", (2, 3), "numpy.ndarray", _npy(fortran)), [fortran]),
    ]
    return [(n, [a0, good1], None if want is None else [want[0], np.zeros(4, np.float32)]) for n, a0, want in cases]


CRAFTED = _crafted_arrays()


def _update_body(arrays: list[np.ndarray]) -> Body:
    return Body("update", lambda: RecordDict({"update": ArrayRecord([np.array(a) for a in arrays])}), (arrays,))


def _crafted_body(case) -> Body:
    _, record, want = case
    return Body("update", lambda: RecordDict({"update": ArrayRecord({str(i): a for i, a in enumerate(record)})}),
                (want,))


PAYLOADS = st.one_of(HONEST.map(_update_body), _values().map(_update_body), _dtypes().map(_update_body),
                     _structure().map(_update_body), st.sampled_from(CRAFTED).map(_crafted_body))


def _malformed(make) -> Body:
    return Body("malformed", make)


def _good() -> ArrayRecord:
    return ArrayRecord([np.zeros(s, np.float32) for s in SHAPES])


MALFORMED_PRIVATE = st.sampled_from([
    _malformed(RecordDict),  # no update
    _malformed(lambda: RecordDict({"update": ConfigRecord({"x": 1})})),  # mistyped
    _malformed(lambda: RecordDict({"update": MetricRecord({"x": 1.0})})),
    _malformed(lambda: RecordDict({"updates": _good()})),  # misnamed
    _malformed(lambda: RecordDict({"update": _good(), "arrays": _good()})),  # extra record
    _malformed(lambda: RecordDict({"update": _good(), "": ConfigRecord({})})),
    _malformed(lambda: RecordDict({"update": _good(), "update_entity": _good()})),  # a split reply, unsplit run
    _malformed(lambda: RecordDict({"update": _good(), "metrics": MetricRecord({"train_loss": 1.0})})),  # private
])
ERRORS = st.builds(lambda code, reason: Body("error", lambda: Error(code=code, reason=reason)),
                   st.integers(0, 8), st.none() | st.text(max_size=20))


# -- the oracle ---------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Sent:
    """One reply: which plan message it answers (`to`), how its provenance was built (`tie`), its body."""

    to: int
    tie: str
    body: Body


TIES = ["tied", "late (earlier round)", "other open round", "unknown message", "empty reply-to", "wrong node",
        "unsent node", "other group", "other type", "other run", "no metadata", "from the SuperLink"]


def _tied(sent: Sent) -> bool:
    """Whether the reply answers its message of this round: from its node, or the SuperLink's error reply."""
    return sent.tie == "tied" or (sent.tie == "from the SuperLink" and sent.body.kind == "error")


def _build(sent: Sent, plans) -> Any:
    """The reply `sent` describes: plans = (this round's, an earlier round's, another open round's)."""
    this, earlier, other = plans
    msg = this.messages[sent.to]
    if sent.tie == "late (earlier round)":
        msg = earlier.messages[sent.to]
    elif sent.tie == "other open round":
        msg = other.messages[sent.to]
    elif sent.tie == "unknown message":  # a message of no plan, to the same node
        msg = stamp(Message(RecordDict(), dst_node_id=msg.metadata.dst_node_id, message_type="train",
                            group_id=msg.metadata.group_id))
    content = sent.body.make()
    if sent.tie == "no metadata":  # what the in-process grid used to return: content, no provenance
        return type("Bare", (), {"content": content, "has_error": lambda self: False})()
    reply = Message(content, reply_to=msg)
    other_node = 10 + (msg.metadata.dst_node_id - 10 + 1) % NODES  # another sampled node
    forged = {"empty reply-to": ("_reply_to_message_id", ""), "wrong node": ("_src_node_id", other_node),
              "unsent node": ("_src_node_id", 99), "from the SuperLink": ("_src_node_id", 1),
              "other group": ("_group_id", "0"), "other type": ("_message_type", "evaluate"),
              "other run": ("_run_id", 7)}.get(sent.tie)
    if forged:
        reply.metadata.__dict__[forged[0]] = forged[1]
    return reply


def _expected(sents: list[Sent], *, split: bool = False):
    """(counts, the sum of the counted re-checked updates, how many updates count) from what each reply was
    built to be: only the first reply a node sends to its message of this round counts."""
    counts = Counter({k: 0 for k in ("refused", "duplicate", "failed", "malformed", "replies", *STATUSES)})
    total = [np.zeros(s) for s in SHAPES]
    seen, n = set(), 0
    for sent in sents:
        if not _tied(sent):
            counts["refused"] += 1
            continue
        if sent.to in seen:
            counts["refused"] += 1
            counts["duplicate"] += 1
            continue
        seen.add(sent.to)
        if sent.body.kind in ("error", "malformed"):
            counts["failed"] += 1
            counts["malformed"] += sent.body.kind == "malformed"
            continue
        counts["replies"] += 1
        parts = [[] if p is None else p for p in sent.body.arrays]
        if split:
            checked, status = recheck_split(*parts, SHAPES, w_max=1.0, beta=BETA, gamma=GAMMA)
        else:
            checked, status = recheck(parts[0], SHAPES, w_max=1.0, beta=BETA)
        counts[status] += 1
        if checked is not None:
            n += 1
            for acc, a in zip(total, checked):
                acc += np.asarray(a, np.float64)
    counts["answered"] = len(seen)
    return counts, total, n


def _run(s: UserEntityDP, sents: list[Sent], *, split: bool = False):
    """Aggregate round 2 (round 1 aggregated before it, round 3 open) with `sents`; check the counts, the
    released sum and the sensitivity bound. Returns the round's metrics."""
    earlier = _plan(s, 1)
    s.aggregate_train(1, [])
    this, other = _plan(s, 2), _plan(s, 3)
    replies = [_build(x, (this, earlier, other)) for x in sents]
    agg, metrics = s.aggregate_train(2, replies)  # never raises
    assert "replies" not in metrics  # a private round's MetricRecord holds public values only
    m = _last_counts(s)
    want, total, n = _expected(sents, split=split)
    for k in ("refused", "duplicate", "failed", "malformed", "replies", *STATUSES):
        assert m[k] == want[k], (k, m[k], want[k])
    assert m["missing"] == NODES - want["answered"] and m["sampled"] == NODES
    assert m["replies"] + m["failed"] + m["refused"] == len(sents)  # every reply is exactly one of them
    released = [np.asarray(a, np.float64) * s.report.denominator for a in agg.to_numpy_ndarrays()]
    # the float32 release of a sum of clipped float32 updates (entries <= 2, a clip nudged by 1e-6) against a
    # float64 sum: ~1e-7 relative per operation, so rtol 1e-5 and atol 1e-6 near 0
    for got, exp in zip(released, total):
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-6)
    bound = BETA + (GAMMA if split else 0.0)  # w_max = 1
    assert n <= NODES and _norm(released) <= n * bound * (1 + 1e-5) + 1e-7  # the sensitivity bound
    return m


# -- the cases ----------------------------------------------------------------------------------------------------
@_settings("payloads")
@given(st.lists(PAYLOADS, min_size=NODES, max_size=NODES))
def test_hostile_update_payloads_are_rechecked_or_dropped_and_counted(bodies):
    """Every node replies once, to its own message, with any update payload: each is decoded without trusting
    it and re-checked (ok / reclipped / dropped_shape / dropped_nonfinite), none raises, the sum is exact."""
    _run(_strategy(), [Sent(i, "tied", b) for i, b in enumerate(bodies)])


@_settings("records")
@given(st.lists(st.one_of(MALFORMED_PRIVATE, ERRORS, HONEST.map(_update_body)), min_size=NODES, max_size=NODES))
def test_malformed_records_and_error_replies_fail_and_count(bodies):
    """Missing, extra, misnamed and mistyped records (and metrics in a private run) are malformed; error
    replies failed: both contribute zero, like a missing reply; the honest replies are summed."""
    _run(_strategy(), [Sent(i, "tied", b) for i, b in enumerate(bodies)])


@_settings("provenance")
@given(st.lists(st.builds(Sent, st.integers(0, NODES - 1), st.sampled_from(TIES),
                          st.one_of(HONEST.map(_update_body), ERRORS)), max_size=12))
def test_only_the_first_reply_of_a_node_to_its_message_of_this_round_counts(sents):
    """Late replies (to an earlier round), replies to another open round, to no message, with an empty
    reply-to, forged source node, group, type or run, without metadata, and second replies: refused and
    counted; at most one update per sampled node ever counts. The SuperLink's error reply for a message
    (source node 1) is that node's failed reply; an update from node 1 is refused."""
    _run(_strategy(), sents)


GARBAGE_METRICS = st.sampled_from([
    MetricRecord({"train_loss": float("nan")}), MetricRecord({"train_loss": float("inf")}),
    MetricRecord({"train_loss": -float("inf")}), MetricRecord({"train_loss": [1.0, 2.0]}),
    MetricRecord({"train_loss": [3]}), MetricRecord({"num-examples": 3, "acc": float("nan")}),
    ConfigRecord({"train_loss": "low"}), ConfigRecord({"train_loss": 1.0}), _good(),
])
# An app's own metrics without a train_loss (Flower's "num-examples", say) are well formed.
PLAIN_METRICS = st.sampled_from([MetricRecord({"sentences": 3.0}), MetricRecord({}),
                                 MetricRecord({"num-examples": 12, "accuracy": 0.5})])


@_settings("metrics")
@given(st.lists(st.tuples(HONEST, st.one_of(st.none(), _floats(64, 1e300).map(float), GARBAGE_METRICS,
                                            PLAIN_METRICS)), min_size=NODES, max_size=NODES))
def test_garbage_metrics_in_non_private_runs(replies):
    """Noiseless FedAvg: a reply whose metrics record is not a MetricRecord of finite numbers is malformed
    (zero, counted); one without a train_loss is well formed; train_loss is the mean of the finite losses;
    the update is the mean of the valid updates."""
    s = _strategy("fedavg")
    plan = _plan(s, 1)
    built, honest, losses = [], [], []
    for msg, (arrays, metrics) in zip(plan.messages, replies):
        content = RecordDict({"update": ArrayRecord(arrays)})
        if isinstance(metrics, float):
            content["metrics"] = MetricRecord({"train_loss": metrics, "sentences": 3.0})
            losses.append(metrics)
        elif metrics is not None:
            content["metrics"] = metrics
        if metrics is None or isinstance(metrics, float) or (isinstance(metrics, MetricRecord) and all(
                isinstance(v, int | float) and math.isfinite(v) for v in metrics.values())):
            honest.append(arrays)
        built.append(Message(content, reply_to=msg))
    agg, m = s.aggregate_train(1, built)
    assert (m["malformed"], m["failed"], m["replies"], m["ok"]) == (NODES - len(honest), NODES - len(honest),
                                                                     len(honest), len(honest))
    if losses:
        # sum(v / n) (ours) against numpy's sum(v) / n, n <= 4 losses up to 1e300 of either sign: each side is
        # within ~4 ulps of the largest |loss| (cancellation can make that huge relative to the mean): abs
        # 4e-15 max|loss|, plus 1e-300 for subnormals (halving one rounds to 0 or to itself)
        scale_ = max(abs(v) for v in losses)
        assert m["train_loss"] == pytest.approx(float(np.mean(losses)), rel=1e-9, abs=4e-15 * scale_ + 1e-300)
    else:
        assert "train_loss" not in m
    want = [sum((np.asarray(a[i], np.float64) for a in honest), np.zeros(SHAPES[i])) / max(1, len(honest))
            for i in range(len(SHAPES))]
    for got, exp in zip(agg.to_numpy_ndarrays(), want):  # float32 release of a float64 mean: as in _run
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-6)


SPLIT_PART = st.one_of(HONEST, _values(), _dtypes(), _structure()).map(lambda a: (a, a)) | st.sampled_from(
    CRAFTED).map(lambda c: (c[1], c[2]))


def _split_body(free, entity) -> Body:
    def record(part):
        arrays, _ = part
        if arrays and isinstance(arrays[0], Array):
            return ArrayRecord({str(i): a for i, a in enumerate(arrays)})
        return ArrayRecord([np.array(a) for a in arrays])

    return Body("update", lambda: RecordDict({"update": record(free), "update_entity": record(entity)}),
                (free[1], entity[1]))


@_settings("split")
@given(st.lists(st.builds(_split_body, SPLIT_PART, SPLIT_PART) | st.sampled_from([
    _malformed(lambda: RecordDict({"update": _good()})),  # no entity part
    _malformed(lambda: RecordDict({"update_entity": _good()})),  # no free part
    _malformed(lambda: RecordDict({"update": _good(), "update_entity": ConfigRecord({})})),
]), min_size=NODES, max_size=NODES))
def test_split_update_parts_are_each_rechecked_or_zero(bodies):
    """uedp_split: each part decoded without trusting it and re-checked against its own bound (a part that
    fails counts as zero, the other is kept); a reply missing a part is malformed."""
    _run(_strategy("uedp_split"), [Sent(i, "tied", b) for i, b in enumerate(bodies)], split=True)


@_settings("mixed")
@given(st.lists(st.builds(Sent, st.integers(0, NODES - 1), st.sampled_from(["tied"] * 4 + TIES),
                          st.one_of(PAYLOADS, MALFORMED_PRIVATE, ERRORS)), max_size=10))
def test_mixed_hostile_rounds_stay_within_the_sensitivity_bound(sents):
    """Everything at once, in any order: the counts add up and the released sum is the oracle's, of norm at
    most (counted updates) * w_max * beta <= sampled * w_max * beta."""
    _run(_strategy(), sents)


# -- the payload far larger than the model, and the inputs that crashed or failed open before -----------------------
def test_an_oversized_payload_is_never_built():
    """8 MB in the place of a 6-float array, and a header claiming 745 GiB (np.load tried to allocate it:
    MemoryError): dropped as a wrong shape, with no array built (traced allocations stay under 64 KiB)."""
    s = _strategy()
    plan = _plan(s, 1)
    big = ArrayRecord([np.ones(2_000_000, np.float32), np.zeros(4, np.float32)])
    claims = ArrayRecord({"0": Array("float64", (2, 3), "numpy.ndarray", _header("<f8", (10**11,))),
                          "1": Array(np.zeros(4, np.float32))})
    replies = [Message(RecordDict({"update": r}), reply_to=m) for r, m in zip((big, claims), plan.messages)]
    tracemalloc.start()
    try:
        s.aggregate_train(1, replies)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    m = _last_counts(s)
    assert (m["dropped_shape"], m["replies"], m["missing"]) == (2, 2, 2)
    assert peak < 64 * 1024, peak


def test_the_inputs_that_crashed_or_failed_open_before():
    """Before these tests: a mistyped update record raised AttributeError, an object-dtype payload ValueError,
    a torch stype TypeError, a huge header MemoryError; a non-private reply without train_loss KeyError, a
    list train_loss TypeError, a NaN one made the round's train_loss NaN; five replies of one node and three
    late ones all counted (released norm 4 beta with 3 nodes sampled: past the sensitivity bound)."""
    crashing = [lambda: RecordDict({"update": ConfigRecord({"a": 1})})] + [
        _crafted_body(c).make for c in CRAFTED if c[2] is None]
    for make in crashing:
        s = _strategy()
        s.aggregate_train(1, [Message(make(), reply_to=msg) for msg in _plan(s, 1).messages])
        m = _last_counts(s)
        assert m["failed"] + m["dropped_shape"] == NODES
    for metrics in ({"train_loss": float("nan")}, {"sentences": [3.0]}, {"train_loss": [1.0, 2.0]}):
        s = _strategy("fedavg")
        replies = [Message(RecordDict({"update": ArrayRecord(TEMPLATE), "metrics": MetricRecord(metrics)}),
                           reply_to=msg) for msg in _plan(s, 1).messages]
        _, m = s.aggregate_train(1, replies)
        assert m["malformed"] == NODES and "train_loss" not in m
    s = _strategy()
    earlier = _plan(s, 1)
    s.aggregate_train(1, [])
    this = _plan(s, 2)
    big = [np.full((2, 3), 10.0, np.float32), np.zeros(4, np.float32)]
    replies = [Message(RecordDict({"update": ArrayRecord(big)}), reply_to=msg)
               for msg in [this.messages[0]] * 5 + list(earlier.messages[:3])]
    agg, _ = s.aggregate_train(2, replies)
    m = _last_counts(s)
    assert (m["replies"], m["duplicate"], m["refused"], m["missing"]) == (1, 4, 7, NODES - 1)
    # a float32 clip, nudged by (1 - 1e-6) at most to stay below beta, then a float32 release: rel 1e-5
    assert _norm(agg.to_numpy_ndarrays()) * s.report.denominator == pytest.approx(BETA, rel=1e-5)
