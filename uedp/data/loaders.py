"""Corpus loaders, chosen by name: `load_corpus("synthetic", num_users=50)`.

Each loader module registers a keyword-only factory returning a `Corpus` in `LOADERS`, with the facts the
rest of the library needs about that dataset (`DatasetFacts`), in one registration:

    @LOADERS.register("my_corpus", facts=DatasetFacts(gold_by_construction=False, public_corpus="bbc_news"))
    def load_my_corpus(*, path: str, seed: int = 0) -> Corpus: ...

A registration without its facts is refused there (TypeError), and every lookup of a fact (`dataset_facts`)
refuses an unknown dataset with the list of known ones: no table keyed by dataset name elsewhere, no silent
default. Every module of uedp/data is imported on the first lookup; a loader module elsewhere is imported by
whoever uses it (importing uedp.audit registers `audit_synthetic`). `materialize` writes a loaded corpus
to the cache once (keyed by loader name, options and source files) so that every client process can read its
own user's rows from Parquet instead of loading the whole corpus.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from uedp.data.corpus import SPLIT_RULE, Corpus
from uedp.data.store import load_corpus_dir, save_corpus
from uedp.errors import ConfigError
from uedp.paths import cache_root
from uedp.registry import Registry


@dataclass(frozen=True)
class DatasetFacts:
    """What the rest of the library knows about a dataset, registered with its loader.

    gold_by_construction: its gold spans are exact because its generator inserted the entities, so the
        default detector (entities.detector = auto) uses them (uedp.config.EntityConfig.detector_for).
        Human-labelled spans (conll2003, a JSONL file with "entities") are not: they measure a detector, and
        a run uses them only when asked for (entities.detector = gold).
    public_corpus: the public corpus (uedp.public_corpora) that tokenizer.public_corpus = auto trains the
        tokenizer on; never the dataset's own text.
    task_option: the loader takes a `task` option, which comes from the task group only: task name (uedp.tasks)
        -> the loader's value (jsonl: next_word -> "lm"). None: the loader takes no task.
    public_generator: the public corpus drawn by this loader's own generator (synthetic), if any: a `seed`
        option equal to that corpus's seed is refused (the users' personas would be the public ones).
    contains_public: the public corpora whose text this dataset's text IS or contains (bbc_news: the BBC
        articles; shakespeare: the plays). A run on it must not take its tokenizer (tokenizer.public_corpus) or
        its public start (model.init) from them: that "public" text would be the users' own, outside the
        guarantee (uedp.public_corpora.private_text_clash refuses it). Empty where no overlap is known (a
        user's own JSONL file: its source cannot be known).
    """

    gold_by_construction: bool
    public_corpus: str
    task_option: Mapping[str, str] | None = None
    public_generator: str | None = None
    contains_public: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.gold_by_construction, bool):
            raise TypeError(f"DatasetFacts.gold_by_construction must be true or false, got "
                            f"{self.gold_by_construction!r}")
        if not isinstance(self.public_corpus, str) or not self.public_corpus or self.public_corpus == "auto":
            raise TypeError(f"DatasetFacts.public_corpus must name a public corpus, got {self.public_corpus!r}")
        if self.task_option is not None:
            if not isinstance(self.task_option, Mapping) or not self.task_option or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in self.task_option.items()):
                raise TypeError(f"DatasetFacts.task_option must map task names to the loader's values, got "
                                f"{self.task_option!r}")
            object.__setattr__(self, "task_option", MappingProxyType(dict(self.task_option)))
        if self.public_generator is not None and not isinstance(self.public_generator, str):
            raise TypeError(f"DatasetFacts.public_generator must name a public corpus, got {self.public_generator!r}")
        if isinstance(self.contains_public, str) or not isinstance(self.contains_public, tuple) or not all(
                isinstance(n, str) and n for n in self.contains_public):
            raise TypeError(f"DatasetFacts.contains_public must be a tuple of public corpus names, got "
                            f"{self.contains_public!r}")
        if self.public_corpus in self.contains_public:  # the default tokenizer would learn the users' text
            raise TypeError(f"DatasetFacts.public_corpus {self.public_corpus!r} is in contains_public: the default "
                            "public corpus must be independent of the dataset's text")

    def task_value(self, dataset: str, task: str) -> str:
        """The loader's `task` option for `task` (ConfigError if the loader takes none, or not this task)."""
        if self.task_option is None or task not in self.task_option:
            known = ", ".join(self.task_option or ()) or "none"
            raise ConfigError(f"task.name: dataset {dataset!r} has no value of its task option for task "
                              f"{task!r} (tasks it takes: {known})")
        return self.task_option[task]


class DatasetRegistry(Registry[Corpus]):
    """The loaders' registry: `register(name, facts=DatasetFacts(...))`, the facts required."""

    def __init__(self) -> None:
        super().__init__("dataset")
        self._facts: dict[str, DatasetFacts] = {}

    def register(
        self, name: str, *, facts: DatasetFacts, options_of: Callable[..., Any] | None = None
    ) -> Callable[[Callable[..., Corpus]], Callable[..., Corpus]]:
        if not isinstance(facts, DatasetFacts):
            raise TypeError(f"dataset {name!r}: facts must be a DatasetFacts, got {facts!r}")
        register_factory = super().register(name, options_of=options_of)

        def deco(factory: Callable[..., Corpus]) -> Callable[..., Corpus]:
            factory = register_factory(factory)  # refuses a name registered twice
            self._facts[name] = facts
            return factory

        return deco

    def facts(self, name: str) -> DatasetFacts:
        self.get(name)  # an unknown name: ConfigError with the known names
        return self._facts[name]

    def unregister(self, name: str) -> None:
        """Remove loader `name` and its facts (for tests that register a toy loader)."""
        self.get(name)
        del self._factories[name], self._facts[name]
        self._options_of.pop(name, None)


LOADERS = DatasetRegistry()

_imported = False


def _ensure_registered() -> None:
    """Import every module of uedp/data, each registering its loaders, on first use (so that `import uedp.data`
    stays light): a loader module dropped in uedp/data/ needs no list entry."""
    global _imported
    if not _imported:
        for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
            importlib.import_module(f"{__package__}.{module.name}")
        _imported = True


def dataset_names() -> list[str]:
    _ensure_registered()
    return LOADERS.names()


def dataset_facts(name: str) -> DatasetFacts:
    """The facts dataset `name` registered with its loader; an unknown name is a ConfigError."""
    _ensure_registered()
    return LOADERS.facts(name)


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
