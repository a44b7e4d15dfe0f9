"""The expected share of a client's sentences a round may train on (uedp.privacy.trainable): its formula
against a Monte Carlo of the real selection code, `uedp corpus-stats`'s table of it, and each node's own log
line before its first training (client/update.py, client/app.py)."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, RecordDict

from client.app import TrainFunction
from client.update import NODE_LOGGER, log_trainable_share
from runtime.local_grid import set_local_task_identity
from tests.helpers import instructions, tiny_config, train_message
from uedp.cli import main
from uedp.models.base import get_weights
from uedp.pipeline import load_manifest, load_user_data, new_model, prepare
from uedp.privacy.accounting import safe_m_max
from uedp.privacy.mechanisms import get
from uedp.privacy.sampling import RoundKey
from uedp.privacy.selection import SelectionParams, select_sentences, stable_sids
from uedp.privacy.trainable import TINY_SHARE, selection_probability, slot_probability, trainable_share

ASSETS = Path(__file__).parent / "assets"
KEYS = 400  # round keys of the Monte Carlo


# -- the formula against the selection code -----------------------------------------------------------------------
def _sentences() -> list[frozenset[str]]:
    """40 entity-free sentences, 40 with one entity and 40 with two (distinct entities: independent coins), and a
    few that share entities (the expectation does not care: it is linear)."""
    one = [frozenset({f"PERSON:a{i}"}) for i in range(40)]
    two = [frozenset({f"PERSON:b{i}", f"GPE:c{i}"}) for i in range(40)]
    shared = [frozenset({"ORG:x"}), frozenset({"ORG:x"}), frozenset({"ORG:x", "DATE:y"})]
    return [frozenset()] * 40 + one + two + shared


def _monte_carlo(entities: list[frozenset[str]], *, q_e: float, q_s: float, k_cap: int | None,
                 m_max: int | None) -> np.ndarray:
    """The fraction of rounds each sentence is selected in, over KEYS seeded round keys (slot 1 of m_max)."""
    texts = [f"sentence {i}" for i in range(len(entities))]
    sids = stable_sids(texts, entities)
    params = SelectionParams(q_e=q_e, q_s=q_s, k_cap=k_cap, m_max=m_max, slot=1 if k_cap else None)
    rng = random.Random(47)
    hits = np.zeros(len(entities))
    for _ in range(KEYS):
        key = RoundKey(rng.randbytes(16))
        hits += select_sentences(key, user="u", sids=sids, entities=entities, params=params).mask
    return hits / KEYS


@pytest.mark.parametrize("q_e, q_s, k_cap, m_max", [
    (0.5, 0.3, None, None),  # no cap: q_e^j
    (1.0, 0.3, 2, 4),  # the cap alone: pi = 1 - (3/4)^2 = 0.4375, not k_cap / m_max = 0.5
    (0.7, 0.0, 1, 3),  # f_E: no extended entity; pi = 1/3
])  # fmt: skip
def test_the_formula_is_the_selection_codes_rate(q_e, q_s, k_cap, m_max):
    entities = _sentences()
    rate = _monte_carlo(entities, q_e=q_e, q_s=q_s, k_cap=k_cap, m_max=m_max)
    counts = [len(e) for e in entities]
    t = trainable_share(counts, q_e=q_e, q_s=q_s, k_cap=k_cap, m_max=m_max)
    # each bucket of 40 independent sentences: 16,000 coin sets, standard error <= 0.004
    for row in t["by_entities"]:
        bucket = [i for i in range(120) if counts[i] == row["entities"]]
        assert abs(rate[bucket].mean() - row["probability"]) < 0.02, row
    assert abs(rate.mean() - t["share"]) < 0.02
    assert t["sentences"] == 123 and abs(t["expected"] - 123 * t["share"]) < 1e-9
    if k_cap == 2:  # the exact slot rule is measurably below the k_cap / m_max approximation
        one = next(r for r in t["by_entities"] if r["entities"] == 1)
        assert one["probability"] == pytest.approx(0.4375)
        assert abs(rate[40:80].mean() - 0.5) > 0.03


def test_the_closed_form_and_its_edges():
    assert slot_probability(1, 173) == pytest.approx(1 / 173)
    assert slot_probability(2, 173) == pytest.approx(2 / 173 - 1 / 173**2)
    assert slot_probability(3, 1) == 1.0 and slot_probability(0, None) == 1.0 and slot_probability(None, 5) == 1.0
    p = selection_probability(2, q_e=0.2, q_s=0.2, k_cap=1, m_max=173)
    assert p == pytest.approx((0.2 / 173) ** 2)
    assert selection_probability(0, q_e=0.2, q_s=0.3, k_cap=1, m_max=173) == 0.3
    # the mechanisms that use every sentence: rates (1, 1), no cap
    for name in ("user_dp", "fedavg", "deid_dp"):
        spec = get(name)
        q_e, q_s = spec.rates(type("P", (), {"q_e": 0.2, "q_s": 0.2})())
        assert trainable_share([0, 1, 5], q_e=q_e, q_s=q_s, k_cap=0)["share"] == 1.0
    empty = trainable_share([], q_e=0.2, q_s=0.2, k_cap=1, m_max=4)
    assert (empty["sentences"], empty["share"], empty["by_entities"]) == (0, 0.0, [])
    t = trainable_share([0, 0, 1, 3], q_e=0.5, q_s=0.5, k_cap=0, m_max=None)
    assert [r["entities"] for r in t["by_entities"]] == [0, 1, 3]
    assert t["share"] == pytest.approx((0.5 + 0.5 + 0.5 + 0.125) / 4)
    assert t["setting"] == {"q_e": 0.5, "q_s": 0.5, "k_cap": 0, "m_max": None, "slot_probability": 1.0}


@pytest.mark.parametrize("options, message", [
    ({"q_e": 1.5}, "q_e must lie in"), ({"q_s": -0.1}, "q_s must lie in"),
    ({"k_cap": -1}, "k_cap must be an integer >= 0"), ({"k_cap": 1, "m_max": None}, "m_max must be"),
    ({"k_cap": 1, "m_max": 0}, "m_max must be"),
])  # fmt: skip
def test_bad_settings_name_the_option(options, message):
    setting = {"q_e": 0.2, "q_s": 0.2, "k_cap": 0, "m_max": None, **options}
    with pytest.raises(ValueError, match=message):
        trainable_share([0, 1], **setting)
    with pytest.raises(ValueError, match=r"entity_counts\[1\]"):
        trainable_share([0, -1], q_e=0.2, q_s=0.2)


# -- uedp corpus-stats ----------------------------------------------------------------------------------------------
CORPUS = ["corpus-stats", "--dataset", "jsonl", "-o", f"path={ASSETS / 'my_corpus.jsonl'}", "--detector", "gold"]


def test_corpus_stats_reports_the_share_by_entities_per_sentence(capsys):
    assert main([*CORPUS, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    t = out["trainable"]
    # a run's defaults: uedp, q_e = q_s = 0.2, k_cap 1, m_max automatic for the corpus's N, 30 rounds, delta 1e-5
    m_max = safe_m_max(out["users"], 0.25, 30, 1e-5)
    assert t["mechanism"] == "uedp" and t["m_max_automatic"] and t["split"] == "train"
    assert t["setting"] == {"q_e": 0.2, "q_s": 0.2, "k_cap": 1, "m_max": m_max, "slot_probability": 1 / m_max}
    assert t["sentences"] == out["splits"]["train"] == sum(r["sentences"] for r in t["by_entities"])
    for r in t["by_entities"]:
        p = 0.2 if r["entities"] == 0 else (0.2 / m_max) ** r["entities"]
        assert r["probability"] == pytest.approx(p)
    assert t["share"] == pytest.approx(sum(r["expected"] for r in t["by_entities"]) / t["sentences"])

    assert main([*CORPUS, "--json", "--strategy", "user_dp"]) == 0  # every sentence
    t = json.loads(capsys.readouterr().out)["trainable"]
    assert t["share"] == 1.0 and t["setting"]["k_cap"] == 0 and t["setting"]["m_max"] is None
    assert main([*CORPUS, "--json", "--strategy", "uedp_naive", "--q-e", "0.5", "--k-cap", "2",
                 "--m-max", "10"]) == 0  # f_E: q_s = 0; an explicit m_max
    t = json.loads(capsys.readouterr().out)["trainable"]
    assert t["setting"]["q_s"] == 0.0 and t["setting"]["m_max"] == 10 and not t["m_max_automatic"]
    assert t["by_entities"][0]["entities"] == 0 and t["by_entities"][0]["probability"] == 0.0
    assert t["by_entities"][1]["probability"] == pytest.approx(0.5 * (1 - 0.9**2))


def test_corpus_stats_prints_the_table_and_refuses_bad_settings(capsys):
    assert main([*CORPUS, "--k-cap", "0"]) == 0
    text = capsys.readouterr().out
    assert "expected share a sampled client may train on, by entities per sentence" in text
    assert "(uedp: q_e 0.2  q_s 0.2  k_cap off; train split)" in text
    rows = text.splitlines()
    header = next(i for i, line in enumerate(rows) if "P(selectable)" in line)
    assert rows[header + 1].split()[0] == "0" and rows[header + 1].split()[2] == "0.2"  # q_s
    assert rows[header + 2].split()[0] == "1" and rows[header + 2].split()[2] == "0.2"  # no cap: q_e
    assert any(line.split()[:1] == ["all"] for line in rows[header:])
    assert main([*CORPUS, "--m-max", "200", "--q-s", "0"]) == 0  # tiny: flagged
    assert "a sampled client barely trains" in capsys.readouterr().out
    for option, value in (("--q-e", "1.5"), ("--k-cap", "-1"), ("--rounds", "0")):
        assert main([*CORPUS, option, value]) == 2
        assert f"error: {option} must" in capsys.readouterr().err


# -- each node's own log ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cfg = tiny_config(tmp_path_factory.mktemp("run"))
    prepare(cfg)
    return cfg


@pytest.fixture
def root_records():
    """What reaches the root logger's handlers (where a server process's own handlers sit: Hydra's console)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)
    yield records
    logging.getLogger().removeHandler(handler)


