"""The split update (strategy uedp_split, docs/proofs.md Theorem 3): sensitivities, the two-part re-check,
the client's two trainings, and a run end to end."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict

from client.update import ClientRound, SplitModels
from runtime.local_grid import run_local, set_local_task_identity
from tests.helpers import tiny_config
from uedp.config import ClientTrainConfig
from uedp.errors import ConfigError
from uedp.flower.mod import uedp_mod
from uedp.privacy.accounting import mechanism
from uedp.privacy.aggregation import recheck_split, shapes_of
from uedp.privacy.clipping import update_norm
from uedp.privacy.ledger import Ledger, RoundRecord
from uedp.privacy.mechanisms import get, spec_for
from uedp.privacy.sampling import new_round_key
from uedp.privacy.sensitivity import sensitivities
from uedp.protocol import RoundInstructions, SplitUpdate, reply_content
from uedp.training import LocalTraining

# Sensitivities, sigmas and clipped norms below are products of a few decimals in float64 (a few ulps): pytest.approx's
# default rel 1e-6 is ample, and a wrong term is off by far more.
TRAINING = LocalTraining.from_config(ClientTrainConfig(lr=0.5, batch_size=8))


def _through_the_mod(new: SplitModels | dict, weights: list[np.ndarray], ins: RoundInstructions) -> SplitUpdate:
    """What the client mod makes of a train function's reply of these new models (or of these records)."""
    set_local_task_identity()
    msg = Message(RecordDict({"arrays": ArrayRecord(weights), "uedp": ins.to_record(),
                              "config": ConfigRecord(TRAINING.to_record())}), dst_node_id=1, message_type="train")
    records = new if isinstance(new, dict) else {"arrays": ArrayRecord(new.free),
                                                  "arrays_entity": ArrayRecord(new.entity)}
    reply = uedp_mod(msg, Context(run_id=0, node_id=1, node_config={}, state=RecordDict(), run_config={}),
                     lambda m, c: Message(RecordDict(records), reply_to=m))
    assert set(reply.content.keys()) == {"update", "update_entity"}  # private: nothing else
    return SplitUpdate(free=reply.content["update"].to_numpy_ndarrays(),
                       entity=reply.content["update_entity"].to_numpy_ndarrays())


def test_sensitivities_of_the_split_update() -> None:
    sens = sensitivities(beta=0.5, w_max=0.8, m_max=10, k_cap=None, rule="uedp_split", gamma=0.05)
    assert sens.s_u == pytest.approx(0.8 * (0.5 + 0.05))  # the client's own two parts
    assert sens.s_e == pytest.approx(2 * 10 * 0.8 * 0.05)  # every place on G may use e': its entity part
    assert sens.s_s == pytest.approx(2 * 0.8 * (0.5 + 0.05))  # both parts of one user may move (F2)
    m = mechanism("uedp_split", z=2.0, q_u=0.1, q_e=0.3, q_s=1.0, m_max=10, gamma=0.1)  # units of beta
    assert m.sigma == pytest.approx(2.0 * (1.1 + 2.0))
    with pytest.raises(ConfigError, match="gamma"):
        mechanism("uedp_split", z=2.0, q_u=0.1, q_e=0.3, q_s=1.0, m_max=10)
    with pytest.raises(ValueError, match="gamma"):
        sensitivities(beta=0.5, w_max=1.0, m_max=10, k_cap=1, rule="uedp", gamma=0.1)
    record = RoundRecord(round=1, rule="uedp_split", q_u=0.1, q_e=0.3, q_s=1.0, m_max=10, k_cap=None, beta=0.5,
                         w_max=1.0, z=2.0, denominator=5.0, gamma=0.05)
    assert record.mechanism.gamma == pytest.approx(0.1) and record.sigma == pytest.approx(2.0 * (0.55 + 1.0))
    assert RoundRecord.from_dict(record.to_dict()) == record
    assert spec_for("uedp_split", "f_E+").split and not get("uedp").split


