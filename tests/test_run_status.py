"""`flwr run --stream` exits 0 however the run finished (Flower 1.42 ends the log stream at any "finished" status:
a SIGKILLed ServerApp's run becomes "finished:failed" when its heartbeat expires, and the stream ends with 0),
so Federation.run (runtime/federation.py) asks the SuperLink for the run's status (`flwr ls --run-id N --format
json`) and reports a run that did not complete as a failure. Here with a fake `flwr` executable; the faults
study's end-to-end test (tests/test_faults_e2e.py) asks a real SuperLink."""

from __future__ import annotations

import json
import sys

import pytest

import runtime.federation as federation_module
from runtime.federation import CONNECTION, Federation
from runtime.flwr_run import COMPLETED, RUN_NOT_COMPLETED, UNKNOWN, RunStatus, parse_run_status
from studies.fault_checks import last_run_problem

RUN_ID = 18135387404362574947  # Flower's run ids are 64-bit
HEARTBEAT = "No heartbeat received from the task"  # Flower's details of a run whose ServerApp was killed

# The fake `flwr`: `run` prints what flwr 1.42 prints (the run id, then the stream) and exits FAKE_RUN_RC; `ls`
# prints FAKE_LS (flwr ls --format json's output) and exits 0, as flwr does also on errors. Each call's
# arguments are appended to FAKE_CALLS.
FAKE = """#!{python}
import json, os, sys
with open(os.environ["FAKE_CALLS"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1] == "run":
    if os.environ.get("FAKE_NO_ID") != "1":
        print("Using SuperLink: uedp-procs (127.0.0.1:1)")
        print("\\x1b[32mSuccessfully started run {run_id}\\x1b[0m")
    print("INFO :      [round 1/2] 1 of 1 replies")
    print("INFO :      [round 2/2] 1 of 1 replies")
    sys.exit(int(os.environ.get("FAKE_RUN_RC", "0")))
if sys.argv[1] == "ls":
    print(os.environ["FAKE_LS"])
    sys.exit(0)
sys.exit(2)
"""


def _ls(status: str, details: str = "N/A", run_id: int = RUN_ID) -> str:
    """What `flwr ls --run-id N --format json` prints (flwr/cli/ls.py `_to_json`, through rich's print_json)."""
    return json.dumps({"success": True, "runs": [{"run-id": str(run_id), "federation-id": "", "status": status,
                                                  "status-details": details, "elapsed": 61.0}]}, indent=2)


# what flwr ls --format json printed (exit status 0) when asked of a run the SuperLink does not have
LS_ERROR = json.dumps({"success": False, "error-message": "Using SuperLink: uedp-procs (127.0.0.1:1)\n "
                       "Displaying information for run ID 5...\n\n[code: 16] Run ID not found."}, indent=2)


@pytest.fixture
def fed(tmp_path, monkeypatch) -> Federation:
    """A Federation whose `flwr` is the fake (no process of Flower is started)."""
    flwr = tmp_path / "bin" / "flwr"
    flwr.parent.mkdir()
    flwr.write_text(FAKE.format(python=sys.executable, run_id=RUN_ID))
    flwr.chmod(0o755)
    monkeypatch.setattr(federation_module, "executable", lambda name, **_: str(flwr) if name == "flwr" else name)
    monkeypatch.setenv("FAKE_CALLS", str(tmp_path / "calls.jsonl"))
    monkeypatch.setattr(federation_module.time, "sleep", lambda s: None)  # run_status's pause between tries
    home, app = tmp_path / "home", tmp_path / "app"
    (home / "logs").mkdir(parents=True)
    app.mkdir()
    return Federation(nodes=0, home=home, root=app, stage_app=False)


def _calls(fed: Federation) -> list[list[str]]:
    path = fed.home.parent / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _run(fed: Federation) -> tuple[int, list[str], list[int]]:
    lines: list[str] = []
    rounds: list[int] = []
    rc = fed.run({"federation.rounds": 2}, timeout=60, on_round=rounds.append, echo=lines.append)
    return rc, lines, rounds


