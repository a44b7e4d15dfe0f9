"""studies/figures.py: a figure's jobs run through the Hydra entry point (tiny settings), replicates
are aggregated into the table, the plot is written, and a rerun skips every finished job."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from studies.figure_jobs import job_id, jobs, restates_default
from studies.figure_settings import FIGURES

ROOT = Path(__file__).parents[1]
TINY = ["dataset.options.num_users=6", "+dataset.options.min_sentences=20", "+dataset.options.max_sentences=25",
        "tokenizer.vocab_size=300", "model.options.emb_dim=16", "model.options.hidden_dim=16", "privacy.q_u=0.5",
        "privacy.m_max=6", "privacy.delta=1e-3", "federation.rounds=2", "federation.eval_every=2"]


def test_job_ids_share_settings_that_differ_only_by_defaults():
    assert job_id(("strategy=uedp", "privacy.target_epsilon=8"), 0) == job_id(("privacy.q_s=0.2",), 0)
    assert job_id(("privacy.q_s=0.5",), 0) != job_id(("privacy.q_s=0.2",), 0)
    assert job_id(("privacy.q_s=0.5",), 0) != job_id(("privacy.q_s=0.5",), 1)
    ids = [j["id"] for j in jobs(FIGURES["qs"], 3, ())]
    assert len(ids) == len(set(ids)) == 3 * len(FIGURES["qs"].settings)


def test_job_ids_are_stable():
    """Job ids name finished jobs on disk (RUNS/jobs/ID): deriving the defaults from RunConfig and the default
    Hydra choices kept every id of every figure (those of the hard-coded default list it replaced). The qs
    figure's ids changed on purpose with the proved accounting (its base gained privacy.target_on=uedp: jobs of the old
    accounting are not reused)."""
    assert [j["id"] for j in jobs(FIGURES["qs"], 1, ())] == [
        "uedp_uedp_naive-c3a2aa03-r0", "uedp_0-d277fc12-r0", "uedp-0d167711-r0", "uedp_0.5-4744cf57-r0",
        "uedp_1-46c49b0a-r0"]
    assert [j["id"] for j in jobs(FIGURES["kcap"], 1, ())] == [
        "default-1271cf25-r0", "2-66f7aa59-r0", "4-fbc7e099-r0", "0-45e7dfdb-r0", "0.05-b2fbe00f-r0",
        "0.8-a61c939d-r0"]
    paper = ("utility-synthetic", "utility-bbc", "utility-shakespeare", "qs", "kcap")  # figures added since
    all_ids = {name: [j["id"] for j in jobs(FIGURES[name], 3, ())] for name in paper}  # have ids of their own
    digest = hashlib.sha256(json.dumps(all_ids, sort_keys=True).encode()).hexdigest()
    assert digest == "fa47170fdb2979670718e3198b50f3ccb8ddac465f32e4e05de5a958c76b789a"


@pytest.mark.parametrize("override, others, default", [
    ("strategy=uedp", (), True),  # the default option of a group
    ("dataset=synthetic", (), True),
    ("strategy=uedp_naive", (), False),
    ("privacy.target_epsilon=8", (), True),  # RunConfig's default, 8 == 8.0 for a float key
    ("train.batch_size=16", (), True),
    ("train.batch_size=32", (), False),
    ("privacy.k_cap=1.0", (), False),  # RunConfig refuses a float for an int key
    ("federation.resume=0", (), False),  # nor 0 for false
    ("strategy.estimator=f_E+", (), True),
    ("strategy.estimator=f_E+", ("strategy=uedp_naive",), False),  # the preset has its own value
    ("task.max_len=32", ("task=classification",), False),
    ("task.max_len=32", ("task=classification", "task=next_word"), True),  # the last choice counts
    ("federation.out_dir=outputs/run", (), False),  # the entry point sets its own (conf/config.yaml)
    ("+privacy.q_s=0.2", (), False),
    ("dataset.options.num_users=200", (), False),  # options are not compared
    ("privacy.q_s=0.2,0.5", (), False),
])
def test_restates_default(override, others, default):
    assert restates_default(override, (*others, override)) is default


def _run(tmp_path: Path) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "experiments.figures", "qs", "--reps", "2", "--workers", "2",
            "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]
    for o in TINY:
        args += ["--override", o]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900)


@pytest.mark.e2e
def test_qs_figure_end_to_end(tmp_path):
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    with (tmp_path / "out" / "qs.csv").open() as f:
        rows = list(csv.DictReader(f))
    settings = FIGURES["qs"].settings
    assert len(rows) == 2 * len(settings) and all(r["value"] for r in rows)  # every job finished
    table = (tmp_path / "out" / "qs.md").read_text().splitlines()
    body = [line.split(" | ") for line in table[2:]]
    assert len(body) == len(settings)
    assert all(cells[2] == "2" and cells[3] == "0" for cells in body)  # n = 2 replicates, none failed
    # the figure's premise, from the collected table: eps_uedp is the target for every q_s, while
    # eps_undetected grows with q_s (and f_E has no extended entities)
    by_qs = {float(r["setting"].split("privacy.q_s=")[1]): r for r in rows if "privacy.q_s=" in r["setting"]}
    assert all(abs(float(r["eps_uedp"]) - 8.0) < 0.05 for r in rows)  # z calibrated to 1e-3: ~1e-2 below 8
    und = [float(by_qs[q]["eps_undetected"]) for q in sorted(by_qs)]
    assert und == sorted(und) and und[-1] > und[0]
    assert (tmp_path / "out" / "qs.png").stat().st_size > 10_000
    # a rerun runs nothing new
    again = _run(tmp_path)
    assert again.returncode == 0 and "0 to run" in again.stdout


def test_summary_of_a_diverged_setting_is_inf_not_a_crash():
    from studies.figure_tables import summarize

    row = {"metric": "perplexity", "z": 1.0, "eps_uedp": 8.0, "eps_user": 5.0, "eps_undetected": 8.0,
           "initial": 2000.0}
    rows = [{**row, "setting": "privacy.k_cap=0", "rep": r, "value": v} for r, v in enumerate([math.inf, 900.0])]
    rows += [{"setting": "privacy.k_cap=1", "rep": 0, "status": "FAILED: boom"},
             {**row, "setting": "privacy.k_cap=1", "rep": 1, "value": 700.0},
             {**row, "setting": "privacy.k_cap=1", "rep": 2, "value": 720.0}]
    out = {s["setting"]: s for s in summarize(rows)}
    assert out["privacy.k_cap=0"]["mean"] == math.inf and math.isnan(out["privacy.k_cap=0"]["sd"])
    k1 = out["privacy.k_cap=1"]
    # (700 + 720) / 2 is exact in float64; sd = sqrt(200) = 14.1421..., quoted to 3 decimals (1e-3 covers it)
    assert k1["n"] == 2 and k1["failed"] == 1 and k1["mean"] == 710.0 and abs(k1["sd"] - 14.142) < 1e-3


def test_population_jobs_follow_the_fixed_cohort_rule_and_the_gap_table_divides_by_fedavg():
    from studies.figure_settings import COHORT
    from studies.figure_tables import gap_rows

    ids = {j["id"] for j in jobs(FIGURES["population"], 1, ())}
    assert len(ids) == 9  # 3 populations x 3 methods
    for j in jobs(FIGURES["population"], 1, ()):
        opts = dict(o.split("=", 1) for o in j["overrides"])
        n = int(opts["dataset.options.num_users"])
        # q_u is written as COHORT / n with 6 significant digits (:g): 5e-6 relative at most
        assert float(opts["privacy.q_u"]) * n == pytest.approx(COHORT, rel=5e-6)  # the same expected cohort at every N
        assert int(opts["privacy.m_max"]) == int(1.6 * COHORT)
    # the cohort-100 jobs of the cohort study and the scratch jobs of the public starts ARE population jobs
    population = {j["id"] for j in jobs(FIGURES["population"], 1, ())}
    assert {j["id"] for j in jobs(FIGURES["public-start"], 1, ()) if "model.init" not in " ".join(j["overrides"])
            } <= population
    summary = [{"strategy": "fedavg", "n": "5000", "mean": 400.0, "initial": 2000.0},
               {"strategy": "user_dp", "n": "5000", "mean": 600.0, "initial": 2000.0},
               {"strategy": "uedp", "n": "5000", "mean": 1000.0, "initial": 2000.0}]
    assert gap_rows(summary, "n") == [["5000", "400", "600 (1.50x)", "1000 (2.50x)", "2000"]]


def test_the_matched_figure_covers_every_k_and_plots_utility_against_k(tmp_path):
    """matched-5000: user-level DP at every K, de-identification + user-level DP at its K, the references;
    the table gains the K-holder epsilon (summary.json `holders`) and the plot has one line per method."""
    from studies.figure_settings import MATCHED_DEID_K_5000, MATCHED_K_5000
    from studies.figures import write_outputs

    fig = FIGURES["matched-5000"]
    settings = [dict(o.split("=", 1) for o in s) for s in fig.settings]
    for method, ks in (("user_dp", MATCHED_K_5000), ("deid_dp", MATCHED_DEID_K_5000)):
        assert sorted(int(s["privacy.target_holders"]) for s in settings if s["strategy"] == method) == sorted(ks)
    assert {s["strategy"] for s in settings} == {"user_dp", "deid_dp", "fedavg", "uedp"}
    row = {"metric": "perplexity", "z": 1.0, "eps_uedp": math.inf, "eps_user": 0.5, "eps_undetected": 2.0,
           "initial": 2000.0, "rep": 0}
    rows = [{**row, "setting": f"strategy={m} privacy.target_holders={k}", "value": 400.0 + k, "eps_holders": 7.9}
            for m in ("user_dp", "deid_dp") for k in (1, 10)]
    rows += [{**row, "setting": "strategy=fedavg", "value": 381.0}, {**row, "setting": "strategy=uedp", "value": 874.0}]
    summary = write_outputs(fig, rows, tmp_path)
    text = (tmp_path / "matched-5000.md").read_text()
    assert "eps_holders" in text.splitlines()[0] and (tmp_path / "matched-5000.png").stat().st_size > 0
    assert [s.get("eps_holders") for s in summary][:4] == [7.9] * 4 and "eps_holders" not in summary[-1]
