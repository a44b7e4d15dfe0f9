"""What a finished run of the fault study (studies/faults.py, "The checks") left: its ledger against the
fault-free run's (`check_outputs`: `OutputCheck`), its other outputs and temporaries, and how its last
`flwr run` ended (`last_run_problem`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.flwr_run import COMPLETED
from uedp.errors import ConfigError
from uedp.flower.checkpoint import CHECKPOINT, load_checkpoint
from uedp.flower.resume import LEDGER, METRICS
from uedp.privacy.ledger import Ledger, RoundRecord
from uedp.summary import SUMMARY

METRICS_CSV = "metrics.csv"
MODEL = "model.pt"


@dataclass
class OutputCheck:
    rounds: int = 0  # rounds in the ledger
    records_lost: int = 0  # reference rounds missing from the ledger or recorded differently
    ledger: list[str] = field(default_factory=list)  # what is wrong with the ledger (against the reference)
    outputs: list[str] = field(default_factory=list)  # ... with the other outputs (half-written, left behind)
    temporaries: list[str] = field(default_factory=list)  # temporaries of atomic writes left (also in outputs)

    @property
    def ledger_intact(self) -> bool:
        return not self.ledger

    @property
    def outputs_intact(self) -> bool:
        return not self.outputs

    @property
    def problems(self) -> list[str]:
        return self.ledger + self.outputs

    @property
    def ok(self) -> bool:
        return not self.problems


def check_outputs(out: Path, reference: Sequence[RoundRecord] | None, *, rounds: int) -> OutputCheck:
    """What a finished run left in `out` (studies/faults.py, "The checks"), against the fault-free `reference`'s
    records (None: the reference run itself, checked on its own)."""
    check = OutputCheck()
    records: list[RoundRecord] = []
    try:
        records = list(Ledger.load(out / LEDGER).records)
    except ConfigError as exc:
        check.ledger.append(f"{LEDGER}: {exc}")
    check.rounds = len(records)
    if len(records) != rounds:
        check.ledger.append(f"{LEDGER} has {len(records)} rounds, not {rounds}")
    if reference is not None:
        if len(reference) != rounds:
            check.ledger.append(f"the reference has {len(reference)} rounds, not {rounds}")
        check.records_lost = sum(i >= len(records) or records[i] != ref for i, ref in enumerate(reference))
        if check.records_lost:
            check.ledger.append(f"{check.records_lost} of the reference's {len(reference)} records are missing or "
                                "different")
        if len(records) > len(reference):
            check.ledger.append(f"{LEDGER} has {len(records) - len(reference)} round(s) the reference lacks")
    problems = check.outputs
    try:
        summary = json.loads((out / SUMMARY).read_text())
        if summary.get("rounds") != rounds:
            problems.append(f"{SUMMARY}: rounds = {summary.get('rounds')!r}, not {rounds}")
    except (OSError, ValueError) as exc:
        problems.append(f"{SUMMARY}: {exc}")
    try:
        ckpt = load_checkpoint(out)
        if ckpt is None:
            problems.append(f"{CHECKPOINT} missing")
        elif not 1 <= ckpt.round <= len(records):  # older than the last round after a crash past its ledger save
            problems.append(f"{CHECKPOINT} is of round {ckpt.round}, outside {LEDGER}'s rounds 1..{len(records)}")
    except Exception as exc:  # torch.load of a truncated file raises several kinds
        problems.append(f"{CHECKPOINT}: {type(exc).__name__}: {exc}")
    try:
        import torch

        torch.load(out / MODEL, map_location="cpu", weights_only=False)
    except Exception as exc:
        problems.append(f"{MODEL}: {type(exc).__name__}: {exc}")
    problems += _check_metrics(out, [r.round for r in records])
    check.temporaries = [str(p.relative_to(out)) for p in sorted(out.rglob(".*.tmp"))]
    problems += [f"temporary file left: {t}" for t in check.temporaries]
    return check


def _check_metrics(out: Path, charged: list[int]) -> list[str]:
    """metrics.jsonl: every line a JSON row of a charged round, in increasing order (a round whose ServerApp
    died after its ledger save and before its row has none); metrics.csv: the same rounds."""
    problems: list[str] = []
    seen: list[int] = []
    try:
        lines = (out / METRICS).read_text().splitlines()
    except OSError as exc:
        return [f"{METRICS}: {exc}"]
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rnd = json.loads(line)["round"]
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"{METRICS} line {i}: not a row ({type(exc).__name__})")
            continue
        if rnd not in charged:
            problems.append(f"{METRICS} line {i}: round {rnd} is not in {LEDGER}")
        if seen and rnd <= seen[-1]:
            problems.append(f"{METRICS} line {i}: round {rnd} after round {seen[-1]}")
        seen.append(rnd)
    if not seen:
        problems.append(f"{METRICS}: no row")
    try:
        with (out / METRICS_CSV).open(newline="") as f:
            csv_rounds = [int(float(r["round"])) for r in csv.DictReader(f)]
        if csv_rounds != seen:
            problems.append(f"{METRICS_CSV}: rounds {csv_rounds} are not {METRICS}'s {seen}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        problems.append(f"{METRICS_CSV}: {type(exc).__name__}: {exc}")
    return problems


def last_run_problem(attempts: Sequence[dict[str, Any]]) -> str | None:
    """Why the run's last `flwr run` did not end well (None: it did): `flwr run --stream` exits 0 when the
    ServerApp died or failed (its run ends "finished:failed"), so its exit status alone says nothing;
    Federation.run then returns RUN_NOT_COMPLETED and the last attempt's "run_status" is what the SuperLink
    said of the run (runtime/flwr_run.py)."""
    if not attempts:
        return "the last flwr run exited never ran"
    last = attempts[-1]
    status = last.get("run_status")
    if status is not None and status.get("status") != COMPLETED:
        details = f" ({status['details']})" if status.get("details") else ""
        return (f"the last flwr run exited 0 but the SuperLink's status of its run {status.get('run_id')} is "
                f"{status.get('status')}{details}, not {COMPLETED}")
    if last["rc"] != 0:
        return f"the last flwr run exited {last['rc']}"
    return None
