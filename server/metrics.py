"""Per-round metrics as CSV and JSONL, and a one-line progress display (round, epsilon, metric).

Only aggregate quantities are written: round, its seconds, epsilons, central evaluation metrics, the ledger's
hash. Never per-client statistics, entity strings or round keys (docs/mechanism.md section 1). The round's counts
(sampled, replies, missing, ...) are in the wrapper's operator log (operator.jsonl, uedp.flower.store), not here
and not in the progress line, which goes to the ServerApp's output. These files and the operator log are outside
the guarantee (`OPERATOR_LOGS`, which private runs' summary.json repeats): a round's seconds depend on the
sampled users' data; the model, ledger and epsilons are what a run releases.
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO

# Written into summary.json of private runs: the per-round counts are for the operator, not released.
OPERATOR_LOGS = ("operator.jsonl, metrics.csv and metrics.jsonl are operator logs outside the privacy guarantee: the "
                 "operator log's per-round counts (sampled, replies, missing, failed, refused, re-check statuses) "
                 "reveal who took part in a round, and every round's seconds depend on the sampled users' data; "
                 "release the model, the ledger and the epsilons, not these files")


class MetricsWriter:
    """Appends one row per round to metrics.csv and metrics.jsonl in `out_dir` (resume-safe: appends)."""

    def __init__(self, out_dir: Path, *, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.out_dir = out_dir
        self.jsonl = out_dir / "metrics.jsonl"
        self.csv = out_dir / "metrics.csv"
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self._t0 = time.monotonic()

    def rows(self) -> list[dict[str, Any]]:
        if not self.jsonl.is_file():
            return []
        return [json.loads(line) for line in self.jsonl.read_text().splitlines() if line.strip()]

    def write(self, row: dict[str, Any]) -> None:
        with self.jsonl.open("a") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
        rows = self.rows()
        columns = sorted({k for r in rows for k in r}, key=lambda k: (k != "round", k))
        with self.csv.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)

    def progress(self, *, round: int, rounds: int, eps: tuple[str, float] | None, metric: tuple[str, float] | None,
                 extra: str = "") -> None:
        """One line per round: the round, the epsilon shown by its name (a private run's largest claimed one, e.g.
        eps_undetected=7.988; `eps=n/a` without a claim), the metric, `extra`, the time so far."""
        if self.quiet:
            return
        eps_s = "eps=n/a" if eps is None else f"{eps[0]}={eps[1]:.3f}"
        met_s = "" if metric is None else f" {metric[0]}={_fmt(metric[1])}"
        elapsed = time.monotonic() - self._t0
        print(f"[round {round:4d}/{rounds}] {eps_s}{met_s}{' ' + extra if extra else ''} ({elapsed:6.1f}s)",
              file=self.stream, flush=True)


def _fmt(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.4g}"
