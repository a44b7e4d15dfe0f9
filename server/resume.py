"""Resuming a run, fail-closed: a resumed run never spends budget twice and never forgets a charged round.

Every round is recorded in ledger.json (saved atomically) before the model changes; a checkpoint (every
`federation.checkpoint_every` rounds) carries the model, a copy of the ledger and z; metrics.jsonl gets one
row per round after the ledger is saved. On `federation.resume`, `resume_state(out, ...)`:

- nothing in the folder: a fresh start (round 1, empty ledger);
- ledger.json missing while a checkpoint or metrics rows exist: lost state, REFUSED (the checkpoint's copy
  is never used instead: with checkpoints every 10 rounds, up to 9 charged rounds would vanish);
- the checkpoint's ledger copy holds a round the ledger lacks or records it differently, or the checkpoint
  is of a round beyond the ledger's last, or its z is not the z the ledger recorded for that round:
  REFUSED (the files do not belong together);
- metrics.jsonl shows a round the ledger lacks: REFUSED;
- otherwise the run continues after the ledger's last round, from the checkpoint's model (rounds charged
  after the checkpoint stay charged) and with the ledger's z (never recalibrated: the mechanism of a run
  does not change when it is resumed). The run's z has one holder, its strategy; `Resumed.check_z` refuses
  a run whose z is not the one the checkpoint and the ledger recorded.

A refusal raises `ResumeError` (a ConfigError: the command-line entry points exit with status 2).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from server.checkpoint import CHECKPOINT, Checkpoint, load_checkpoint
from uedp.errors import ConfigError
from uedp.privacy.ledger import Ledger

LEDGER = "ledger.json"
METRICS = "metrics.jsonl"


class ResumeError(ConfigError):
    """The saved state of a run cannot be resumed without risking budget spent twice or forgotten."""


@dataclass(frozen=True)
class Resumed:
    ledger: Ledger
    checkpoint: Checkpoint | None

    @property
    def z(self) -> float | None:
        """The noise multiplier of the ledger's last round (None: nothing recorded yet), read from the ledger."""
        return self.ledger.records[-1].z if len(self.ledger) else None

    @property
    def next_round(self) -> int:
        return (self.ledger.last_round or 0) + 1

    def check_z(self, z: float) -> None:
        """ResumeError unless the checkpoint's z and the ledger's last z are `z`, the z of the run that
        continues (its strategy's): a resumed run keeps its mechanism."""
        ckpt_z = None if self.checkpoint is None else self.checkpoint.extra.get("z")
        for what, saved in (("the checkpoint's", ckpt_z), (f"{LEDGER}'s last", self.z)):
            if saved is not None and not math.isclose(float(saved), z, rel_tol=1e-12):
                raise ResumeError(f"cannot resume: {what} z = {saved} is not this run's z = {z} (a resumed run "
                                  "continues with the z it recorded)")


def _metric_rounds(path: Path) -> list[int]:
    if not path.is_file():
        return []
    rounds = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rounds.append(int(json.loads(line)["round"]))
            except (ValueError, KeyError, TypeError) as exc:
                raise ResumeError(f"{path}, line {i}: not a metrics row ({exc}); cannot tell which rounds "
                                  "ran") from None
    return rounds


def resume_state(out: Path, *, delta: float, num_users: int) -> Resumed:
    """The state a resumed run continues from (see the module docstring), or ResumeError."""
    ledger_path, ckpt_path = out / LEDGER, out / CHECKPOINT
    metric_rounds = _metric_rounds(out / METRICS)
    if not ledger_path.exists():
        if ckpt_path.exists() or metric_rounds:
            found = ", ".join(n for n, there in ((CHECKPOINT, ckpt_path.exists()), (METRICS, bool(metric_rounds)))
                              if there)
            raise ResumeError(f"cannot resume in {out}: {LEDGER} is missing but {found} exist(s); the rounds "
                              "it charged are unknown, so resuming could spend the budget twice. Start a new "
                              "run in an empty federation.out_dir")
        return Resumed(Ledger(delta=delta, num_users=num_users), None)
    ledger = Ledger.resume(ledger_path, delta=delta, num_users=num_users)
    by_round = {r.round: r for r in ledger.records}
    last = ledger.last_round or 0
    if metric_rounds and max(metric_rounds) > last:
        raise ResumeError(f"cannot resume in {out}: {METRICS} shows round {max(metric_rounds)} but {LEDGER} "
                          f"ends at round {last}")
    ckpt = load_checkpoint(out)
    if ckpt is not None:
        copy = Ledger.from_dict(ckpt.ledger).records
        missing = [r.round for r in copy if by_round.get(r.round) != r]
        if ckpt.round > last or missing:
            raise ResumeError(f"cannot resume in {out}: the checkpoint (round {ckpt.round}) records round(s) "
                              f"{missing or [ckpt.round]} that {LEDGER} (rounds 1..{last}) lacks or records "
                              "differently")
        ckpt_z, recorded = ckpt.extra.get("z"), by_round.get(ckpt.round)
        if ckpt_z is not None and recorded is not None and not math.isclose(float(ckpt_z), recorded.z, rel_tol=1e-12):
            raise ResumeError(f"cannot resume in {out}: the checkpoint's z = {ckpt_z} is not the z = {recorded.z} "
                              f"{LEDGER} recorded for round {ckpt.round}")
    return Resumed(ledger, ckpt)
