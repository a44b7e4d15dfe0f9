"""Where a UeDP run keeps its files, and how it resumes: the run store the wrapper is given.

    store = RunStore("outputs/run", checkpoint_every=10, resume=False)
    UserEntityDP(FedAvg(), places=..., accountant=..., store=store)

In `out_dir`:
- ledger.json    the accountant's ledger, saved (atomically, hash-chained: uedp.privacy.ledger) after every round
                 is charged and BEFORE that round's global arrays exist (docs/mechanism.md step 9);
- checkpoint.pt  the global arrays, the server optimizer's state, a copy of the ledger, z and the ledger's head,
                 every `checkpoint_every` rounds and at the last planned round (uedp.flower.checkpoint);
- operator.jsonl the OPERATOR LOG, outside the privacy guarantee: one row per round with its counts (sampled,
                 replies, missing, failed, refused, re-check statuses), its seconds and whether it started late,
                 and the ledger's head hash after it; its first line says so. The counts reveal who took part
                 in a round: they go to this file on the server, never to the ServerApp's output (which
                 `flwr log` hands to whoever ran `flwr run`) nor into the MetricRecords the wrapper returns.

`resume=True` continues the ledger and the last checkpoint, fail-closed (uedp.flower.resume: a refusal names
the file and round and leaves the folder as it was). A private mechanism needs a store: its ledger is written
before each release.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from uedp.checks import non_negative_int
from uedp.files import PRIVATE
from uedp.flower.checkpoint import RunCheckpoint, save_checkpoint
from uedp.flower.resume import CHECKPOINT_HEAD, LEDGER, OPERATOR_LOG, Resumed, resume_state

# The operator log's first line: what it is, in the file itself.
OPERATOR_NOTE = ("operator log, OUTSIDE the privacy guarantee: per-round counts (sampled, replies, missing, "
                 "failed, refused, re-check statuses) and times reveal who took part in a round; keep this file "
                 "on the server, release the model, ledger.json and the epsilons instead")


@dataclass
class RunStore:
    """A run's folder (module docstring). `checkpoint_every`: a checkpoint every this many rounds (and at the
    last planned round); 0: at the last planned round only. `resume`: continue what the folder holds."""

    out_dir: str | Path
    checkpoint_every: int = 0
    resume: bool = False
    _resumed: dict[tuple[float, int], Resumed] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        self.checkpoint_every = non_negative_int("checkpoint_every", self.checkpoint_every)
        if not isinstance(self.resume, bool):
            raise TypeError(f"resume must be True or False, got {self.resume!r}")

    @property
    def out(self) -> Path:
        return Path(self.out_dir)

    def resumed(self, *, delta: float, num_users: int) -> Resumed | None:
        """What the folder holds to continue (read and checked once: uedp.flower.resume), or None without
        `resume`."""
        if not self.resume:
            return None
        key = (float(delta), int(num_users))
        if key not in self._resumed:
            self._resumed[key] = resume_state(self.out, delta=delta, num_users=num_users)
        return self._resumed[key]

    def recorded_z(self, *, delta: float, num_users: int) -> float | None:
        """The z a resumed run recorded (None: no resume, or nothing recorded yet)."""
        resumed = self.resumed(delta=delta, num_users=num_users)
        return None if resumed is None else resumed.z

    def save_ledger(self, accountant: Any) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        return accountant.save(self.out / LEDGER)

    def wants_checkpoint(self, server_round: int, last_planned: int) -> bool:
        return server_round == last_planned or bool(self.checkpoint_every and server_round % self.checkpoint_every == 0)

    def save_checkpoint(self, server_round: int, arrays: dict[str, np.ndarray], optimizer_state: dict[str, Any],
                        accountant: Any) -> Path:
        """checkpoint.pt: after the ledger (uedp.flower.resume checks that they belong together)."""
        return save_checkpoint(self.out, RunCheckpoint(server_round, arrays, optimizer_state,
                                                       accountant.state_dict(),
                                                       {"z": accountant.noise_multiplier,
                                                        CHECKPOINT_HEAD: accountant.head.to_dict()}))

    def operator_log(self, row: dict[str, Any]) -> None:
        """Append one row to operator.jsonl (its first line is OPERATOR_NOTE); finite numbers, strings, bools."""
        path = self.out / OPERATOR_LOG
        clean = {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in row.items()}
        new = not path.exists()
        self.out.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            if new:
                f.write(json.dumps({"note": OPERATOR_NOTE}) + "\n")
            f.write(json.dumps(clean, sort_keys=True) + "\n")
        if new:
            path.chmod(PRIVATE)


def read_operator_log(out: str | Path) -> list[dict[str, Any]]:
    """The rows of `out`/operator.jsonl (its note line skipped); [] if there is none."""
    path = Path(out) / OPERATOR_LOG
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if "round" in r]
