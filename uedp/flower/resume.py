"""Resuming a run, fail-closed: a resumed run never spends budget twice and never forgets a charged round.

Every round is recorded in ledger.json (saved atomically, hash-chained: uedp.privacy.ledger) before the model
changes; a checkpoint (every `federation.checkpoint_every` rounds) carries the model, a copy of the ledger,
z and the ledger's head (round, hash); the operator log (operator.jsonl, uedp.flower.store) and the project's
metrics.jsonl get one row per round after the ledger is saved, with the head's hash (`ledger_hash`). On
`federation.resume`, `resume_state(out, ...)`:

- nothing in the folder: a fresh start (round 1, empty ledger);
- ledger.json missing while a checkpoint or metrics rows exist: lost state, REFUSED (the checkpoint's copy
  is never used instead: with checkpoints every 10 rounds, up to 9 charged rounds would vanish);
- ledger.json itself broken (rounds not contiguous from 1, a hash or previous hash that does not match, a
  head other than its last record's): REFUSED by `Ledger.load`, naming the round;
- a row of either file whose round the ledger lacks, or whose `ledger_hash` is not the ledger's hash after that
  round (a round deleted or edited and the file re-chained, an older ledger.json restored over a newer
  run), or without one: REFUSED, naming the row and round;
- the checkpoint's head is missing or is not the ledger's head at the checkpoint's round, or its ledger copy
  is not the ledger's first rounds record for record (it must itself load: chained, contiguous), or its z
  is not the z the ledger recorded for that round: REFUSED (the files do not belong together);
- otherwise the run continues after the ledger's last round, from the checkpoint's model (rounds charged
  after the checkpoint stay charged) and with the ledger's z (never recalibrated: the mechanism of a run
  does not change when it is resumed). The run's z has one holder, its strategy; `Resumed.check_z` refuses
  a run whose z is not the one the checkpoint and the ledger recorded.

A refusal raises `ResumeError` (a ConfigError: the command-line entry points exit with status 2) and leaves the
folder as it was. A resume that is accepted (a fresh start included) then removes the temporaries that atomic
writes (uedp/files.py) killed before their rename left in the folder (`remove_temporaries`: only names of
`uedp.files.TEMPORARY_NAME`, only in the folder itself), logs a warning naming them and lists them in
`Resumed.temporaries_removed`: nothing else removes them, and the resumed run rewrites each file they were for.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

from uedp.errors import ConfigError
from uedp.files import is_temporary
from uedp.flower.checkpoint import CHECKPOINT, RunCheckpoint, load_checkpoint
from uedp.privacy.ledger import Head, Ledger

log = logging.getLogger(__name__)

LEDGER = "ledger.json"
METRICS = "metrics.jsonl"  # the project's own per-round rows (server/metrics.py), when the folder has them
OPERATOR_LOG = "operator.jsonl"  # the wrapper's operator log (uedp.flower.store)
ROW_FILES = (OPERATOR_LOG, METRICS)  # per-round rows, each with the ledger's hash after its round
ROW_HASH = "ledger_hash"  # in each metrics row: the ledger's head hash after the row's round
CHECKPOINT_HEAD = "ledger_head"  # in each checkpoint's extra: the ledger's head {"round", "hash"}


class ResumeError(ConfigError):
    """The saved state of a run cannot be resumed without risking budget spent twice or forgotten."""


@dataclass(frozen=True)
class Resumed:
    ledger: Ledger
    checkpoint: RunCheckpoint | None
    # leftover temporaries of atomic writes that resume_state removed from the folder (for the run's stream)
    temporaries_removed: tuple[Path, ...] = ()

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


def _metric_rows(path: Path) -> list[tuple[int, int, str | None]]:
    """(line number, round, ledger_hash or None) of each row of metrics.jsonl."""
    if not path.is_file():
        return []
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
                if isinstance(row, dict) and "round" not in row and ("note" in row or "event" in row):
                    continue  # the operator log's label, or an event of the run (its start)
                rnd, head = row["round"], row.get(ROW_HASH)
                if isinstance(rnd, bool) or not isinstance(rnd, int) or not isinstance(head, str | None):
                    raise TypeError(f"round {rnd!r}, {ROW_HASH} {head!r}")
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ResumeError(f"{path}, line {i}: not a metrics row ({exc}); cannot tell which rounds "
                                  "ran") from None
            rows.append((i, rnd, head))
    return rows


def _refuse(out: Path, why: str) -> ResumeError:
    return ResumeError(f"cannot resume in {out}: {why}")


def _check_metrics(out: Path, ledger: Ledger, rows: list[tuple[int, int, str | None]], name: str) -> None:
    """Every row of file `name` (the operator log, metrics.jsonl) is of a round the ledger holds, with the
    ledger's head hash after that round."""
    last = ledger.last_round or 0
    beyond = max((rnd, line) for line, rnd, _ in rows) if rows else (0, 0)
    if beyond[0] > last:
        raise _refuse(out, f"{name} shows round {beyond[0]} but {LEDGER} ends at round {last} (line {beyond[1]}): "
                           "its last rounds were deleted, or an older copy was restored")
    for line, rnd, head in rows:
        where = f"{name} line {line} (round {rnd})"
        if rnd < 1:
            raise _refuse(out, f"{where}: rounds start at 1")
        if head is None:
            raise _refuse(out, f"{where} carries no {ROW_HASH} (written before the ledger's hash chain, or "
                               "edited): start a new run in an empty federation.out_dir")
        if head != ledger.head_at(rnd).hash:
            raise _refuse(out, f"{where}: its {ROW_HASH} is not {LEDGER}'s hash after round {rnd}: round(s) up "
                               f"to {rnd} of {LEDGER} were deleted, edited or re-chained, or it is an older copy")


