"""The server loop over an in-process grid: ledger before release, budget stop, resume, failures."""

from __future__ import annotations

import json

import numpy as np
import pytest

from runtime.local_grid import run_local
from server.setup import Components
from tests.helpers import operator_rows, tiny_config
from uedp.flower.checkpoint import load_checkpoint
from uedp.privacy.ledger import Ledger


def _rows(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_run_writes_ledger_metrics_summary_and_model(tmp_path):
    s = run_local(tiny_config(tmp_path))
    assert s["rounds"] == 3 and s["private"] and s["warning"] is None
    ledger = Ledger.load(tmp_path / "ledger.json")
    assert [r.round for r in ledger.records] == [1, 2, 3]
    # the summary's epsilon is this ledger's, by the same code (JSON round trips of floats are exact)
    assert s["eps_uedp"] == pytest.approx(ledger.epsilons()["eps_uedp"])
    assert s["eps_user"] <= s["eps_uedp"] <= s["eps_rdp_bound"]
    assert np.isfinite(s["final"]["perplexity"])
    rows = _rows(tmp_path)
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert all("eps_uedp" in r for r in rows) and "test_perplexity" in rows[-1]
    for name in ("summary.json", "model.pt", "checkpoint.pt", "metrics.csv", "config.json"):
        assert (tmp_path / name).is_file()
    assert load_checkpoint(tmp_path).ledger == ledger.to_dict()


def test_budget_stop_never_exceeds_target(tmp_path):
    cfg = tiny_config(tmp_path, privacy={"noise_multiplier": 2.0, "target_epsilon": None},
                      federation={"rounds": 6})
    full = run_local(cfg)  # how far 6 rounds go at z = 2
    target = (json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[2]))["eps_uedp"] + 1e-6
    out2 = tmp_path / "budget"
    cfg2 = tiny_config(out2, privacy={"noise_multiplier": 2.0, "target_epsilon": target},
                       federation={"rounds": 6})
    # With a target, z is calibrated for 6 rounds, so pass z = 2 in: the target is reached after 3 rounds.
    s = run_local(cfg2, components=Components(noise_multiplier=2.0))
    assert s["stopped_by_budget"] and s["rounds"] == 3
    assert s["eps_uedp"] <= target < full["eps_uedp"]
    assert len(Ledger.load(out2 / "ledger.json")) == 3


def test_calibrated_run_reaches_but_never_passes_target(tmp_path):
    s = run_local(tiny_config(tmp_path, privacy={"target_epsilon": 3.0}))
    assert s["rounds"] == 3 and not s["stopped_by_budget"]
    assert 2.9 < s["eps_uedp"] <= 3.0


def test_each_round_record_is_built_once_and_charged_as_built(tmp_path, monkeypatch):
    """A round's record is built once: the record the wrapper budget-checks is the one it noises the round with
    (tests/test_client_strategy.py) and the one the ledger charges; z is the wrapper's."""
    from uedp.flower.plan import MechanismSettings

    built, charged = [], []
    real_record, real_append = MechanismSettings.record, Ledger.append

    def record(self, server_round):
        built.append(real_record(self, server_round))
        return built[-1]

    def append(self, rec):
        charged.append(rec)
        return real_append(self, rec)

    monkeypatch.setattr(MechanismSettings, "record", record)
    monkeypatch.setattr(Ledger, "append", append)
    s = run_local(tiny_config(tmp_path, privacy={"target_epsilon": 3.0}))  # with the budget check
    rounds = [r for r in built if r.round > 0]  # record 0: the strategy's sigma, outside any round
    assert [r.round for r in rounds] == [1, 2, 3] and len(charged) == 3
    assert all(c is r for c, r in zip(charged, rounds))
    assert {r.z for r in rounds} == {s["noise_multiplier"]}


def test_resume_continues_the_ledger(tmp_path):
    run_local(tiny_config(tmp_path, federation={"rounds": 2}))
    # A crash after round 3 was accounted but before its checkpoint: the ledger has 3 rounds, the checkpoint 2.
    ledger = Ledger.load(tmp_path / "ledger.json")
    from dataclasses import replace

    ledger.append(replace(ledger.records[-1], round=3))
    ledger.save(tmp_path / "ledger.json")
    s = run_local(tiny_config(tmp_path, federation={"rounds": 5, "resume": True}))
    rounds = [r.round for r in Ledger.load(tmp_path / "ledger.json").records]
    assert rounds == [1, 2, 3, 4, 5]  # round 3 stays charged, nothing counted twice
    assert s["rounds"] == 5
    assert [r["round"] for r in _rows(tmp_path)] == [1, 2, 4, 5]


def test_a_resume_with_no_round_left_flags_a_model_older_than_its_ledger(tmp_path, capsys):
    """A ServerApp killed after the last round's ledger save (before its checkpoint) and resumed: no round is
    left to run; summary.json says rounds = 3 (all charged) and model_round = 2 (model.pt's weights are the
    checkpoint's), and the run says so, instead of an unflagged model of an earlier round."""
    import io

    run_local(tiny_config(tmp_path, federation={"rounds": 2}))
    ledger = Ledger.load(tmp_path / "ledger.json")
    from dataclasses import replace

    ledger.append(replace(ledger.records[-1], round=3))  # round 3 charged, its model lost
    ledger.save(tmp_path / "ledger.json")
    from runtime.local_grid import LocalGrid, set_local_task_identity
    from server.app import run_server

    set_local_task_identity()
    stream = io.StringIO()
    cfg = tiny_config(tmp_path, federation={"rounds": 3, "resume": True})
    s = run_server(LocalGrid(cfg, 8), cfg, stream=stream)
    assert (s["rounds"], s["model_round"]) == (3, 2)
    assert "model.pt is the model of round 2" in stream.getvalue()
    assert np.isfinite(s["final"]["perplexity"])  # evaluated on the model it releases
    assert json.loads((tmp_path / "summary.json").read_text())["model_round"] == 2