def _node(caplog) -> list[logging.LogRecord]:
    """The node's own log lines (pytest's caplog listens on non-propagating loggers too)."""
    return [r for r in caplog.records if r.name == NODE_LOGGER]


def _ins(**kw):
    base = dict(round=1, mechanism="uedp", q_e=0.5, q_s=0.5, k_cap=2, m_max=8, slot=3, beta=0.5, w_u=1.0,
                private=True, seed=7, key=RoundKey(bytes(16)))
    return instructions(**{**base, **kw})


def test_a_node_logs_its_share_once_before_its_first_training(tiny, caplog, capsys, root_records):
    set_local_task_identity()
    weights = get_weights(new_model(tiny, load_manifest(tiny), seed=0))
    context = Context(run_id=0, node_id=2, node_config={"partition-id": 2}, state=RecordDict(), run_config={})
    train = TrainFunction(tiny)
    with caplog.at_level(logging.DEBUG):
        for r in (1, 2, 3):
            train(train_message(weights, *_ins(round=r), node=2), context)
    node_records = _node(caplog)
    assert [r.levelno for r in node_records] == [logging.INFO]  # once, and no warning at this share
    line = node_records[0].getMessage()
    counts = [len(e) for e in load_user_data(tiny, 2).entities]
    t = trainable_share(counts, q_e=0.5, q_s=0.5, k_cap=2, m_max=8)
    assert f"this node's {len(counts)} training sentences" in line and f"{100 * t['share']:.3g}%" in line
    assert "q_e 0.5, q_s 0.5, k_cap 2, m_max 8" in line and t["share"] > TINY_SHARE
    keys = set().union(*load_user_data(tiny, 2).entities)
    assert keys and not any(k in line or k.split(":", 1)[1] in line for k in keys)  # no entity, key or text
    assert not any(r.name == NODE_LOGGER for r in root_records)  # never through the root logger's handlers
    captured = capsys.readouterr()
    assert "share" not in captured.out + captured.err  # an app bound to a RunConfig prints nothing
    # a new run (a new node state) logs again
    train(train_message(weights, *_ins(), node=2), Context(run_id=1, node_id=2, node_config={"partition-id": 2},
                                                           state=RecordDict(), run_config={}))
    assert len(_node(caplog)) == 2