def _check_checkpoint(out: Path, ledger: Ledger, ckpt: RunCheckpoint) -> None:
    last = ledger.last_round or 0
    try:
        copy = Ledger.from_dict(ckpt.ledger)
        head = Head.from_dict(ckpt.extra.get(CHECKPOINT_HEAD), where=f"{CHECKPOINT} extra")
    except ConfigError as exc:
        raise _refuse(out, f"the checkpoint (round {ckpt.round}): {exc}") from None
    missing = [r.round for r in copy.records if r.round > last or ledger.records[r.round - 1] != r]
    if ckpt.round > last or missing:
        raise _refuse(out, f"the checkpoint (round {ckpt.round}) records round(s) {missing or [ckpt.round]} that "
                           f"{LEDGER} (rounds 1..{last}) lacks or records differently")
    if head.round != ckpt.round or copy.head != head or head != ledger.head_at(head.round):
        raise _refuse(out, f"the checkpoint's ledger head (round {head.round}) is not {LEDGER}'s head after round "
                           f"{ckpt.round}: the files do not belong together")
    ckpt_z, recorded = ckpt.extra.get("z"), ledger.records[ckpt.round - 1] if ckpt.round else None
    if ckpt_z is not None and recorded is not None and not math.isclose(float(ckpt_z), recorded.z, rel_tol=1e-12):
        raise _refuse(out, f"the checkpoint's z = {ckpt_z} is not the z = {recorded.z} {LEDGER} recorded for "
                           f"round {ckpt.round}")


def remove_temporaries(out: Path) -> tuple[Path, ...]:
    """Remove the leftover temporaries of atomic writes in `out` and return their paths (sorted).

    uedp/files.py writes each file through a temporary beside it and removes the temporary itself on any
    failure it survives; a writer SIGKILLed before its rename (a ServerApp killed while saving checkpoint.pt)
    leaves one behind, and only whoever takes the folder over can remove it. Only regular files (not links,
    not folders) whose names match `uedp.files.TEMPORARY_NAME` exactly are removed, and only in `out` itself:
    the run writes its files there, and a subfolder may hold another process's files (a cache) that are being
    written now. The caller owns `out` (a resumed run: its previous ServerApp is gone)."""
    if not out.is_dir():
        return ()
    removed = []
    with os.scandir(out) as entries:
        leftovers = sorted(Path(e.path) for e in entries if is_temporary(e.name) and e.is_file(follow_symlinks=False))
    for path in leftovers:
        try:
            path.unlink()
        except FileNotFoundError:  # gone meanwhile
            continue
        removed.append(path)
    return tuple(removed)


def resume_state(out: Path, *, delta: float, num_users: int) -> Resumed:
    """The state a resumed run continues from (see the module docstring), or ResumeError; once it is accepted,
    the leftover temporaries of atomic writes in `out` are removed (`remove_temporaries`), with a warning."""
    resumed = _saved_state(out, delta=delta, num_users=num_users)
    removed = remove_temporaries(out)
    if removed:
        log.warning("resuming in %s: removed %d leftover temporary file(s) of interrupted atomic writes: %s", out,
                    len(removed), ", ".join(p.name for p in removed))
    return replace(resumed, temporaries_removed=removed)


def _saved_state(out: Path, *, delta: float, num_users: int) -> Resumed:
    """The state a resumed run continues from, read and checked (see the module docstring), or ResumeError."""
    ledger_path, ckpt_path = out / LEDGER, out / CHECKPOINT
    rows = {name: _metric_rows(out / name) for name in ROW_FILES}
    if not ledger_path.exists():
        if ckpt_path.exists() or any(rows.values()):
            found = ", ".join(n for n, there in ((CHECKPOINT, ckpt_path.exists()), *((n, bool(r)) for n, r in
                                                                                    rows.items())) if there)
            raise _refuse(out, f"{LEDGER} is missing but {found} exist(s); the rounds it charged are unknown, so "
                               "resuming could spend the budget twice. Start a new run in an empty "
                               "federation.out_dir")
        return Resumed(Ledger(delta=delta, num_users=num_users), None)
    try:
        ledger = Ledger.resume(ledger_path, delta=delta, num_users=num_users)
    except ResumeError:
        raise
    except ConfigError as exc:
        raise ResumeError(f"cannot resume: {exc}") from None
    for name, file_rows in rows.items():
        _check_metrics(out, ledger, file_rows, name)
    ckpt = load_checkpoint(out)
    if ckpt is not None:
        _check_checkpoint(out, ledger, ckpt)
    return Resumed(ledger, ckpt)
