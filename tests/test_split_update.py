"""The split update (strategy uedp_split, docs/proofs.md Theorem 3): sensitivities, the two-part re-check,
the client's two trainings, and a run end to end."""

from __future__ import annotations

import numpy as np
import pytest

from client.update import ClientRound
from runtime.local_grid import run_local
from tests.helpers import tiny_config
from uedp.errors import ConfigError
from uedp.privacy.accounting import mechanism
from uedp.privacy.aggregation import recheck_split, shapes_of
from uedp.privacy.clipping import update_norm
from uedp.privacy.ledger import Ledger, RoundRecord
from uedp.privacy.mechanisms import get, spec_for
from uedp.privacy.sampling import new_round_key
from uedp.privacy.sensitivity import sensitivities
from uedp.protocol import SplitUpdate, TrainInstructions, reply_content


def test_sensitivities_of_the_split_update() -> None:
    sens = sensitivities(beta=0.5, w_max=0.8, m_max=10, k_cap=None, method="uedp_split", gamma=0.05)
    assert sens.s_u == pytest.approx(0.8 * (0.5 + 0.05))  # the client's own two parts
    assert sens.s_e == pytest.approx(2 * 10 * 0.8 * 0.05)  # every place on G may use e': its entity part
    assert sens.s_s == pytest.approx(2 * 0.8 * (0.5 + 0.05))  # both parts of one user may move (F2)
    m = mechanism("uedp_split", z=2.0, q_u=0.1, q_e=0.3, q_s=1.0, m_max=10, gamma=0.1)  # units of beta
    assert m.sigma == pytest.approx(2.0 * (1.1 + 2.0))
    with pytest.raises(ConfigError, match="gamma"):
        mechanism("uedp_split", z=2.0, q_u=0.1, q_e=0.3, q_s=1.0, m_max=10)
    with pytest.raises(ValueError, match="gamma"):
        sensitivities(beta=0.5, w_max=1.0, m_max=10, k_cap=1, method="uedp", gamma=0.1)
    record = RoundRecord(round=1, method="uedp_split", q_u=0.1, q_e=0.3, q_s=1.0, m_max=10, k_cap=None, beta=0.5,
                         w_max=1.0, z=2.0, Z=5.0, gamma=0.05)
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
                  optimizer="sgd", lr=0.5, momentum=0.0, local_epochs=1, local_steps=0, batch_size=8,
                  key=new_round_key())
    with pytest.raises(ValueError, match="gamma"):
        TrainInstructions(mechanism="uedp_split", **common)
    with pytest.raises(ValueError, match="gamma"):
        TrainInstructions(mechanism="uedp", gamma=0.1, **common)
    ins = TrainInstructions(mechanism="uedp_split", gamma=0.05, **common)
    assert TrainInstructions.from_record(ins.to_record()).gamma == 0.05
    content = reply_content(SplitUpdate(free=[np.ones(2)], entity=[np.zeros(2)]), {})
    assert set(content.keys()) == {"update", "update_entity"}


def test_the_client_trains_each_part_on_its_own_sentences(tmp_path) -> None:
    """With every entity and extended entity sampled (q_e = q_s = 1) the free part is exactly the update a
    client trains on its entity-free sentences alone, the entity part the one on its entity sentences; both
    are clipped to their bounds."""
    from client.update import _model, _user_data
    from uedp.server_data import server_data

    cfg = tiny_config(tmp_path, strategy={"name": "uedp_split"}, privacy={"q_e": 1.0, "q_s": 1.0})
    server_data(cfg)  # prepares the corpus, annotations and tokenizer the clients read
    key = tuple(sorted(cfg.to_flat().items()))
    data = _user_data(key, 0, False)
    model = _model(key)
    weights = [w.detach().numpy().copy() for w in model.parameters()]
    base = dict(round=1, q_e=1.0, q_s=1.0, k_cap=0, m_max=8, slot=-1, w_u=1.0, private=True, optimizer="sgd",
                lr=0.5, momentum=0.0, local_epochs=1, local_steps=0, batch_size=8, seed=7, key=new_round_key())
    split = ClientRound()(cfg, 0, weights, TrainInstructions(mechanism="uedp_split", beta=100.0, gamma=100.0,
                                                             **base))[0]
    assert isinstance(split, SplitUpdate)
    has = np.array([len(e) > 0 for e in data.entities])
    assert has.any() and (~has).any()
    ref_free, _ = ClientRound()._bounded_update(data, model, weights, np.flatnonzero(~has),
                                                np.ones(int((~has).sum())), TrainInstructions(
                                                    mechanism="uedp_split", beta=100.0, gamma=100.0, **base))
    for a, b in zip(split.free, ref_free):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    clipped = ClientRound()(cfg, 0, weights, TrainInstructions(mechanism="uedp_split", beta=0.3, gamma=0.01,
                                                               **base))[0]
    assert update_norm(clipped.free) <= 0.3 * (1 + 1e-6) and update_norm(clipped.entity) <= 0.01 * (1 + 1e-6)
    assert update_norm(clipped.entity) > 0.0

    class EntityPartFails(ClientRound):  # the entity part's training blows up (non-finite, cannot be clipped)
        def _bounded_update(self, data, model, weights, rows, omega, ins):
            if ins.beta == ins.gamma == 0.02:
                raise ValueError("update has non-finite values")
            return super()._bounded_update(data, model, weights, rows, omega, ins)

    failed = EntityPartFails()(cfg, 0, weights, TrainInstructions(mechanism="uedp_split", beta=0.3, gamma=0.02,
                                                                  **base))[0]
    assert update_norm(failed.entity) == 0.0  # zero, and the free part is still sent as without the failure
    for a, b in zip(failed.free, clipped.free):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_a_split_run_records_gamma_and_its_sigma(tmp_path) -> None:
    s = run_local(tiny_config(tmp_path, strategy={"name": "uedp_split"}))
    ledger = Ledger.load(tmp_path / "ledger.json")
    gamma = 2 * 0.5 / 8  # privacy.gamma = 0: max(k_cap, 1) beta / m_max, tiny_config's k_cap 2, m_max 8
    assert all(r.method == "uedp_split" and r.gamma == pytest.approx(gamma) for r in ledger.records)
    assert s["sigma"] == pytest.approx(1.0 * ((0.5 + gamma) + 2 * 8 * gamma))
    assert s["rounds"] == 3 and np.isfinite(s["final"]["perplexity"])
    assert s["eps_uedp"] == pytest.approx(ledger.epsilons()["eps_uedp"])
