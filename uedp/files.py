"""Atomic file writes: a reader (another process, a resumed run) sees the old file or the new one, never a
part of one, and an interrupted writer leaves the old file and no temporary behind.

    atomic_write_text(path, text)                     # also atomic_write_bytes, atomic_write_json
    with atomic_path(path) as tmp:                     # for writers that take a path (torch.save, Parquet)
        torch.save(obj, tmp)
    wrote = atomic_create(path, lambda tmp: ...)       # first writer wins: an existing file is kept

Each write goes to a temporary file with a unique name in the target's directory (so two writers of the same
file never share one, and the rename stays on one file system), is flushed and fsynced, then renamed onto
the target (`os.replace`: atomic on POSIX), and the directory is fsynced so the rename survives a crash.
On any failure, the temporary is removed and the target is left as it was. A writer SIGKILLed between
creating its temporary and the rename cannot remove it: the temporary's name, `.NAME.<16 hex digits>.tmp`
(`temporary_name`), is matched by `TEMPORARY_NAME`, so that whoever takes the folder over (uedp/flower/resume.py,
when a run resumes) can remove exactly those leftovers and nothing else.

File modes: by default the new file gets what `open(path, "w")` would give (0666 less the umask); `mode`
sets it exactly (the umask does not apply), e.g. `PRIVATE` (0600) for private keys and for the caches of
private data, which were written with `tempfile.mkstemp`'s 0600 before this module existed.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PRIVATE = 0o600  # owner read/write only
_DEFAULT = 0o666  # less the umask, as open() creates files
_TOKEN_BYTES = 8  # random bytes in a temporary's name (16 hex digits): two writers never share one
# The name of every temporary an atomic write here creates (group "target": the file it will be renamed onto).
# One pattern for the writer (temporary_name) and for the cleaner (uedp/flower/resume.py), so that the cleaner can
# never remove a file other than a leftover temporary of an atomic write.
TEMPORARY_NAME = re.compile(rf"\.(?P<target>.+)\.[0-9a-f]{{{2 * _TOKEN_BYTES}}}\.tmp", re.DOTALL)


def temporary_name(target: str) -> str:
    """A new random name for the temporary of an atomic write of the file named `target` (same directory):
    hidden (a leading dot), and matched by `TEMPORARY_NAME` (fullmatch)."""
    return f".{target}.{secrets.token_hex(_TOKEN_BYTES)}.tmp"


def is_temporary(name: str) -> bool:
    """Whether a file named `name` is (by its name) the temporary of an atomic write made here."""
    return TEMPORARY_NAME.fullmatch(name) is not None


def _temporary(path: Path, mode: int | None) -> tuple[int, Path]:
    """A new, empty file with a unique name beside `path`, open for writing: (descriptor, path)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = path.with_name(temporary_name(path.name))
        try:
            fd = os.open(tmp, flags, _DEFAULT if mode is None else mode)
        except FileExistsError:  # pragma: no cover - 64 random bits
            continue
        break
    if mode is not None:
        try:
            os.fchmod(fd, mode)  # exactly `mode`: the umask applied at creation
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
    return fd, tmp


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (a no-op where directories cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platform dependent
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on a directory
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | os.PathLike[str], *, mode: int | None = None) -> Iterator[Path]:
    """Yield a temporary path beside `path` for a writer that takes a file name; when the block ends without
    an exception, the file written there is fsynced and renamed onto `path`. On an exception the temporary is
    removed and `path` is unchanged."""
    path = Path(path)
    fd, tmp = _temporary(path, mode)
    os.close(fd)
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, path)
        _fsync_directory(path.parent)
    finally:
        tmp.unlink(missing_ok=True)  # gone after the rename; removed after a failure


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int | None = None) -> Path:
    """Write `data` to `path` atomically (parent directories are created); returns `path`."""
    path = Path(path)
    fd, tmp = _temporary(path, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_directory(path.parent)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str, *, mode: int | None = None,
                      encoding: str = "utf-8") -> Path:
    """Write `text` to `path` atomically; returns `path`."""
    return atomic_write_bytes(path, text.encode(encoding), mode=mode)


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, mode: int | None = None,
                      **dumps: Any) -> Path:
    """Write `json.dumps(obj, **dumps)` to `path` atomically (serialized before anything is written, so an
    unserializable object leaves no file); returns `path`."""
    return atomic_write_text(path, json.dumps(obj, **dumps), mode=mode)


def atomic_create(path: str | os.PathLike[str], write: Callable[[Path], object], *,
                  mode: int | None = None) -> bool:
    """Create `path` atomically unless it exists: `write(tmp)` writes the content to a temporary path, which
    is then linked to `path` only if no file is there (first writer wins; concurrent writers of the same
    content all end up reading one file). Returns whether this call created `path`."""
    path = Path(path)
    fd, tmp = _temporary(path, mode)
    os.close(fd)
    try:
        write(tmp)
        _fsync_file(tmp)
        try:
            os.link(tmp, path)  # atomic create-if-absent
        except FileExistsError:
            return False
        _fsync_directory(path.parent)
        return True
    finally:
        tmp.unlink(missing_ok=True)