def test_a_run_whose_serverapp_was_killed_is_a_failure_though_flwr_exits_0(fed, monkeypatch):
    monkeypatch.setenv("FAKE_LS", _ls("finished:failed", HEARTBEAT))
    rc, lines, rounds = _run(fed)
    assert rc == RUN_NOT_COMPLETED != 0
    assert fed.last_run == RunStatus(RUN_ID, "finished:failed", HEARTBEAT) and not fed.last_run.completed
    assert rounds == [1, 2]  # the stream was read as before
    assert _calls(fed)[-1] == ["ls", CONNECTION, "--run-id", str(RUN_ID), "--format", "json"]
    said = [ln for ln in lines if ln.startswith("FAILED")]
    assert len(said) == 1 and "finished:failed" in said[0] and HEARTBEAT in said[0] and str(RUN_ID) in said[0]
    assert said[0] in (fed.home / "logs" / "flwr-run.log").read_text()


def test_a_completed_run_is_a_success(fed, monkeypatch):
    monkeypatch.setenv("FAKE_LS", _ls(COMPLETED))
    rc, lines, _ = _run(fed)
    assert rc == 0 and fed.last_run == RunStatus(RUN_ID, COMPLETED, "") and fed.last_run.completed
    assert not any(ln.startswith("FAILED") for ln in lines)  # the stream as before
    assert f"run {RUN_ID}: {COMPLETED}" in (fed.home / "logs" / "flwr-run.log").read_text()


@pytest.mark.parametrize("status", ["finished:stopped", "running"])
def test_any_other_status_is_a_failure(fed, monkeypatch, status):
    monkeypatch.setenv("FAKE_LS", _ls(status))
    assert _run(fed)[0] == RUN_NOT_COMPLETED and fed.last_run.status == status


def test_flwrs_own_failure_is_returned_as_it_is(fed, monkeypatch):
    monkeypatch.setenv("FAKE_RUN_RC", "1")
    monkeypatch.setenv("FAKE_LS", _ls(COMPLETED))
    assert _run(fed)[0] == 1 and fed.last_run is None
    assert [c[0] for c in _calls(fed)] == ["run"]  # nothing asked


def test_an_unknown_status_is_a_failure(fed, monkeypatch):
    """Fail closed: the SuperLink's error (which flwr ls prints as JSON and exits 0 with) after every try."""
    monkeypatch.setenv("FAKE_LS", LS_ERROR)
    rc, lines, _ = _run(fed)
    assert rc == RUN_NOT_COMPLETED and fed.last_run.status == UNKNOWN and "Run ID not found" in fed.last_run.details
    assert [c[0] for c in _calls(fed)] == ["run", "ls", "ls", "ls"]
    assert any(ln.startswith("FAILED") and UNKNOWN in ln for ln in lines)


def test_no_run_id_is_a_failure(fed, monkeypatch):
    monkeypatch.setenv("FAKE_NO_ID", "1")
    monkeypatch.setenv("FAKE_LS", _ls(COMPLETED))
    assert _run(fed)[0] == RUN_NOT_COMPLETED and fed.last_run.status == UNKNOWN and fed.last_run.run_id is None
    assert "Successfully started run" in fed.last_run.details and [c[0] for c in _calls(fed)] == ["run"]


def test_parse_run_status():
    assert parse_run_status("Listing...\n" + _ls(COMPLETED), RUN_ID) == RunStatus(RUN_ID, COMPLETED, "")
    assert parse_run_status(_ls("finished:failed", HEARTBEAT), RUN_ID).details == HEARTBEAT
    for bad, match in [(_ls(COMPLETED, run_id=7), "no status of run"), (LS_ERROR, "Run ID not found"),
                       ("", "no JSON"), ("{not json", "")]:
        with pytest.raises(ValueError, match=match):
            parse_run_status(bad, RUN_ID)


def test_the_faults_study_reports_the_last_runs_status():
    """studies/fault_checks.py: the last attempt's exit status and the SuperLink's status of its run."""
    failed = {"run_id": RUN_ID, "status": "finished:failed", "details": HEARTBEAT}
    problem = last_run_problem([{"rc": -9, "ended_by": "serverapp_kill", "run_status": None},
                                {"rc": RUN_NOT_COMPLETED, "ended_by": None, "run_status": failed}])
    assert problem is not None and "exited 0" in problem and "finished:failed" in problem and HEARTBEAT in problem
    done = {"run_id": RUN_ID, "status": COMPLETED, "details": ""}
    assert last_run_problem([{"rc": 0, "ended_by": None, "run_status": done}]) is None
    assert last_run_problem([{"rc": 0, "ended_by": None}]) is None  # a fake federation's attempt: rc only
    assert last_run_problem([{"rc": -9, "ended_by": None, "run_status": None}]) == "the last flwr run exited -9"
    assert last_run_problem([]) == "the last flwr run exited never ran"
