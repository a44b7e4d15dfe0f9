"""A resumed run removes the temporaries that atomic writes (uedp/files.py) SIGKILLed before their rename left in
its folder (uedp/flower/resume.py `resume_state`), and nothing else: the faults study (studies/faults.py) found
`.checkpoint.pt.<hex>.tmp` left after a ServerApp was killed while saving its checkpoint, and never removed."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.local_grid import run_local
from tests.helpers import tiny_config
from uedp.files import TEMPORARY_NAME, is_temporary, temporary_name
from uedp.flower.checkpoint import CHECKPOINT
from uedp.flower.resume import LEDGER, METRICS, ResumeError, remove_temporaries, resume_state
from uedp.privacy.ledger import Ledger

ROOT = Path(__file__).resolve().parents[1]
RUN_FILES = (LEDGER, CHECKPOINT, METRICS, "metrics.csv", "config.json", "summary.json", "model.pt")
# names a temporary of uedp/files.py never has: each must survive
LOOKALIKES = (
    ".checkpoint.pt.tmp",  # no random part
    ".checkpoint.pt.0123456789ABCDEF.tmp",  # upper-case hex: token_hex writes lower case
    ".checkpoint.pt.0123456789abcde.tmp",  # 15 hex digits
    ".checkpoint.pt.0123456789abcdef0.tmp",  # 17
    "checkpoint.pt.0123456789abcdef.tmp",  # not hidden
    ".checkpoint.pt.0123456789abcdef.tmp.bak",  # something else ends the name
    ".checkpoint.pt.0123456789abcdef.temp",
    "..0123456789abcdef.tmp",  # no target name
    "notes.tmp",
)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A private run of 2 rounds with a checkpoint every round (run_local: the server loop without Flower)."""
    out = tmp_path_factory.mktemp("run")
    run_local(tiny_config(out, federation={"rounds": 2, "eval_every": 2, "checkpoint_every": 1}))
    return out


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for name in RUN_FILES:
        if (src / name).exists():
            (dst / name).write_bytes((src / name).read_bytes())
    return dst


def _killed_write(target: Path) -> Path:
    """The temporary an atomic write of `target` leaves when its process is SIGKILLed before the rename."""
    script = ("import os, signal, sys\nfrom uedp.files import atomic_path\n"
              "with atomic_path(sys.argv[1]) as tmp:\n    tmp.write_bytes(b'half a checkpoint')\n"
              "    os.kill(os.getpid(), signal.SIGKILL)\n")
    before = set(target.parent.iterdir())
    proc = subprocess.run([sys.executable, "-c", script, str(target)], cwd=ROOT, capture_output=True)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    left = set(target.parent.iterdir()) - before
    assert len(left) == 1, left
    return left.pop()


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.is_symlink()}


def test_the_writers_names_are_the_cleaners_pattern():
    """One pattern: every name the writer makes is matched, whatever the target's name."""
    for target in ("checkpoint.pt", "ledger.json", "a.b.c", ".hidden", "x y"):
        name = temporary_name(target)
        assert is_temporary(name) and TEMPORARY_NAME.fullmatch(name)["target"] == target, name
    assert not any(is_temporary(n) for n in LOOKALIKES)


def test_resume_removes_exactly_the_leftover_temporaries(finished, tmp_path, caplog):
    out = _copy(finished, tmp_path / "run")
    state = _files(out)
    ledger = Ledger.load(out / LEDGER)
    killed = _killed_write(out / CHECKPOINT)  # the study's case: a ServerApp killed while saving its checkpoint
    assert killed.name.startswith(f".{CHECKPOINT}.") and killed.read_bytes() == b"half a checkpoint"
    made = [out / temporary_name(n) for n in (LEDGER, METRICS, "summary.json")]
    for p in made:
        p.write_text("{")
    for name in LOOKALIKES:
        (out / name).write_text("keep")
    (out / temporary_name("folder")).mkdir()  # a folder, not a temporary file
    (out / temporary_name("link")).symlink_to(out / LEDGER)  # a link: not removed, nor what it points to
    (out / "cache").mkdir()  # a subfolder may hold another process's temporary being written now
    nested = out / "cache" / temporary_name("tokenizer.json")
    nested.write_text("being written")

    with caplog.at_level(logging.WARNING, logger="uedp.flower.resume"):
        resumed = resume_state(out, delta=ledger.delta, num_users=ledger.num_users)

    expected = sorted([killed, *made])
    assert list(resumed.temporaries_removed) == expected
    assert not any(p.exists() for p in expected)
    assert {n: b for n, b in _files(out).items() if n in state} == state  # the run's files untouched
    assert set(_files(out)) == set(state) | set(LOOKALIKES)
    assert all((out / n).read_text() == "keep" for n in LOOKALIKES)
    assert nested.read_text() == "being written"
    assert sum(1 for p in out.iterdir() if is_temporary(p.name)) == 2  # the folder and the link
    assert resumed.next_round == 3 and resumed.checkpoint is not None and resumed.checkpoint.round == 2
    warning = "\n".join(r.getMessage() for r in caplog.records)
    assert "removed 4 leftover temporary file(s)" in warning and killed.name in warning and str(out) in warning

    again = resume_state(out, delta=ledger.delta, num_users=ledger.num_users)  # nothing left to remove
    assert again.temporaries_removed == () and again.next_round == 3


def test_a_refused_resume_leaves_the_folder_as_it_was(finished, tmp_path):
    """Fail-closed: a refusal changes nothing in the folder, its leftovers included (for the operator)."""
    out = _copy(finished, tmp_path / "run")
    ledger = Ledger.load(out / LEDGER)
    (out / LEDGER).unlink()
    left = _killed_write(out / LEDGER)
    before = _files(out)
    with pytest.raises(ResumeError, match="ledger.json is missing"):
        resume_state(out, delta=ledger.delta, num_users=ledger.num_users)
    assert _files(out) == before and left.exists()


def test_a_fresh_start_removes_them_too(tmp_path):
    """A run killed while writing its first ledger: nothing to resume from, the leftover goes."""
    out = tmp_path / "run"
    out.mkdir()
    left = _killed_write(out / LEDGER)
    fresh = resume_state(out, delta=1e-3, num_users=8)
    assert fresh.next_round == 1 and fresh.temporaries_removed == (left,) and not left.exists()
    assert list(out.iterdir()) == []
    assert resume_state(tmp_path / "absent", delta=1e-3, num_users=8).temporaries_removed == ()
    assert remove_temporaries(tmp_path / "absent") == ()


def test_a_temporary_that_cannot_be_removed_names_itself(tmp_path, monkeypatch):
    """An error other than "already gone" is not swallowed: it names the file."""
    out = tmp_path / "run"
    out.mkdir()
    left = out / temporary_name(LEDGER)
    left.write_text("{")
    real_unlink = Path.unlink

    def refuse(self: Path, missing_ok: bool = False) -> None:
        if self == left:
            raise PermissionError(13, os.strerror(13), str(self))
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", refuse)
    with pytest.raises(PermissionError, match=left.name):
        remove_temporaries(out)