def test_each_part_is_rechecked_against_its_own_bound() -> None:
    """A client cannot move its free budget into the entity part: each part is clipped to its own bound
    before the sum, so the sum has norm <= w_max (beta + gamma) and the entity part <= w_max gamma."""
    template = [np.zeros(3), np.zeros(2)]
    shapes = shapes_of(template)
    big_entity = [np.array([3.0, 0.0, 0.0]), np.zeros(2)]  # norm 3 in the entity part
    free = [np.zeros(3), np.array([0.0, 1.0])]  # norm 1 = beta
    combined, status = recheck_split(free, big_entity, shapes, w_max=1.0, beta=1.0, gamma=0.1)
    assert status == "reclipped"
    assert combined[0][0] == pytest.approx(0.1) and combined[1][1] == pytest.approx(1.0)
    assert update_norm(combined) <= 1.1 + 1e-12
    ok, status = recheck_split(free, [np.zeros(3), np.zeros(2)], shapes, w_max=1.0, beta=1.0, gamma=0.1)
    assert status == "ok" and update_norm(ok) == pytest.approx(1.0)
    # a bad part counts as zero; the other part is kept (its presence must not depend on the bad part)
    kept, status = recheck_split(free, [np.zeros(4), np.zeros(2)], shapes, w_max=1.0, beta=1.0, gamma=0.1)
    assert status == "dropped_shape" and update_norm(kept) == pytest.approx(1.0) and kept[1][1] == 1.0
    kept, status = recheck_split([np.full(3, np.nan), np.zeros(2)], big_entity, shapes, w_max=1.0, beta=1.0,
                                 gamma=0.1)
    assert status == "dropped_nonfinite" and update_norm(kept) == pytest.approx(0.1)
    dropped, status = recheck_split([np.full(3, np.nan), np.zeros(2)], [np.zeros(4), np.zeros(2)], shapes,
                                    w_max=1.0, beta=1.0, gamma=0.1)
    assert dropped is None and status == "dropped_nonfinite"


def test_instructions_and_reply_of_a_split_update() -> None:
    common = dict(round=1, q_e=0.2, q_s=1.0, k_cap=0, m_max=10, slot=-1, beta=0.5, w_u=1.0, private=True,
                  key=new_round_key())
    with pytest.raises(ValueError, match="gamma"):
        RoundInstructions(mechanism="uedp_split", **common)
    with pytest.raises(ValueError, match="gamma"):
        RoundInstructions(mechanism="uedp", gamma=0.1, **common)
    ins = RoundInstructions(mechanism="uedp_split", gamma=0.05, **common)
    assert RoundInstructions.from_record(ins.to_record()).gamma == 0.05
    content = reply_content(SplitUpdate(free=[np.ones(2)], entity=[np.zeros(2)]), {})
    assert set(content.keys()) == {"update", "update_entity"}


