"""Load and faults at once, small (studies/faults.py; the full size is `python -m experiments.faults`,
docs/figures/faults.md): 4 data owners' SuperNodes over TLS with SuperNode authentication, 4 rounds, while
one SuperNode is SIGKILLed and restarted, the SuperLink is SIGKILLed and restarted, and the ServerApp alone is
SIGKILLed; after each server fault the run is submitted again with federation.resume = true. The run
finishes its rounds, its ledger equals a fault-free run's record for record, nothing is half-written, and no
process is left running."""

from __future__ import annotations

import time

import pytest

from runtime.federation import executable
from studies.fault_runs import Settings, reference_in_process, run_one, write_owners
from studies.fault_schedule import SERVERAPP_KILL, SUPERLINK_KILL, SUPERNODE_KILL, SUPERNODE_RESTART, Fault, Schedule
from tests.helpers import assert_each_fault_fired_once


@pytest.mark.e2e
def test_supernode_superlink_and_serverapp_killed_in_one_run(tmp_path):
    """No server fault can be missed. Each fires 0.5 s after the progress line of a round at least two before
    the last (the SuperLink kill after round 1, the ServerApp kill after round 2 of the resumed run, of 4): the
    run could end before it lands only if two whole rounds (each of 3 s at least here) passed within the 0.5 s
    and the log stream's latency (under 1 s), so the kill finds the run going on and its ServerApp alive. No
    round ends at once for want of nodes either: q_u = 1 samples every node every round (with q_u = 0.25 a
    round samples no one with p = 0.75^4 = 0.32, and a kill armed for it could come after the run had ended).
    A missing flower-superlink fails the test: flwr is a dependency."""
    for tool in ("flower-superlink", "flower-supernode", "flwr"):  # FileNotFoundError: an installation error
        executable(tool)
    t0 = time.monotonic()

    def log(line: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f} s] {line}", flush=True)

    # every node sampled every round (q_u = 1): while node 3 is down each round waits the whole time-out for it,
    # so the run outlasts node 3's restart; z fixed (no calibration: the time goes to the faults)
    settings = Settings(nodes=4, rounds=4, q_u=1.0, target_epsilon=None, noise_multiplier=1.0, round_timeout=20.0,
                        wait_timeout=10.0)
    owners, evaluation = write_owners(tmp_path, settings.nodes)
    _, reference = reference_in_process(tmp_path, settings, owners, evaluation, log=log)
    assert [r.round for r in reference] == [1, 2, 3, 4]
    # node 3 is SIGKILLed as the run is submitted and comes back about a minute later (Flower refuses its key
    # until its heartbeat has expired), while the run goes on; the SuperLink dies during round 2, the ServerApp
    # during round 3 (of the resumed run), each with a round still to come
    schedule = Schedule(seed=-1, nodes=4, rounds=4, faults=(
        Fault(SUPERNODE_KILL, 0, 0.0, 3), Fault(SUPERLINK_KILL, 1, 0.5), Fault(SERVERAPP_KILL, 2, 0.5),
        Fault(SUPERNODE_RESTART, 0, 55.0, 3)))
    row, records = run_one(tmp_path, settings, owners, evaluation, schedule=schedule, reference=reference,
                           name="faults", log=log)
    detail = row["_detail"]
    # an atomic write (uedp/files.py) SIGKILLed between creating its temporary and the rename leaves
    # `.NAME.RANDOM.tmp` (a kill may land in a round's checkpoint write); the resumed run removes it
    # (uedp/flower/resume.py), so none is left
    assert not detail["problems"], detail["problems"]
    assert_each_fault_fired_once(row, detail["attempts"], why=(detail["events"], detail["cancelled"]))
    assert row["flwr_runs"] == 3
    # the last run's end was checked with the SuperLink (flwr ls over TLS), not only flwr run's exit status
    assert detail["attempts"][-1]["run_status"]["status"] == "finished:completed", detail["attempts"]
    assert records == reference and row["records_lost"] == 0 and row["rounds_completed"] == 4
    assert row["ledger_intact"] and row["leftover_processes"] == 0
    restart = next(e for e in detail["events"] if e["kind"] == SUPERNODE_RESTART)
    assert restart["starts"] >= 1  # activated again under the same registered key
    assert row["pss_node_max_mib"] > 0 and row["pss_total_peak_gib"] > 0
    print(f"faults e2e: {time.monotonic() - t0:.0f} s (run {row['wall_s']:.0f} s)")
    assert row["status"] == "ok" and row["temporaries_left"] == 0
