"""privacy.target_holders: a run calibrates to, and reports, the epsilon for one user and an entity with K other
holders (uedp.privacy.holders; summary.json `holders`)."""

from __future__ import annotations

import pytest

from runtime.local_grid import run_local
from tests.helpers import tiny_config
from uedp.errors import ConfigError
from uedp.privacy.accounting import mechanism
from uedp.privacy.holders import holders_epsilon


@pytest.mark.e2e  # two runs and a holders calibration: ~40 s
def test_a_run_calibrated_for_k_holders_reports_them(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("UEDP_CALIBRATION_CACHE", "off")
    privacy = {"target_epsilon": 4.0, "target_holders": 2}
    s = run_local(tiny_config(tmp_path, strategy={"name": "user_dp"}, privacy=privacy))
    plain = run_local(tiny_config(tmp_path / "plain", strategy={"name": "user_dp"}, privacy={"target_epsilon": 4.0}))
    h = s["holders"]
    assert s["private"] and h["k"] == 2 and h["epsilon"] <= 4.0 and h["bound"] in h["bounds"]
    # the summary's value is the library's for the run's rounds (8 places, 3 rounds, q_u 0.5, delta 1e-3)
    mech = mechanism("user_dp", z=s["noise_multiplier"], q_u=0.5, m_max=None)
    assert h["epsilon"] == holders_epsilon([(mech, 3)], 2, delta=1e-3, num_users=8).epsilon
    # covering the holders costs noise: more than the user claim alone asked for
    assert s["noise_multiplier"] > plain["noise_multiplier"] and plain["holders"] is None
    assert s["eps_user"] < plain["eps_user"] <= 4.0


def test_target_holders_is_checked() -> None:
    with pytest.raises(ConfigError, match="privacy.target_holders"):
        tiny_config(__import__("pathlib").Path("/tmp"), privacy={"target_holders": -2}).validate()
