"""The simulation runs against an existing Ray cluster given by address: a `ray start --head` on loopback
with a second node joined to it (`ray start --address`), a short simulation through the Hydra entry point on
that cluster with client actors on BOTH nodes (every sampled client answering through Flower, nothing
dropped, no client statistic in the private run's rows: formerly tests/test_flower_e2e.py), then a 2-job
Hydra sweep dispatched to the same cluster by Hydra's Ray launcher (`hydra/launcher=ray_cluster`), and the
cluster stopped by process id. One cluster for all of it: starting one costs ~15 s of the end-to-end tier."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from runtime.processes import pids_matching
from runtime.ray_cluster import _cluster_pids, actors_per_node, ray_cluster
from tests.helpers import operator_rows
from uedp.privacy.ledger import Ledger

ROOT = Path(__file__).parents[1]


@pytest.mark.e2e
def test_simulation_and_a_sweep_on_an_existing_ray_cluster(tmp_path):
    temp = Path(tempfile.mkdtemp(prefix="ur-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    request_cleanup = temp
    with ray_cluster(cpus=1, temp_dir=temp, workers=(1,)) as address:
        assert address.startswith("127.0.0.1:")
        logs = temp / "session_latest" / "logs"
        drivers_before = set(logs.glob("python-core-driver-*"))
        proc = subprocess.run(
            [sys.executable, "-m", "experiments.run", "runner=simulation", f"federation.ray_address={address}",
             "dataset.options.num_users=4", "+dataset.options.min_sentences=20", "+dataset.options.max_sentences=25",
             "tokenizer.vocab_size=300", "model.options.emb_dim=16", "model.options.hidden_dim=16",
             "privacy.q_u=1.0", "privacy.m_max=4", "privacy.delta=1e-3", "privacy.target_epsilon=6",
             "federation.rounds=2", "federation.eval_every=2", f"hydra.run.dir={tmp_path / 'run'}"],
            cwd=ROOT, capture_output=True, text=True, timeout=600,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert summary["rounds"] == 2 and summary["population"] == 4
        assert summary["strategy"] == "uedp" and summary["private"] and math.isfinite(summary["final"]["perplexity"])
        assert [r.round for r in Ledger.load(tmp_path / "run" / "ledger.json").records] == [1, 2]
        rows = operator_rows(tmp_path / "run")  # the counts: the operator log's
        assert len(rows) == 2
        for r in rows:  # every sampled client answered through Flower, and nothing was dropped
            assert r["sampled"] >= 1 and r["replies"] == r["sampled"] and r["failed"] == 0
            assert r["dropped_shape"] == 0 and r["dropped_nonfinite"] == 0
            assert "train_loss" not in r  # private run: no client statistic
        # the run's driver registered with THIS cluster (its log is in the cluster's session directory)
        assert set(logs.glob("python-core-driver-*")) - drivers_before
        # and it did not start a Ray instance of its own: the only GCS is the cluster's
        assert len(pids_matching(lambda cmd: "gcs_server" in cmd and str(temp) in cmd)) == 1
        # two nodes of one CPU each, and the simulation's client actors (1 CPU each) ran on both
        nodes = actors_per_node(address)
        assert sorted((n["head"], n["cpus"]) for n in nodes) == [(False, 1.0), (True, 1.0)]
        assert all(n["client_actors"] >= 1 for n in nodes), nodes
        _sweep_on_the_cluster(address, tmp_path / "sweep")
    assert _cluster_pids((str(temp),)) == [], "cluster processes left running"
    shutil.rmtree(request_cleanup, ignore_errors=True)




def _sweep_on_the_cluster(address: str, sweep: Path) -> None:
    """Two jobs of `python -m experiments.run -m` as Ray tasks on the cluster (Hydra's Ray launcher, one CPU
    each): both finish with their files in the sweep directory, and each ran in a Ray worker process, not in
    the driver (Ray prefixes a task's output with its function and worker pid)."""
    driver = subprocess.Popen(
        [sys.executable, "-m", "experiments.run", "-m", "hydra/launcher=ray_cluster",
         f"hydra.launcher.ray.init.address={address}", "runner=local", "strategy=uedp,fedavg",
         "dataset.options.num_users=4", "+dataset.options.min_sentences=20", "+dataset.options.max_sentences=25",
         "tokenizer.vocab_size=300", "model.options.emb_dim=16", "model.options.hidden_dim=16",
         "privacy.q_u=1.0", "privacy.m_max=4", "privacy.delta=1e-3", "privacy.target_epsilon=6",
         "federation.rounds=2", "federation.eval_every=2", f"hydra.sweep.dir={sweep}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        output, _ = driver.communicate(timeout=600)
    finally:
        driver.kill()
    assert driver.returncode == 0, output[-4000:]
    assert "Ray Launcher is launching 2 jobs" in output
    strategies = sorted(json.loads((sweep / str(i) / "summary.json").read_text())["strategy"] for i in (0, 1))
    assert strategies == ["fedavg", "uedp"]
    assert all((sweep / str(i) / "ledger.json").is_file() for i in (0, 1))
    workers = set(re.findall(r"\(_run_job pid=(\d+)", output))
    assert workers and str(driver.pid) not in workers, output[-3000:]
