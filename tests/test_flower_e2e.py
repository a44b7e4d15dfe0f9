"""End to end through Flower: the ServerApp and ClientApp in a Ray-backed simulation (a few rounds, a
handful of clients), checked through the files the run writes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from runtime.simulate import simulate
from tests.helpers import tiny_config
from uedp.privacy.ledger import Ledger


@pytest.mark.e2e
def test_uedp_simulation_through_flower(tmp_path):
    cfg = tiny_config(tmp_path, privacy={"q_u": 0.75, "m_max": 6, "k_cap": 2}, federation={"rounds": 2})
    s = simulate(cfg)
    assert s["strategy"] == "uedp" and s["rounds"] == 2 and s["private"]
    assert np.isfinite(s["final"]["perplexity"])
    assert [r.round for r in Ledger.load(tmp_path / "ledger.json").records] == [1, 2]
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for r in rows:  # every sampled client answered through Flower, and nothing was dropped
        assert r["sampled"] >= 1 and r["replies"] == r["sampled"] and r["failed"] == 0
        assert r["dropped_shape"] == 0 and r["dropped_nonfinite"] == 0
        assert "train_loss" not in r  # private run: no client statistic
