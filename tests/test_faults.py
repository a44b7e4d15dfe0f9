"""The fault study's logic without processes (studies/faults.py; the e2e test is tests/test_faults_e2e.py): the
schedule is a function of its seed with the promised shape, the injector fires it at a stand-in federation
(server faults end their attempt, a late one waits for the next round line, a restart follows its kill, one
not due at the end is cancelled), and the output checks find a lost or changed record, a half-written file
and a leftover temporary."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import torch

from studies.fault_checks import check_outputs
from studies.fault_injector import Injector, run_with_faults
from studies.fault_report import markdown, totals
from studies.fault_runs import Settings
from studies.fault_schedule import (
    FAULT_KINDS,
    SERVERAPP_KILL,
    SUPERLINK_KILL,
    SUPERNODE_KILL,
    SUPERNODE_RESTART,
    Fault,
    Schedule,
    make_schedule,
)
from tests.helpers import assert_each_fault_fired_once
from uedp.config import RunConfig
from uedp.flower.checkpoint import RunCheckpoint, save_checkpoint
from uedp.flower.resume import LEDGER, METRICS
from uedp.privacy.ledger import Ledger, RoundRecord
from uedp.privacy.mechanisms import spec_for
from uedp.summary import SUMMARY


# -- the schedule -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(12))
def test_schedule_shape(seed):
    s = make_schedule(seed, nodes=20, rounds=5)
    assert s == make_schedule(seed, nodes=20, rounds=5)  # a function of the seed
    assert s.count(SUPERLINK_KILL) == s.count(SERVERAPP_KILL) == 1
    server = [f for f in s.faults if f.kind in (SUPERLINK_KILL, SERVERAPP_KILL)]
    assert len({f.after_round for f in server}) == 2 and all(1 <= f.after_round < 5 for f in server)
    kills = {f.node: f for f in s.faults if f.kind == SUPERNODE_KILL}
    restarts = [f for f in s.faults if f.kind == SUPERNODE_RESTART]
    assert len(kills) == s.count(SUPERNODE_KILL) == 4 and len(restarts) == 2  # distinct nodes; half come back
    assert all(0 <= n < 20 and 1 <= f.after_round < 5 for n, f in kills.items())
    for r in restarts:  # a restart follows its node's kill, past Flower's heartbeat expiry, in the run's first half
        kill = kills[r.node]
        assert r.after_round == kill.after_round <= 3 and r.delay >= kill.delay + 60.0
    assert all(0 <= f.delay <= 3.0 for f in s.faults if f.kind != SUPERNODE_RESTART)
    assert list(s.faults) == sorted(s.faults, key=lambda f: (f.after_round, f.delay, FAULT_KINDS.index(f.kind)))


def test_schedules_differ_by_seed_and_options_are_checked():
    assert len({make_schedule(seed, nodes=20, rounds=5).faults for seed in range(10)}) == 10
    small = make_schedule(0, nodes=4, rounds=3, node_kills=2, restarts=0)
    assert small.count(SUPERNODE_KILL) == 2 and small.count(SUPERNODE_RESTART) == 0
    assert make_schedule(0, nodes=4, rounds=3).count(SUPERNODE_KILL) == 1  # nodes // 5, at least one
    for bad in ({"rounds": 2}, {"node_kills": 4}, {"node_kills": 1, "restarts": 2}, {"max_delay": -1.0}):
        with pytest.raises(ValueError):
            make_schedule(0, **{"nodes": 4, "rounds": 3, **bad})
    assert json.loads(json.dumps(small.to_dict()))["faults"][0]["kind"] in FAULT_KINDS


# -- the injector -------------------------------------------------------------------------------------------
class FakeProc:
    def __init__(self) -> None:
        self.dead = False

    def poll(self):
        return -9 if self.dead else None


class FakeFederation:
    """What the injector calls, recorded; `run` plays `flwr run`: reports rounds until a server fault."""

    def __init__(self, rounds: int) -> None:
        self.rounds, self.calls = rounds, []
        self.done = 0  # rounds charged
        self.procs = {"flwr-run": FakeProc(), "superlink": FakeProc()}
        self._lock = threading.Lock()

    def kill(self, name):
        self.calls.append(("kill", name))
        if name in self.procs:
            self.procs[name].dead = True

    def kill_serverapp(self):
        self.calls.append(("kill_serverapp",))
        self.procs["flwr-run"].dead = True
        return [123]

    def serverapps(self):
        return [] if self.procs["flwr-run"].dead else ["app"]

    def restart_node(self, i):
        self.calls.append(("restart_node", i))
        return 2

    def restart_superlink(self):
        self.calls.append(("restart_superlink",))
        self.procs["superlink"] = FakeProc()

    def run(self, overrides, *, timeout, on_round, echo=None):
        self.calls.append(("run", overrides["federation.resume"]))
        self.procs["flwr-run"] = cli = FakeProc()
        while self.done < self.rounds:
            time.sleep(0.05)
            if cli.dead or self.procs["superlink"].dead:
                return -9
            self.done += 1
            on_round(self.done)
        time.sleep(0.05)
        return 0


@pytest.fixture
def no_cli_kill(monkeypatch):
    monkeypatch.setattr("studies.fault_injector.kill_process", lambda proc: setattr(proc, "dead", True))


def test_injector_runs_a_schedule_to_the_end(no_cli_kill):
    fed = FakeFederation(rounds=4)
    schedule = Schedule(0, 3, 4, (Fault(SUPERNODE_KILL, 1, 0.0, 2), Fault(SUPERLINK_KILL, 1, 0.01),
                                  Fault(SUPERNODE_RESTART, 1, 0.02, 2), Fault(SERVERAPP_KILL, 3, 0.01)))
    injector = Injector(fed, schedule, log=lambda s: None)
    attempts = run_with_faults(fed, {"federation.resume": False}, injector, log=lambda s: None)
    injector.close()
    assert_each_fault_fired_once(injector.counts(), attempts)
    assert attempts[-1]["rc"] == 0 and not injector.errors and not injector.cancelled
    assert [c for c in fed.calls if c[0] == "run"] == [("run", False), ("run", True), ("run", True)]
    assert ("restart_superlink",) in fed.calls and ("kill", "supernode-2") in fed.calls
    assert ("restart_node", 2) in fed.calls and fed.calls.index(("kill", "supernode-2")) < fed.calls.index(
        ("restart_node", 2))
    restart = next(e for e in injector.events if e["kind"] == SUPERNODE_RESTART)
    assert restart["starts"] == 2


def test_a_server_fault_due_after_its_attempt_waits_and_a_late_restart_is_cancelled(no_cli_kill):
    fed = FakeFederation(rounds=3)
    injector = Injector(fed, Schedule(0, 2, 3, (Fault(SERVERAPP_KILL, 1, 0.0), Fault(SUPERNODE_KILL, 1, 0.0, 1),
                                                Fault(SUPERNODE_RESTART, 1, 30.0, 1))), log=lambda s: None)
    injector.begin_attempt()
    injector.on_round(1)
    time.sleep(0.2)  # the ServerApp kill ends attempt 1
    assert injector.end_attempt() == SERVERAPP_KILL
    # a second server fault that comes due once its attempt is over waits for the next round line
    injector._do(Fault(SUPERLINK_KILL, 2, 0.0), attempt=1)
    assert injector.counts()[SUPERLINK_KILL] == 0 and injector._waiting[-1].after_round == 0
    injector.close(timeout=1.0)
    assert injector.cancelled and {c["kind"] for c in injector.cancelled} == {SUPERNODE_RESTART, SUPERLINK_KILL}
    assert ("restart_node", 1) not in fed.calls


def test_a_fault_after_round_0_comes_with_the_first_submission(no_cli_kill):
    fed = FakeFederation(rounds=2)
    injector = Injector(fed, Schedule(0, 2, 2, (Fault(SUPERNODE_KILL, 0, 0.0, 1),
                                                Fault(SUPERNODE_RESTART, 0, 0.01, 1))), log=lambda s: None)
    injector.begin_attempt()
    time.sleep(0.2)
    assert fed.calls == [("kill", "supernode-1"), ("restart_node", 1)]
    injector.end_attempt()
    injector.begin_attempt()  # armed once, not again with a later attempt
    injector.close(timeout=1.0)
    assert injector.counts()[SUPERNODE_KILL] == 1 and not injector.cancelled


def test_a_failing_fault_is_reported_not_raised(no_cli_kill):
    fed = FakeFederation(rounds=3)

    def broken(i):
        raise RuntimeError("refused")

    fed.restart_node = broken
    injector = Injector(fed, Schedule(0, 2, 3, (Fault(SUPERNODE_RESTART, 1, 0.0, 0),)), log=lambda s: None)
    injector._fire(Fault(SUPERNODE_RESTART, 1, 0.0, 0), 0, object())
    assert injector.errors and "refused" in injector.errors[0] and injector.counts()[SUPERNODE_RESTART] == 0


# -- the checks ---------------------------------------------------------------------------------------------
def _records(n: int, *, z: float = 0.8) -> list[RoundRecord]:
    cfg = RunConfig()
    p = cfg.privacy
    spec = spec_for(cfg.strategy.name, cfg.strategy.estimator)
    q_e, q_s = spec.rates(p)
    return [RoundRecord(round=r, rule=spec.rule, q_u=0.25, q_e=q_e, q_s=q_s, m_max=4, k_cap=1,
                        beta=p.beta, w_max=p.w_max, z=z, denominator=2.0, noise="secure") for r in range(1, n + 1)]


def _finished_run(out: Path, records: list[RoundRecord], *, rows: list[int] | None = None,
                  ckpt_round: int | None = None) -> None:
    out.mkdir(parents=True)
    ledger = Ledger(delta=1e-3, num_users=4)
    for r in records:
        ledger.append(r)
    ledger.save(out / LEDGER)
    rows = [r.round for r in records] if rows is None else rows
    (out / METRICS).write_text("".join(json.dumps({"round": r, "replies": 1.0}) + "\n" for r in rows))
    (out / "metrics.csv").write_text("round,replies\n" + "".join(f"{r},1.0\n" for r in rows))
    (out / SUMMARY).write_text(json.dumps({"rounds": len(records)}))
    save_checkpoint(out, RunCheckpoint(ckpt_round or len(records), {"w": torch.zeros(2)}, {}, ledger.to_dict(), {}))
    torch.save({"weights": [torch.zeros(2)]}, out / "model.pt")


def test_a_finished_run_passes_and_each_kind_of_damage_is_found(tmp_path):
    ref = _records(3)
    _finished_run(tmp_path / "ok", ref)
    check = check_outputs(tmp_path / "ok", ref, rounds=3)
    assert check.ok and check.rounds == 3 and check.records_lost == 0, check.problems
    # a round whose ServerApp died between its ledger save and its metrics row (its checkpoint is older)
    _finished_run(tmp_path / "late", ref, rows=[1, 2], ckpt_round=2)
    assert check_outputs(tmp_path / "late", ref, rounds=3).ok

    _finished_run(tmp_path / "z", _records(3, z=0.9))  # every record differs from the reference
    check = check_outputs(tmp_path / "z", ref, rounds=3)
    assert check.records_lost == 3 and not check.ledger_intact and check.outputs_intact
    _finished_run(tmp_path / "short", ref[:2], rows=[1, 2])
    check = check_outputs(tmp_path / "short", ref, rounds=3)
    assert check.records_lost == 1 and check.rounds == 2 and not check.ok

    _finished_run(tmp_path / "bad", ref)
    bad = tmp_path / "bad"
    (bad / SUMMARY).write_text('{"rounds": 3')  # half-written
    (bad / ".checkpoint.pt.0123abcd.tmp").write_bytes(b"x")  # an atomic write that never finished
    with (bad / METRICS).open("a") as f:
        f.write('{"round": 4}\n{"rou')  # a row of a round never charged, then a torn line
    (bad / "checkpoint.pt").write_bytes((bad / "checkpoint.pt").read_bytes()[:100])
    check = check_outputs(bad, ref, rounds=3)
    assert check.ledger_intact and not check.outputs_intact and check.temporaries == [".checkpoint.pt.0123abcd.tmp"]
    text = "\n".join(check.outputs)
    for what in (SUMMARY, "temporary file left: .checkpoint.pt.0123abcd.tmp", "round 4 is not in", "line 5",
                 "checkpoint.pt", "metrics.csv"):
        assert what in text, (what, text)

    broken = tmp_path / "broken"
    _finished_run(broken, ref)
    data = json.loads((broken / LEDGER).read_text())
    data["rounds"] = data["rounds"][:1] + data["rounds"][2:]  # a round deleted by hand
    (broken / LEDGER).write_text(json.dumps(data))
    check = check_outputs(broken, ref, rounds=3)
    assert not check.ledger_intact and check.records_lost == 3 and check.rounds == 0


def test_table_totals_the_runs_with_faults():
    rows = [{"run": "fault-free", "seed": None, "status": "ok", "wall_s": 10.0, "rounds_completed": 5},
            *({"run": f"run-{k}", "seed": k, "status": "ok", "wall_s": 100.0, "rounds_completed": 5,
               "records_lost": 0, **dict.fromkeys(FAULT_KINDS, 1), "ledger_intact": True} for k in (1, 2))]
    t = totals(rows)
    assert t["runs"] == 2 and t["ok"] == 2 and t[SUPERNODE_KILL] == 2 and t["rounds_completed"] == 10
    assert t["records_lost"] == 0 and t["wall_s"] == 210.0
    text = markdown(rows, Settings(nodes=20, rounds=5))
    assert "2 runs with faults (2 ok) of 20 SuperNodes" in text and "| run-2 | 2 |" in text and "| yes |" in text
