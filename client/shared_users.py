"""Encoded users shared by the processes of one simulation on one machine.

A Flower simulation runs every virtual node of a run in a few Ray actor processes, and a round's sampled user
goes to whichever actor is free: with a cache per process only, each actor read and encoded each user again
(~7 ms a user, most of a client round's compute). Within `shared_user_cache()` (runtime/simulate.py enters it
around the simulation) the process that first encodes a user writes the encoded data to a private temporary
directory (mode 0700, removed when the simulation ends) and the other actors read it back (~0.1 ms):

    with shared_user_cache():           # sets SHARED_USERS_ENV for the actors this process starts
        ...run the simulation...
    data = shared_user_data(cfg, partition_id, deidentified, load_user_data)   # in a client round

An entry holds exactly what `load_user_data` returns for that user, which every process of the simulation can
already read from the prepared corpus on this machine; it is keyed by the whole run config, the run's manifest
(corpus, annotations, tokenizer and its digest) and the size, modification time and inode of the files the
user's data is read from (checked at every look-up), so a changed corpus, annotation file or tokenizer never
hits an entry. Outside a simulation (the variable unset, or its directory absent: an actor on another machine of
a Ray cluster) nothing is shared and the data is loaded as before. Nothing here logs, and a failed read or write
only falls back to loading.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import pickle
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from uedp.config import RunConfig
from uedp.data.store import SENTENCES
from uedp.pipeline import EncodedSentences, UserData, load_manifest, manifest_path

SHARED_USERS_ENV = "UEDP_SHARED_USERS_DIR"  # the directory of this simulation's encoded users

Loader = Callable[..., UserData]  # load_user_data(cfg, partition_id, deidentified=...)


def shared_dir() -> Path | None:
    """This simulation's directory of encoded users, or None (not in a simulation, or not on its machine)."""
    directory = os.environ.get(SHARED_USERS_ENV, "")
    return Path(directory) if directory and os.path.isdir(directory) else None


@contextlib.contextmanager
def shared_user_cache() -> Iterator[Path]:
    """A fresh private directory for the encoded users, named in SHARED_USERS_ENV for the processes started
    inside (Ray's actors inherit this process's environment); removed, and the variable restored, on exit. An
    enclosing shared_user_cache's directory is reused."""
    outer = shared_dir()
    if outer is not None:
        yield outer
        return
    saved = os.environ.get(SHARED_USERS_ENV)
    directory = tempfile.mkdtemp(prefix="uedp-users-")  # mode 0700: this user's processes only
    os.environ[SHARED_USERS_ENV] = directory
    try:
        yield Path(directory)
    finally:
        if saved is None:
            os.environ.pop(SHARED_USERS_ENV, None)
        else:
            os.environ[SHARED_USERS_ENV] = saved
        shutil.rmtree(directory, ignore_errors=True)


def _stat(path: str | os.PathLike[str]) -> list[int]:
    try:
        st = os.stat(path)
    except OSError:
        return [-1, -1, -1]
    return [st.st_size, st.st_mtime_ns, st.st_ino]


Flat = tuple  # a run config as sorted (key, value) pairs: tuple(sorted(cfg.to_flat().items()))


@functools.lru_cache(maxsize=8)
def _manifest_file(flat: Flat, cache_dir: str | None) -> Path:
    """The run's manifest file (uedp.pipeline.manifest_path; `cache_dir`: $UEDP_CACHE_DIR, which it depends on)."""
    return manifest_path(RunConfig.from_flat(dict(flat)))


@functools.lru_cache(maxsize=8)
def _run_identity(flat: Flat, manifest: Path, manifest_stat: tuple[int, ...]) -> tuple[str, tuple[str, ...]]:
    """(a digest of the run config and its manifest's text, the files a user's data is read from); cached while
    the manifest file keeps its size and modification time."""
    text = manifest.read_bytes()
    m = json.loads(text)
    digest = hashlib.sha256(repr(flat).encode() + b"\0" + text).hexdigest()
    return digest, (str(Path(m["corpus_dir"]) / SENTENCES), str(m["annotations"]), str(m["tokenizer"]))


def entry_key(cfg: RunConfig, partition_id: int, deidentified: bool, *, flat: Flat | None = None) -> str:
    """The entry's name: a digest of the run config (`flat`: its sorted flat items, where the caller has them),
    the manifest's text, the sizes and modification times of the files the data is read from (corpus,
    annotations, tokenizer), the partition and the de-identification flag (module docstring)."""
    flat = tuple(sorted(cfg.to_flat().items())) if flat is None else flat
    manifest = _manifest_file(flat, os.environ.get("UEDP_CACHE_DIR"))
    if not manifest.is_file():
        load_manifest(cfg)  # prepares the run, as load_user_data would
    run, files = _run_identity(flat, manifest, tuple(_stat(manifest)))
    identity = [run, [_stat(f) for f in files], int(partition_id), bool(deidentified)]
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()


def _to_plain(data: UserData) -> dict:
    enc = data.encoded
    return {"user": data.user, "sids": data.sids, "entities": data.entities, "stable_ids": data.stable_ids,
            "ids": enc.ids.numpy(), "mask": enc.mask.numpy(),
            "labels": None if enc.labels is None else enc.labels.numpy(),
            "full_lengths": enc.full_lengths, "max_len": enc.max_len}


def _from_plain(d: dict) -> UserData:
    labels = None if d["labels"] is None else torch.from_numpy(d["labels"])
    enc = EncodedSentences(torch.from_numpy(d["ids"]), torch.from_numpy(d["mask"]), labels,
                           full_lengths=d["full_lengths"], max_len=d["max_len"])
    return UserData(user=d["user"], sids=d["sids"], entities=d["entities"], encoded=enc, stable_ids=d["stable_ids"])


def read_entry(directory: Path, key: str) -> UserData | None:
    """The entry `key` in `directory`, or None (absent, or unreadable: then it is loaded again)."""
    try:
        with open(directory / key, "rb") as f:
            d = pickle.load(f)
        if not isinstance(d, dict) or not isinstance(d.get("ids"), np.ndarray):
            return None
        return _from_plain(d)
    except Exception:  # noqa: BLE001 - a missing or torn entry is a miss
        return None


def write_entry(directory: Path, key: str, data: UserData) -> None:
    """Write the entry atomically (a temporary file renamed over the name); failures are ignored."""
    tmp = directory / f".{key}.{os.getpid()}.{uuid.uuid4().hex}"
    try:
        with open(tmp, "wb") as f:
            pickle.dump(_to_plain(data), f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, directory / key)
    except Exception:  # noqa: BLE001 - sharing is an optimisation: the round goes on with its own copy
        with contextlib.suppress(OSError):
            tmp.unlink()


def shared_user_data(cfg: RunConfig, partition_id: int, deidentified: bool, load: Loader, *,
                     flat: Flat | None = None) -> UserData:
    """User `partition_id`'s data: from this simulation's shared directory where another process encoded it,
    else `load(cfg, partition_id, deidentified=deidentified)`, written there for the others (`flat`: entry_key's)."""
    directory = shared_dir()
    if directory is None:
        return load(cfg, partition_id, deidentified=deidentified)
    key = entry_key(cfg, partition_id, deidentified, flat=flat)
    data = read_entry(directory, key)
    if data is None:
        data = load(cfg, partition_id, deidentified=deidentified)
        write_entry(directory, key, data)
    return data
