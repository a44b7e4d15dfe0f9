"""studies/frontier.py: K* as the crossing of user-level DP's mean curve with UeDP's, its bootstrap interval
over replicates, and the command on a run directory with no finished job."""

from __future__ import annotations

import subprocess
import sys

import pytest

from studies.frontier import crossover, frontier


def test_crossover_interpolates_between_the_bracketing_k() -> None:
    user = [(0, 100.0), (40, 200.0), (60, 400.0)]
    assert crossover(300.0, user) == pytest.approx(50.0)  # halfway from 200 (K 40) to 400 (K 60)
    assert crossover(150.0, user) == pytest.approx(20.0)
    assert crossover(500.0, user) is None  # user-level DP never worse: K* beyond the largest K
    assert crossover(50.0, user) is None  # worse already at K = 0


def test_frontier_interval_brackets_the_point_and_shrinks_without_spread() -> None:
    values = {("uedp", None): [300.0, 310.0, 290.0], ("user_dp", 0): [100.0],
              ("user_dp", 40): [190.0, 200.0, 210.0], ("user_dp", 60): [380.0, 400.0, 420.0]}
    got = frontier(values, (0, 40, 60), resamples=500)
    lo, hi = got["interval"]
    assert got["k_star"] == pytest.approx(50.0)
    assert 40 <= lo <= got["k_star"] <= hi <= 60 and hi - lo > 1
    fixed = {k: [sum(v) / len(v)] for k, v in values.items()}  # one replicate each: nothing to resample
    assert frontier(fixed, (0, 40, 60), resamples=50)["interval"] == pytest.approx((50.0, 50.0))
    assert frontier({("uedp", None): [1.0]}, (0, 40), resamples=10)["k_star"] is None


def test_the_command_reads_an_empty_run_directory(tmp_path) -> None:
    done = subprocess.run([sys.executable, "-m", "experiments.frontier", "--runs", str(tmp_path / "runs"), "--out",
                           str(tmp_path / "out"), "--resamples", "10"], capture_output=True, text=True, check=True)
    text = (tmp_path / "out" / "frontier.md").read_text()
    assert "5,000 users" in text and "20,000 users" in text and "non-entity tokens" in text
    assert "K*" in done.stdout


def test_the_frontier_job_list_follows_its_cut_order() -> None:
    """The job list written before any run: replicate 0 of every arm first (FedAvg, UeDP, user-level DP at K = 0,
    the two K around the expected crossover, then the others, the 20,000-user K 80 and 340 last), then
    replicates 1 and 2 of FedAvg, UeDP and the two bracketing K only; the same expected cohort of 100."""
    from studies.figure_jobs import jobs
    from studies.figure_settings import FIGURES, FRONTIER_BRACKET, FRONTIER_K

    for n in (5000, 20000):
        todo = jobs(FIGURES[f"frontier-{n}"], 3, ())
        first = [dict(o.split("=", 1) for o in j["setting"]) for j in todo if j["rep"] == 0]
        assert [s["strategy"] for s in first[:2]] == ["fedavg", "uedp"]
        assert [int(s["privacy.target_holders"]) for s in first[2:]] == list(FRONTIER_K[n])
        assert all(j["rep"] == 0 for j in todo[:len(first)])  # every replicate 0 before any further one
        later = [dict(o.split("=", 1) for o in j["setting"]) for j in todo if j["rep"] > 0]
        assert len(later) == 2 * 4
        assert {int(s["privacy.target_holders"]) for s in later if "privacy.target_holders" in s} == set(
            FRONTIER_BRACKET[n])
        for j in todo:
            opts = dict(o.split("=", 1) for o in j["overrides"])
            assert float(opts["privacy.q_u"]) * n == pytest.approx(100, rel=1e-5)
    assert list(FRONTIER_K[20000])[-2:] == [80, 340]


def test_each_k_takes_the_learning_rate_of_the_nearer_tuned_k() -> None:
    """The tuning (seed 1) chose 1 at K = 0 and 0.3 at K = 60 of 5,000; the other K take the nearer one's choice
    as a share of N, and the job's overrides carry it."""
    from studies.figure_jobs import jobs
    from studies.figure_settings import FIGURES, frontier_lr

    assert [frontier_lr(5000, k) for k in (0, 20, 40, 60, 85)] == [1.0, 1.0, 0.3, 0.3, 0.3]
    assert [frontier_lr(20000, k) for k in (0, 80, 160, 240, 340)] == [1.0, 1.0, 0.3, 0.3, 0.3]
    for j in jobs(FIGURES["frontier-5000"], 1, ()):
        opts = dict(o.split("=", 1) for o in j["overrides"])
        if opts.get("strategy") == "user_dp":
            want = frontier_lr(5000, int(opts["privacy.target_holders"]))
            assert float(opts.get("server.lr", 1.0)) == want
