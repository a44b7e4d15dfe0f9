"""`flwr run .` (local simulation through a detached SuperLink) runs the same ServerApp and ClientApp, with
the run config overridden from a TOML file; the SuperLink it starts is stopped by process id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.federation import executable
from tests.local_superlink import local_flwr_env, stop_superlinks

ROOT = Path(__file__).parents[1]


@pytest.mark.e2e
def test_flwr_run_local_simulation(tmp_path):
    # the flwr CLI of this interpreter's environment (CI runs .venv/bin/python without activating the venv);
    # missing, it fails the test (FileNotFoundError): flwr is a dependency, not a reason to skip
    flwr = executable("flwr")
    home, out = tmp_path / "flwr-home", tmp_path / "run"
    overrides = tmp_path / "overrides.toml"
    overrides.write_text(  # the project's keys, under its namespace in the run config
        "uedp.dataset.options = '{\"num_users\": 6, \"min_sentences\": 20, \"max_sentences\": 25}'\n"
        "uedp.tokenizer.vocab_size = 300\nuedp.model.options = '{\"emb_dim\": 16, \"hidden_dim\": 16}'\n"
        "uedp.privacy.q_u = 0.5\nuedp.privacy.m_max = 6\nuedp.privacy.delta = 1e-3\n"
        "uedp.privacy.target_epsilon = 6.0\n"
        f"uedp.federation.rounds = 2\nuedp.federation.eval_every = 2\nuedp.federation.out_dir = \"{out}\"\n"
    )
    env = local_flwr_env(home, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
                         UEDP_CACHE_DIR=str(tmp_path / "cache"))
    try:
        proc = subprocess.run(
            [flwr, "run", ".", "--stream", "--run-config", str(overrides),
             "--federation-config", "num-supernodes=6 client-resources-num-cpus=1"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["rounds"] == 2 and summary["strategy"] == "uedp"
        assert summary["eps_uedp"] <= 6.0
    finally:
        stop_superlinks(home)
    assert (ROOT / "pyproject.toml").read_text().count("[tool.flwr.federations") == 0
