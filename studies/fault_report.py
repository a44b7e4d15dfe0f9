"""The table of the fault study (studies/faults.py): one row per run (`public_row`, the `COLUMNS`), the runs
with faults together (`totals`), the Markdown report (`markdown`, its legend `LEGEND`) and OUT.md and OUT.json
(`write_results`: the rows, the settings and every run's faults, attempts and problems).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from studies.fault_runs import Settings
from studies.fault_schedule import FAULT_KINDS, SERVERAPP_KILL, SUPERLINK_KILL, SUPERNODE_KILL, SUPERNODE_RESTART
from uedp.markdown import dict_table

COLUMNS = ("run", "seed", "nodes", "rounds", "q_u", *FAULT_KINDS, "flwr_runs", "rounds_completed", "records_lost",
           "updates_lost", "ledger_intact", "outputs_intact", "temporaries_left", "leftover_processes", "wall_s",
           "pss_node_max_mib", "pss_node_mean_mib", "pss_total_peak_gib", "status")


def public_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row.get(k) for k in COLUMNS}


def _cell(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
    return "" if v is None else str(v)


def totals(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The runs with faults together."""
    faulty = [r for r in rows if r.get("seed") is not None]
    return {"runs": len(faulty), "ok": sum(r["status"] == "ok" for r in faulty),
            **{k: sum(r.get(k, 0) for r in faulty) for k in FAULT_KINDS},
            "rounds_completed": sum(r.get("rounds_completed", 0) for r in faulty),
            "records_lost": sum(r.get("records_lost") or 0 for r in faulty),
            "wall_s": sum(r.get("wall_s", 0.0) for r in rows)}


def markdown(rows: Sequence[dict[str, Any]], settings: Settings) -> str:
    t = totals(rows)
    head = (f"{t['runs']} runs with faults ({t['ok']} ok) of {settings.nodes} SuperNodes (TLS, SuperNode "
            f"authentication, owners' own files), {settings.rounds} rounds each, q_u = {settings.sampling:.3g}: "
            f"{t[SUPERNODE_KILL]} SuperNode kills, {t[SUPERNODE_RESTART]} restarts, {t[SUPERLINK_KILL]} SuperLink "
            f"kills + restarts, {t[SERVERAPP_KILL]} ServerApp kills; {t['rounds_completed']} rounds completed, "
            f"{t['records_lost']} ledger records lost; {t['wall_s'] / 60:.1f} min in all (reference included).")
    return head + "\n\n" + dict_table([public_row(r) for r in rows], COLUMNS, fmt=_cell) + "\n\n" + LEGEND


LEGEND = ("Columns: faults injected by kind (a restart is activated by the SuperLink under the node's registered "
          "key); flwr_runs, submissions of the run (1 + one per server fault, each after the first with "
          "federation.resume = true); rounds_completed, rounds in ledger.json; records_lost, rounds of the "
          "fault-free run's ledger missing or recorded differently; updates_lost, rounds charged after the last "
          "checkpoint when the server died (they stay charged, their model updates are gone: checkpoints every "
          "federation.checkpoint_every rounds); outputs_intact, summary.json, checkpoint.pt, model.pt, "
          "metrics.jsonl and metrics.csv parse and agree with the ledger, and no temporary file of an atomic "
          "write is left (temporaries_left counts those); leftover_processes, processes of the federation still "
          "running after it stopped; wall_s, federation start to stop; pss_*, proportional set size: the largest "
          "and the mean of the SuperNodes' peaks (each node with its SuperExec and ClientApp processes) and the "
          "federation's peak (all processes, SuperLink and ServerApp included). Machine: 2 cores, 24 GiB, shared "
          "with other jobs.")


def write_results(rows: Sequence[dict[str, Any]], settings: Settings, out: Path, *, command: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(f"# Load and faults at once\n\n`{command}`\n\n{markdown(rows, settings)}\n")
    doc = {"command": command, "settings": asdict(settings), "totals": totals(rows),
           "rows": [public_row(r) for r in rows],
           "runs": [r["_detail"] for r in rows if "_detail" in r]}
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
