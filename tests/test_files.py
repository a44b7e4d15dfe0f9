"""uedp.files, the one atomic writer: the content lands whole, a failure leaves the old file and no
temporary, concurrent writers (threads and processes) never let a reader see part of a file, temporaries
have unique names, modes are kept; and uedp.checks, the one positive-number check."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import uedp.files as files
from uedp.checks import positive, positive_int
from uedp.errors import ConfigError
from uedp.files import PRIVATE, atomic_create, atomic_path, atomic_write_bytes, atomic_write_json, atomic_write_text


def leftovers(directory: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_content_lands_whole(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "dir" / "f.bin"  # parents are created
    data = os.urandom(3 << 20)
    assert atomic_write_bytes(target, data) == target
    assert target.read_bytes() == data
    atomic_write_text(target, "héllo\n")
    assert target.read_text(encoding="utf-8") == "héllo\n"
    atomic_write_json(target, {"eps": float("inf"), "x": [1, 2]}, indent=1)
    assert target.read_text() == json.dumps({"eps": float("inf"), "x": [1, 2]}, indent=1)
    with atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp != target
        tmp.write_bytes(b"through a path")
        assert target.read_text().startswith("{")  # not there before the block ends
    assert target.read_bytes() == b"through a path"
    assert leftovers(target.parent, {"f.bin"}) == []


def test_a_failure_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")

    with pytest.raises(RuntimeError, match="mid-write"), atomic_path(target) as tmp:
        tmp.write_text("half of the new")
        raise RuntimeError("mid-write")
    with pytest.raises(TypeError):  # not serializable: nothing is written
        atomic_write_json(target, {"x": object()})

    def broken_replace(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(target, b"new")
    with pytest.raises(OSError, match="disk full"), atomic_path(target) as tmp:
        tmp.write_text("new")
    monkeypatch.undo()

    def broken_fsync(fd: int) -> None:
        raise OSError("interrupted")

    monkeypatch.setattr(files.os, "fsync", broken_fsync)  # after the bytes went to the temporary
    with pytest.raises(OSError, match="interrupted"):
        atomic_write_bytes(target, b"0123456789abcdef")
    monkeypatch.undo()
    assert target.read_text() == "old"
    assert leftovers(tmp_path, {"state.json"}) == []


def test_temporaries_are_unique_and_beside_the_target(tmp_path: Path) -> None:
    """Two writers of one file never share a temporary (gazetteers.py once used a fixed '.tmp' name that two
    test workers raced on); the last one to finish wins, and neither leaves anything behind."""
    target = tmp_path / "common.json"
    with atomic_path(target) as a, atomic_path(target) as b:
        assert a != b and a.parent == b.parent == tmp_path
        assert a.name.startswith(".common.json.") and a.suffix == ".tmp"
        a.write_text("A")
        b.write_text("B")
    assert target.read_text() == "A"  # a finished last (the outer block)
    assert leftovers(tmp_path, {"common.json"}) == []


def test_the_directory_is_fsynced_after_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[Path] = []
    monkeypatch.setattr(files, "_fsync_directory", lambda d: synced.append(Path(d)))
    atomic_write_text(tmp_path / "a.txt", "x")
    with atomic_path(tmp_path / "b.txt") as tmp:
        tmp.write_text("y")
    assert atomic_create(tmp_path / "c.txt", lambda tmp: tmp.write_text("z"))
    assert synced == [tmp_path] * 3


def test_modes(tmp_path: Path) -> None:
    plain = atomic_write_text(tmp_path / "plain.txt", "x")
    assert mode_of(plain) == 0o666 & ~current_umask()  # as open(path, "w") creates it
    key = tmp_path / "server.key"
    key.write_text("old")
    key.chmod(0o644)
    atomic_write_bytes(key, b"secret", mode=PRIVATE)
    assert mode_of(key) == 0o600 and key.read_bytes() == b"secret"
    old = os.umask(0)
    try:  # the given mode exactly, whatever the umask
        atomic_write_bytes(key, b"secret", mode=PRIVATE)
        with atomic_path(tmp_path / "cache.pt", mode=PRIVATE) as tmp:
            tmp.write_bytes(b"data")
    finally:
        os.umask(old)
    assert mode_of(key) == 0o600 and mode_of(tmp_path / "cache.pt") == 0o600


def test_atomic_create_keeps_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "tokenizer.json"
    assert atomic_create(target, lambda tmp: tmp.write_text("first")) is True
    assert atomic_create(target, lambda tmp: tmp.write_text("second")) is False
    assert target.read_text() == "first"
    with pytest.raises(ValueError, match="no"):
        atomic_create(tmp_path / "other.json", lambda tmp: (_ for _ in ()).throw(ValueError("no")))
    assert leftovers(tmp_path, {"tokenizer.json"}) == []


SIZE = 1 << 20


def _whole(data: bytes) -> bool:
    return len(data) == SIZE and data.count(data[:1]) == SIZE


def test_concurrent_thread_writers_never_show_a_partial_file(tmp_path: Path) -> None:
    target = tmp_path / "shared.bin"
    atomic_write_bytes(target, b"0" * SIZE)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(byte: bytes) -> None:
        try:
            while not stop.is_set():
                atomic_write_bytes(target, byte * SIZE)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(b,)) for b in (b"a", b"b")]
    for t in threads:
        t.start()
    seen = set()
    deadline = time.monotonic() + 1.5
    try:
        while time.monotonic() < deadline:
            data = target.read_bytes()
            assert _whole(data), f"a reader saw a partial file ({len(data)} bytes)"
            seen.add(data[:1])
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert seen & {b"a", b"b"}
    assert leftovers(tmp_path, {"shared.bin"}) == []


WRITER = """
import sys, time
from uedp.files import atomic_write_bytes
target, byte, size, seconds = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3]), float(sys.argv[4])
end = time.monotonic() + seconds
n = 0
while time.monotonic() < end:
    atomic_write_bytes(target, byte * size)
    n += 1
