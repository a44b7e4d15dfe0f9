"""Corpus loaders, chosen by name: `load_corpus("synthetic", num_users=50)`.

Each loader module registers a keyword-only factory returning a `Corpus` in `LOADERS`. `materialize`
writes a loaded corpus to the cache once (keyed by loader name, options and source files) so that every
client process can read its own user's rows from Parquet instead of loading the whole corpus.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from pathlib import Path
from typing import Any

from uedp.data.corpus import SPLIT_RULE, Corpus
from uedp.data.store import load_corpus_dir, save_corpus
from uedp.paths import cache_root
from uedp.registry import Registry

LOADERS: Registry[Corpus] = Registry("dataset")

# Modules that register loaders; imported on first use so that `import uedp.data` stays light.
_LOADER_MODULES = (
    "uedp.data.synthetic",
    "uedp.data.shakespeare",
    "uedp.data.bbc_news",
    "uedp.data.conll",
    "uedp.data.ag_news",
    "uedp.data.jsonl",
)
_imported = False


def _ensure_registered() -> None:
    global _imported
    if not _imported:
        for module in _LOADER_MODULES:
            importlib.import_module(module)
        _imported = True


def dataset_names() -> list[str]:
    _ensure_registered()
    return LOADERS.names()


def load_corpus(name: str, /, **params: Any) -> Corpus:
    """Load corpus `name` with its loader's options (a misspelt option is an error)."""
    _ensure_registered()
    return LOADERS.create(name, **params)


def _source_stamp(value: Any) -> Any:
    """Options that name existing files contribute their size and mtime to the cache key."""
    if isinstance(value, str | os.PathLike) and str(value) and Path(value).exists():
        p = Path(value)
        files = sorted(p.rglob("*")) if p.is_dir() else [p]
        return [str(p.resolve())] + [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files if f.is_file()]
    return value


def materialized_path(name: str, params: dict[str, Any], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    key = json.dumps({"name": name, "params": {k: _source_stamp(v) for k, v in sorted(params.items())},
                      "split_rule": SPLIT_RULE}, sort_keys=True, default=str)
    digest = hashlib.blake2b(key.encode(), digest_size=8).hexdigest()
    root = Path(cache_dir) if cache_dir is not None else cache_root() / "corpora"
    return root / f"{name}-{digest}"


def materialize(
    name: str, /, *, cache_dir: str | os.PathLike[str] | None = None, **params: Any
) -> tuple[Path, Corpus]:
    """Load corpus `name` from the cache, or load it and write it there. Returns (directory, corpus)."""
    directory = materialized_path(name, params, cache_dir)
    if (directory / "meta.json").is_file():
        return directory, load_corpus_dir(directory)
    corpus = load_corpus(name, **params)
    save_corpus(corpus, directory, overwrite=False)  # a parallel job may have written it meanwhile
    return directory, corpus