def test_the_client_trains_each_part_on_its_own_sentences(tmp_path) -> None:
    """With every entity and extended entity sampled (q_e = q_s = 1) the free part is exactly the update a
    client trains on its entity-free sentences alone, the entity part the one on its entity sentences; the
    client mod clips each to its own bound."""
    from client.update import _model, _user_data
    from uedp.pipeline import server_data

    cfg = tiny_config(tmp_path, strategy={"name": "uedp_split"}, privacy={"q_e": 1.0, "q_s": 1.0})
    server_data(cfg)  # prepares the corpus, annotations and tokenizer the clients read
    key = tuple(sorted(cfg.to_flat().items()))
    data = _user_data(key, 0, False)
    model = _model(key)
    weights = [w.detach().numpy().copy() for w in model.parameters()]
    base = dict(round=1, q_e=1.0, q_s=1.0, k_cap=0, m_max=8, slot=-1, w_u=1.0, private=True, seed=7,
                key=new_round_key())
    loose = RoundInstructions(mechanism="uedp_split", beta=100.0, gamma=100.0, **base)
    split = ClientRound()(cfg, 0, weights, loose, TRAINING)[0]
    assert isinstance(split, SplitModels)
    has = np.array([len(e) > 0 for e in data.entities])
    assert has.any() and (~has).any()
    ref_free, _ = ClientRound()._trained(data, model, weights, np.flatnonzero(~has), np.ones(int((~has).sum())),
                                         loose, TRAINING)
    # float32 torch training of the same rows by two call paths: rounding ~1e-7 relative per step, rtol 1e-5
    for a, b in zip(split.free, ref_free):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    tight = RoundInstructions(mechanism="uedp_split", beta=0.3, gamma=0.01, **base)
    clipped = _through_the_mod(ClientRound()(cfg, 0, weights, tight, TRAINING)[0], weights, tight)
    assert update_norm(clipped.free) <= 0.3 * (1 + 1e-6) and update_norm(clipped.entity) <= 0.01 * (1 + 1e-6)
    assert update_norm(clipped.entity) > 0.0
    entity_rows = frozenset(np.flatnonzero(has).tolist())

    class EntityPartFails(ClientRound):  # the entity part's training raises, of a kind nobody anticipated
        def _trained(self, data, model, weights, rows, omega, ins, training):
            if set(rows.tolist()) <= entity_rows and len(rows):
                raise KeyError("anything at all")
            return super()._trained(data, model, weights, rows, omega, ins, training)

    failed = _through_the_mod(EntityPartFails()(cfg, 0, weights, tight, TRAINING)[0], weights, tight)
    assert update_norm(failed.entity) == 0.0  # zero, and the free part is still sent as without the failure
    for a, b in zip(failed.free, clipped.free):  # float32 training and clip, as above: rtol 1e-5
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_the_mod_keeps_one_part_when_the_other_cannot_be_bounded() -> None:
    """The client mod: an entity part that is missing, NaN or of the wrong shape is zero, and the free part is
    the same as without it; the same the other way round."""
    weights = [np.zeros(3, np.float32), np.zeros(2, np.float32)]
    ins = RoundInstructions(round=1, q_e=0.2, q_s=1.0, k_cap=0, m_max=10, slot=-1, w_u=1.0, private=True,
                            mechanism="uedp_split", beta=0.5, gamma=0.1, key=new_round_key())
    free = [np.array([1.0, 0.0, 0.0], np.float32), np.zeros(2, np.float32)]
    entity = [np.zeros(3, np.float32), np.array([0.0, 1.0], np.float32)]
    both = _through_the_mod(SplitModels(free, entity), weights, ins)
    # a float32 clip lands a hair below its bound (uedp.privacy.clipping nudges the factor down so that the
    # float32 norm never exceeds it: 1e-6 relative here); 1e-5 is that margin with room, far below a wrong bound
    assert update_norm(both.free) == pytest.approx(0.5, rel=1e-5)
    assert update_norm(both.entity) == pytest.approx(0.1, rel=1e-5)
    for bad in (None, [np.full(3, np.nan, np.float32), np.zeros(2, np.float32)], [np.zeros(4, np.float32),
                                                                                  np.zeros(2, np.float32)]):
        records = {"arrays": ArrayRecord(free)} | ({} if bad is None else {"arrays_entity": ArrayRecord(bad)})
        kept = _through_the_mod(records, weights, ins)
        assert update_norm(kept.entity) == 0.0
        assert all(np.array_equal(a, b) for a, b in zip(kept.free, both.free))
        records = {"arrays_entity": ArrayRecord(entity)} | ({} if bad is None else {"arrays": ArrayRecord(bad)})
        kept = _through_the_mod(records, weights, ins)
        assert update_norm(kept.free) == 0.0
        assert all(np.array_equal(a, b) for a, b in zip(kept.entity, both.entity))


@pytest.mark.e2e  # ~20-40 s: in the full tier, to keep the fast tier under 8 minutes
def test_a_split_run_records_gamma_and_its_sigma(tmp_path) -> None:
    s = run_local(tiny_config(tmp_path, strategy={"name": "uedp_split"}))
    ledger = Ledger.load(tmp_path / "ledger.json")
    gamma = 2 * 0.5 / 8  # privacy.gamma = "auto": max(k_cap, 1) beta / m_max, tiny_config's k_cap 2, m_max 8
    assert all(r.rule == "uedp_split" and r.gamma == pytest.approx(gamma) for r in ledger.records)
    assert s["sigma"] == pytest.approx(1.0 * ((0.5 + gamma) + 2 * 8 * gamma))
    assert s["rounds"] == 3 and np.isfinite(s["final"]["perplexity"])
    # the summary's epsilon is this ledger's, by the same code (JSON round trips of floats are exact)
    assert s["eps_uedp"] == pytest.approx(ledger.epsilons()["eps_uedp"])
