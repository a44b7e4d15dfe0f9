"""The client's update bound (the client mod) and selection, and the wrapper's sampling, entity cap and server
re-check."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from flwr.app import ArrayRecord, Error, Message, RecordDict

from client.update import client_update, select
from runtime.local_grid import LocalGrid, set_local_task_identity
from tests.helpers import StandInGrid, ZeroNoise, dp_strategy, operator_rows, tiny_config
from uedp.config import ClientTrainConfig
from uedp.flower.mod import bound_update, model_update
from uedp.models.base import get_weights
from uedp.pipeline import load_manifest, load_user_data, new_model, prepare
from uedp.privacy.clipping import update_norm
from uedp.protocol import RoundInstructions
from uedp.training import LocalTraining


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cfg = tiny_config(tmp_path_factory.mktemp("run"))
    prepare(cfg)
    return cfg


TRAINING = dict(optimizer="sgd", lr=0.5, momentum=0.0, local_epochs=1, local_steps=None, batch_size=8)


def _ins(**kw) -> tuple[RoundInstructions, LocalTraining]:
    base = dict(round=1, mechanism="user_dp", q_e=0.5, q_s=0.5, k_cap=0, m_max=6, slot=-1, beta=0.5, w_u=1.0,
                private=True)
    training = {k: kw.pop(k) for k in list(kw) if k in TRAINING}
    base.update(kw)
    return RoundInstructions(**base), LocalTraining.from_config(ClientTrainConfig(**{**TRAINING, **training}))


def _update(cfg, user: int, weights, ins_training):
    """The client round, then what the client mod makes of its new model: the update, clipped once."""
    ins, training = ins_training
    new, metrics = client_update(cfg, user, weights, ins, training)
    return bound_update(model_update(new, weights), ins), metrics


@pytest.mark.parametrize(
    "optimizer, lr, epochs, beta, w_u",
    [("sgd", 0.01, 1, 0.5, 1.0), ("sgd", 50.0, 3, 0.5, 1.0), ("adam", 1.0, 2, 0.01, 0.3),
     ("sgd", 5.0, 1, 3.0, 0.7), ("adam", 0.1, 3, 1e-4, 1.0)],
)
def test_every_update_leaving_a_client_is_bounded(tiny, optimizer, lr, epochs, beta, w_u):
    weights = get_weights(new_model(tiny, load_manifest(tiny), seed=0))
    update, metrics = _update(tiny, 2, weights, _ins(optimizer=optimizer, lr=lr, local_epochs=epochs, beta=beta,
                                                     w_u=w_u))
    assert update_norm(update) <= w_u * beta * (1 + 1e-6)
    assert metrics == {}  # private: nothing but the update leaves the client
    assert [u.shape for u in update] == [w.shape for w in weights]


def test_large_steps_are_clipped_to_exactly_beta(tiny):
    weights = get_weights(new_model(tiny, load_manifest(tiny), seed=0))
    update, _ = _update(tiny, 1, weights, _ins(lr=50.0, beta=0.5))
    # a float32 clip may be nudged down by (1 - 1e-6) to stay below beta (uedp.privacy.clipping): rel 1e-5
    assert update_norm(update) == pytest.approx(0.5, rel=1e-5)


def test_non_private_reply_carries_metrics(tiny):
    weights = get_weights(new_model(tiny, load_manifest(tiny), seed=0))
    _, metrics = _update(tiny, 0, weights, _ins(mechanism="fedavg", private=False, beta=0.0))
    assert set(metrics) == {"train_loss", "sentences", "steps"} and metrics["sentences"] > 0


def _strategy(cfg, *, k_cap, q_u=1.0, m_max=8, seed=3, z=1.0):
    return dp_strategy(cfg, cfg.federation.out_dir, seed=seed, z=z, q_u=q_u, m_max=m_max, k_cap=k_cap, q_e=1.0,
                       q_s=0.0)


def _entity_use(cfg, strategy, grid) -> Counter:
    """For one simulated round: how many clients use each entity (instrumented selection)."""
    set_local_task_identity()
    weights = get_weights(new_model(cfg, load_manifest(cfg), seed=0))
    use: Counter = Counter()
    for msg in strategy.configure_train(1, ArrayRecord(weights), None, grid):
        ins = RoundInstructions.of(msg)
        data = load_user_data(cfg, msg.metadata.dst_node_id)
        rows, _ = select(data, ins)
        use.update(set(itertools.chain.from_iterable(data.entities[i] for i in rows)))
    return use


def test_entity_cap_bounds_clients_per_entity(tiny):
    grid = LocalGrid(tiny, 8)
    capped = Counter()
    for seed in range(5):
        capped |= _entity_use(tiny, _strategy(tiny, k_cap=2, seed=seed), grid)
    assert capped and max(capped.values()) <= 2
    # Control: without the cap (q_e = 1: every entity sampled) shared entities reach more clients.
    uncapped = _entity_use(tiny, _strategy(tiny, k_cap=0), grid)
    assert max(uncapped.values()) > 2


def test_cohort_is_poisson_and_truncated(tiny):
    grid = LocalGrid(tiny, 8)
    set_local_task_identity()
    s = _strategy(tiny, k_cap=2, q_u=0.5, m_max=3)
    sizes = [len(list(s.configure_train(r, ArrayRecord([np.zeros(1, np.float32)]), None, grid)))
             for r in range(300)]
    assert max(sizes) == 3  # truncation at m_max
    # P(Binomial(8, 0.5) >= 3) = 0.855: the cap binds in most rounds; empty rounds happen (p = 1/256).
    assert 0.8 < np.mean([x == 3 for x in sizes]) < 0.91


def test_server_rechecks_every_reply(tiny):
    set_local_task_identity()
    s = dp_strategy(tiny, tiny.federation.out_dir, noise=ZeroNoise(), q_u=1.0, m_max=8, k_cap=2, q_e=1.0, q_s=0.0)
    template = [np.zeros((3, 2), np.float32), np.zeros(4, np.float32)]
    sent = list(s.configure_train(1, ArrayRecord(template), None, LocalGrid(tiny, 8)))
    beta = tiny.privacy.beta

    ok = [np.full((3, 2), 0.01, np.float32), np.zeros(4, np.float32)]
    huge = [np.full((3, 2), 100.0, np.float32), np.ones(4, np.float32)]
    nan = [np.full((3, 2), np.nan, np.float32), np.zeros(4, np.float32)]
    wrong = [np.zeros((2, 3), np.float32), np.zeros(4, np.float32)]
    # replies to the round's first five messages (only replies to its messages count)
    replies = [Message(RecordDict({"update": ArrayRecord(a)}), reply_to=m)
               for a, m in zip((ok, huge, nan, wrong), sent)]
    failed = Message(Error(code=0, reason="boom"), reply_to=sent[4])
    agg, metrics = s.aggregate_train(1, [*replies, failed])
    assert set(metrics) == {"round", "eps_uedp", "eps_undetected"}  # public values only; the counts: the operator log
    m = operator_rows(tiny.federation.out_dir)[-1]
    assert (m["ok"], m["reclipped"], m["dropped_nonfinite"], m["dropped_shape"], m["failed"]) == (1, 1, 1, 1, 1)
    total = agg.to_numpy_ndarrays()  # FedAvg applies the released update to the zero model: the update
    # sum = ok + huge clipped to beta, divided by Z
    huge_norm = np.sqrt(sum(float((a.astype(np.float64) ** 2).sum()) for a in huge))
    expected = [(o + h * beta / huge_norm) / s.report.denominator for o, h in zip(ok, huge)]
    # the float32 release (2^-24 relative per operation, a float32 clip nudged by 1e-6): rtol 1e-5, atol near 0
    for got, want in zip(total, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# -- the round's plan: frozen, returned by configure_train, taken back by aggregate_train, once ---------------------
_Nodes = StandInGrid  # 8 connected nodes that answer the probe


def _zero_replies(plan, template):
    zeros = [np.zeros_like(t) for t in template]
    return [Message(RecordDict({"update": ArrayRecord(zeros)}), reply_to=m) for m in plan]


def test_no_plan_outlives_its_round(tiny):
    """A round is aggregated with the plan its own configure_train returned, once: a round without a plan,
    a second aggregation of it, a second configure_train of it and a round aggregated before the one before
    it are refused, and two rounds configured before either is aggregated keep their own cohorts."""
    import dataclasses

    set_local_task_identity()
    template = [np.zeros(3, np.float32)]
    s = _strategy(tiny, k_cap=2, q_u=0.5, seed=0)
    with pytest.raises(RuntimeError, match="round 1 has no plan"):
        s.aggregate_train(1, [])
    arrays = ArrayRecord(template)
    first = s.configure_train(1, arrays, None, _Nodes())
    with pytest.raises(RuntimeError, match="round 1 is configured already"):
        s.configure_train(1, arrays, None, _Nodes())
    second = s.configure_train(2, arrays, None, _Nodes())
    assert first.cohort.size != second.cohort.size  # (seed 0) so a mixed-up cohort would show in the counts
    assert list(first) == list(first.messages) and len(first) == first.cohort.size  # all 8 places connected
    for plan in (first, second):
        assert [RoundInstructions.of(m).round for m in plan] == [plan.round] * len(plan)
        assert plan.instructions == tuple(RoundInstructions.of(m) for m in plan)
        assert "cohort" not in repr(plan) and "RoundKey" not in repr(plan)  # never the sample or the key
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.cohort = second.cohort
    with pytest.raises(RuntimeError, match="round 2 cannot be aggregated before round 1"):  # the ledger's order
        s.aggregate_train(2, _zero_replies(second, template))
    for plan in (first, second):  # each with its own plan, though both were configured before either
        s.aggregate_train(plan.round, _zero_replies(plan, template))
        counts = operator_rows(tiny.federation.out_dir)[-1]
        assert (counts["sampled"], counts["drawn"], counts["missing"]) == (plan.cohort.size, plan.cohort.drawn, 0)
    with pytest.raises(RuntimeError, match="round 1 has no plan"):
        s.aggregate_train(1, _zero_replies(first, template))


def test_the_round_record_is_built_once_and_noises_its_round(tiny, monkeypatch):
    """configure_train builds the round's record once: the budget check is on it, the plan carries it,
    aggregate_train noises with its sigma and the ledger records it: no second build of it."""
    from uedp.flower.plan import MechanismSettings
    from uedp.privacy.aggregation import aggregate
    from uedp.privacy.ledger import Ledger

    set_local_task_identity()
    template = [np.zeros(3, np.float32)]
    sigmas = []

    def spy(updates, *, sigma, **kwargs):
        sigmas.append(sigma)
        return aggregate(updates, sigma=sigma, **kwargs)

    s = dp_strategy(tiny, tiny.federation.out_dir, mechanism="user_dp", z=1.0, q_u=0.5, m_max=8, k_cap=2,
                    target_epsilon=50.0, aggregator=spy)
    real = MechanismSettings.record
    built, checked = [], []
    monkeypatch.setattr(MechanismSettings, "record", lambda self, rnd: built.append(real(self, rnd)) or built[-1])
    real_check = Ledger.check_budget
    monkeypatch.setattr(Ledger, "check_budget", lambda self, record, **kw: checked.append(record)
                        or real_check(self, record, **kw))
    arrays = ArrayRecord(template)
    for rnd in (1, 2):
        plan = s.configure_train(rnd, arrays, None, _Nodes())
        s.aggregate_train(rnd, _zero_replies(plan, template))
        rounds = [r for r in built if r.round > 0]  # record 0: the settings' sigma, outside any round
        assert [r.round for r in rounds] == list(range(1, rnd + 1)) and plan.record is rounds[-1]
        assert checked[-1] is plan.record and sigmas[-1] == plan.record.sigma
        assert s.accountant.ledger.records[-1] == plan.record
    with pytest.raises(RuntimeError, match="round 3 has no plan"):  # nothing configured, nothing to aggregate
        s.aggregate_train(3, [])
