"""What a new user meets first: `uedp --version`, and a progress line that names the epsilon it shows."""

from __future__ import annotations

import io
import re

import pytest

import uedp.cli
from server.metrics import MetricsWriter
from uedp.versions import package_version


def test_version_names_the_package_and_what_it_runs_with(capsys):
    with pytest.raises(SystemExit) as stop:
        uedp.cli.main(["--version"])
    out = capsys.readouterr().out
    assert stop.value.code == 0
    assert out.startswith(f"uedp {package_version('uedp')} (flwr {package_version('flwr')}, dp-accounting ")


def test_the_progress_line_names_its_epsilon(tmp_path):
    stream = io.StringIO()
    writer = MetricsWriter(tmp_path, stream=stream)
    writer.progress(round=3, rounds=30, eps=("eps_undetected", 7.9876), metric=("perplexity", 917.61), extra="x=1")
    writer.progress(round=1, rounds=2, eps=None, metric=None)
    first, second = stream.getvalue().splitlines()
    assert re.match(r"\[round    3/30\] eps_undetected=7\.988 perplexity=917\.6 x=1 \(\s*\d+\.\ds\)$", first)
    assert second.startswith("[round    1/2] eps=n/a (")


def test_a_private_run_shows_its_largest_claimed_epsilon_by_name(tmp_path):
    """The run's progress line shows the largest of the claimed epsilons, under its own name (here eps_user:
    user-level DP claims only that one)."""
    from runtime.local_grid import LocalGrid, set_local_task_identity
    from server.app import run_server
    from tests.helpers import tiny_config

    set_local_task_identity()
    cfg = tiny_config(tmp_path, strategy={"name": "user_dp"}, federation={"rounds": 1, "eval_every": 1})
    stream = io.StringIO()
    run_server(LocalGrid(cfg, 8), cfg, stream=stream)
    (line,) = [x for x in stream.getvalue().splitlines() if x.startswith("[round ")]
    assert re.search(r"\] eps_user=\d+\.\d{3} ", line), line