def test_a_tiny_share_is_a_warning_and_user_level_dp_uses_everything(tiny, caplog):
    data = load_user_data(tiny, 1)
    ins, _ = _ins(mechanism="uedp_naive", q_e=0.05, q_s=0.0, k_cap=1, m_max=8, slot=0)
    with caplog.at_level(logging.INFO, logger=NODE_LOGGER):
        t = log_trainable_share(data, ins)
    assert t is not None and t["share"] < TINY_SHARE
    node_records = _node(caplog)
    assert [r.levelno for r in node_records] == [logging.INFO, logging.WARNING]
    assert "barely train" in node_records[1].getMessage() and "uedp_naive" in node_records[1].getMessage()
    caplog.clear()
    ins, _ = _ins(mechanism="user_dp", q_e=1.0, q_s=1.0, k_cap=0, slot=-1, key=None)
    assert log_trainable_share(data, ins)["share"] == 1.0
    node_records = _node(caplog)
    assert [r.levelno for r in node_records] == [logging.INFO] and "100%" in node_records[0].getMessage()


def test_a_node_of_its_own_prints_its_log_on_stderr_and_a_ray_worker_does_not(monkeypatch, capsys):
    """The app `flwr run` starts attaches a stderr handler (client.update.node_log_to_stderr), except in a Ray
    worker (a simulation's node: Ray forwards its output to the driver, the server's process)."""
    import sys
    import types

    from client.update import node_log_to_stderr

    logger = logging.getLogger(NODE_LOGGER)
    before = list(logger.handlers)
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(is_initialized=lambda: True))
    assert node_log_to_stderr() is False and logger.handlers == before
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(is_initialized=lambda: False))
    try:
        assert node_log_to_stderr() and node_log_to_stderr()  # idempotent: one handler
        assert len(logger.handlers) == len(before) + 1
        logger.info("a node line")
        assert "INFO uedp.node: a node line" in capsys.readouterr().err
    finally:
        for handler in logger.handlers[len(before):]:
            logger.removeHandler(handler)