def test_failing_clients_count_as_zero_and_round_ends(tmp_path):
    s = run_local(tiny_config(tmp_path, privacy={"q_u": 1.0, "m_max": 8}), failing=frozenset({0, 3}))
    rows = operator_rows(tmp_path)
    assert len(rows) == 3 and all(r["failed"] == 2 and r["replies"] == 6 for r in rows)
    assert s["rounds"] == 3


def test_client_exception_is_an_error_reply_not_a_crash(tmp_path):
    """In-process grid, as in Flower: client code that raises (here: a non-finite update refused by the
    clip) is an error reply; the round ends and training goes on."""
    from client.update import client_update

    def sometimes_broken(cfg, node, weights, ins, training):
        if node == 2:
            raise ValueError("update has non-finite values (or overflows float64); it cannot be clipped")
        return client_update(cfg, node, weights, ins, training)

    s = run_local(tiny_config(tmp_path, privacy={"q_u": 1.0, "m_max": 8}), client_fn=sometimes_broken)
    rows = operator_rows(tmp_path)
    assert s["rounds"] == 3 and len(rows) == 3 and all(r["failed"] == 1 and r["replies"] == 7 for r in rows)


def test_fixed_seed_is_reported_and_reproducible(tmp_path):
    a = run_local(tiny_config(tmp_path / "a", privacy={"seed": 7}))
    b = run_local(tiny_config(tmp_path / "b", privacy={"seed": 7}))
    assert a["warning"] == "not private: fixed seed" and not a["private"]
    # the same seed, the same float32 computations; rel 1e-6 allows only a float32 reassociation (~1e-7 relative)
    assert a["final"]["perplexity"] == pytest.approx(b["final"]["perplexity"], rel=1e-6)


def test_noiseless_fedavg_learns(tmp_path):
    s = run_local(tiny_config(tmp_path, strategy={"name": "fedavg"}, privacy={"q_u": 1.0},
                              train={"lr": 2.0}, federation={"rounds": 4}))
    assert s["method"] == "noiseless" and s["final"]["perplexity"] < 0.7 * s["initial"]["perplexity"]
    assert "train_loss" in operator_rows(tmp_path)[0] and "eps_uedp" not in _rows(tmp_path)[0]


def test_paper_denominator_option(tmp_path):
    from uedp.pipeline import load_manifest

    cfg = tiny_config(tmp_path, privacy={"paper_z": True}, federation={"rounds": 1})
    s = run_local(cfg)
    m = load_manifest(cfg)
    assert m.num_entities > 0 and m.num_extended > 0
    p = cfg.privacy
    # the same products of config decimals and integer counts, maybe in another order: a few ulps, default rel
    assert s["Z"] == pytest.approx(p.q_u * 8 * (p.q_e * m.num_entities + p.q_s * m.num_extended))


def test_user_level_dp_is_calibrated_on_user_adjacency(tmp_path):
    s = run_local(tiny_config(tmp_path, strategy={"name": "user_dp"}, privacy={"target_epsilon": 4.0},
                              federation={"rounds": 2, "eval_every": 2}))
    assert s["method"] == "user_dp" and not s["stopped_by_budget"]
    assert 3.9 < s["eps_user"] <= 4.0
    assert s["eps_uedp"] == float("inf")  # no entity protection: user-level DP claims nothing about entities
    assert s["sigma"] == pytest.approx(s["noise_multiplier"] * 0.5)  # sigma = z * w_max * beta: a product, few ulps


def test_budget_stop_on_the_undetected_epsilon(tmp_path):
    """A UeDP run claims eps_uedp AND eps_undetected (docs/proofs.md Theorem 2): with q_s = 1 the undetected
    one grows faster here, and the run stops before IT passes the target, while eps_uedp alone would let the
    next round run."""
    base = {"q_s": 1.0, "q_e": 0.2, "noise_multiplier": 2.0, "target_epsilon": None}
    run_local(tiny_config(tmp_path / "free", privacy=base, federation={"rounds": 4, "eval_every": 1}))
    rows = _rows(tmp_path / "free")
    assert all(r["eps_undetected"] > r["eps_uedp"] for r in rows)
    target = rows[1]["eps_undetected"] + 1e-6  # reached after round 2
    assert rows[2]["eps_uedp"] < target  # eps_uedp alone would allow round 3
    out = tmp_path / "stop"
    s = run_local(tiny_config(out, privacy={**base, "target_epsilon": target}, federation={"rounds": 4}),
                  components=Components(noise_multiplier=2.0))
    assert s["stopped_by_budget"] and s["rounds"] == 2
    assert s["eps_undetected"] <= target and s["claims"] == ["eps_uedp", "eps_undetected"]
    only_uedp = run_local(tiny_config(tmp_path / "uedp", privacy={**base, "target_epsilon": target,
                                                                    "target_on": "uedp"}, federation={"rounds": 4}),
                          components=Components(noise_multiplier=2.0))
    assert only_uedp["rounds"] > 2 and only_uedp["claims"] == ["eps_uedp"]