print(n)
"""


def test_concurrent_process_writers_never_show_a_partial_file(tmp_path: Path) -> None:
    target = tmp_path / "shared.bin"
    atomic_write_bytes(target, b"0" * SIZE)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(target), b, str(SIZE), "1.5"], env=env,
                              stdout=subprocess.PIPE, text=True) for b in ("a", "b")]
    seen = set()
    while any(p.poll() is None for p in procs):
        data = target.read_bytes()
        assert _whole(data), f"a reader saw a partial file ({len(data)} bytes)"
        seen.add(data[:1])
    counts = [int(p.communicate()[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs) and min(counts) > 0
    assert _whole(target.read_bytes()) and target.read_bytes()[:1] in (b"a", b"b")
    assert leftovers(tmp_path, {"shared.bin"}) == []


# -- uedp.checks -------------------------------------------------------------------------------------------

def test_positive() -> None:
    assert positive("beta", 1) == 1.0 and isinstance(positive("beta", 1), float)
    assert positive("beta", np.float32(0.5)) == 0.5
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match=r"beta must be a positive finite number, got"):
            positive("beta", bad)
    assert issubclass(ConfigError, ValueError)  # callers that promised a ValueError still raise one


def test_positive_int() -> None:
    assert positive_int("m_max", 3) == 3 and type(positive_int("m_max", np.int64(3))) is int
    for bad in (0, -2, True, 1.0, "1", None):
        with pytest.raises(ConfigError, match="m_max must be a positive integer"):
            positive_int("m_max", bad)


def test_one_positive_check_everywhere() -> None:
    """The ledger, the sensitivities and the rewriting mechanism use the same check (no private copies)."""
    import uedp.checks as checks
    from uedp.privacy import ledger, sensitivity
    from uedp.rewriting import mechanism

    for module in (ledger, sensitivity, mechanism):
        assert module.positive is checks.positive
        assert not hasattr(module, "_positive")
    assert sensitivity.positive_int is mechanism.positive_int is checks.positive_int
    with pytest.raises(ConfigError, match="w_max"):
        sensitivity.sensitivities(rule="uedp", beta=1.0, w_max=0.0, m_max=4, k_cap=1)
