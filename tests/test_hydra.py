"""The Hydra entry point: its defaults are RunConfig's, overrides reach the run, and a sweep through it
runs several jobs (one failing) end to end with the in-process runner."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

from experiments.run import to_run_config
from uedp.config import RunConfig

CONF = str(Path(__file__).parents[1] / "conf")


def _compose(overrides: list[str]) -> RunConfig:
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["federation.out_dir=x", *overrides])
    return to_run_config(cfg)[0]


def test_hydra_defaults_equal_run_config_defaults():
    cfg = _compose([])
    expected = RunConfig()
    expected.federation.out_dir = "x"
    assert cfg == expected


def test_overrides_and_groups():
    cfg = _compose(["strategy=uedp_naive", "privacy.target_epsilon=2", "dataset=shakespeare",
                    "model=gpt2", "federation.rounds=7"])
    assert cfg.strategy.name == "uedp" and cfg.strategy.estimator == "f_E"
    assert cfg.privacy.target_epsilon == 2.0 and cfg.federation.rounds == 7
    assert cfg.dataset.name == "shakespeare" and cfg.dataset.option_dict() == {"max_users": 200}
    assert cfg.model.name == "gpt2" and cfg.model.option_dict()["n_layer"] == 2


def test_sweep_runs_jobs_and_survives_a_failing_one(tmp_path):
    common = [
        "runner=local", "dataset.options.num_users=6", "+dataset.options.min_sentences=20",
        "+dataset.options.max_sentences=25", "tokenizer.vocab_size=300", "model.options.emb_dim=16",
        "model.options.hidden_dim=16", "privacy.q_u=0.5", "privacy.m_max=6", "privacy.delta=1e-3",
        "federation.rounds=2", "federation.eval_every=2", f"hydra.sweep.dir={tmp_path}",
    ]
    # the two jobs with privacy.target_epsilon=-1 are invalid: they fail, the other two run
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run", "-m", "strategy=uedp,fedavg",
         "privacy.target_epsilon=4,-1", *common],
        capture_output=True, text=True, cwd=Path(__file__).parents[1], timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p for p in tmp_path.iterdir() if p.is_dir() and p.name.isdigit())
    assert len(jobs) == 4
    done = [j for j in jobs if (j / "summary.json").is_file()]
    failed = [j for j in jobs if (j / "error.json").is_file()]
    assert len(done) == 2 and len(failed) == 2
    assert all("target_epsilon" in json.loads((j / "error.json").read_text())["error"] for j in failed)
    assert proc.stderr.count("JOB FAILED") == 2
    strategies = sorted(json.loads((j / "summary.json").read_text())["strategy"] for j in done)
    assert strategies == ["fedavg", "uedp"]
    for j in done:
        assert (j / "ledger.json").is_file() and (j / "metrics.csv").is_file() and (j / "config.json").is_file()

    # The collector turns the sweep into one table (and a plot against epsilon).
    from experiments.collect import main as collect_main

    assert collect_main([str(tmp_path), "--plot-vs-epsilon"]) == 0
    table = (tmp_path / "table.md").read_text()
    rows = [line for line in table.splitlines()[2:] if line.startswith("|")]
    assert len(rows) == 4 and sum("FAILED" in r for r in rows) == 2
    uedp_row = next(r for r in rows if "strategy=uedp" in r and "FAILED" not in r)
    assert "privacy.target_epsilon=4" in uedp_row and "| uedp |" in uedp_row
    assert (tmp_path / "table.csv").is_file() and (tmp_path / "table.png").stat().st_size > 1000
