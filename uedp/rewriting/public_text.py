"""Public training text for a DP-BART rewriter (docs/dp-bart-system.md, "The mechanism (DP-BART-CLV)"): the
rewriter's weights must come from public text only, independent of the corpus being privatized.

Contract:
- `public_text_for(private_corpus)` returns (description, sentences) drawn from the PUBLIC_SOURCES other than the
  private corpus itself: `synthetic` (private personas) -> shakespeare + bbc_news + synthetic-public (the synthetic
  generator's OTHER personas, seed 1000003); `bbc_news` -> synthetic-public + shakespeare; `shakespeare` ->
  synthetic-public + bbc_news; any other name (jsonl, conll2003, ...) -> all three. Only the NAME of the private
  corpus is read, never its text.
- Deterministic: the same arguments (and the same installed data packages) give the same list. Each source is
  normalized (NFC, whitespace runs -> one space, stripped), deduplicated and shuffled with a fixed seed; the
  sources then share `max_sentences` equally (a source with fewer sentences leaves its share to the others), and
  the union is shuffled again. A sentence of one source that also occurs in another is kept once.
- `public_text_key(...)` identifies that list without loading it (sources, data package versions, cap, seed):
  the rewriter cache is keyed by it, so a cached rewriter is found without reading any corpus.
"""

from __future__ import annotations

import functools
import hashlib
import json
import unicodedata
from typing import Any

import numpy as np

from uedp.checks import non_negative_int, positive_int
from uedp.errors import ConfigError

PUBLIC_SOURCES = ("synthetic-public", "shakespeare", "bbc_news")
# The sources for a private corpus of that name; any other name gets all of PUBLIC_SOURCES.
_SOURCES_FOR = {
    "bbc_news": ("synthetic-public", "shakespeare"),
    "shakespeare": ("synthetic-public", "bbc_news"),
    "synthetic": PUBLIC_SOURCES,  # synthetic-public: other personas (seed 1000003), never the private ones
}
DEFAULT_MAX_SENTENCES = 30_000
DEFAULT_SEED = 0  # shuffles public text only


def sources_for(private_corpus: str) -> tuple[str, ...]:
    """The PUBLIC_SOURCES a rewriter for `private_corpus` is trained on (never the corpus itself)."""
    if not isinstance(private_corpus, str) or not private_corpus:
        raise ConfigError(f"private_corpus must be a non-empty corpus name, got {private_corpus!r}")
    return _SOURCES_FOR.get(private_corpus, PUBLIC_SOURCES)


def _corpus_name(source: str) -> str:
    return "synthetic" if source == "synthetic-public" else source


def check_rewriter_sources(dataset: str, options: dict[str, Any]) -> None:
    """ConfigError if a public source of the rewriter of a run on `dataset` with `options` (the dataset whose
    users' text it trains on: uedp.pipeline.private_dataset) is the users' own text (uedp.public_corpora.
    private_text_clash, the one rule): `sources_for` leaves the dataset's own corpus out by name, but the
    synthetic generator's public personas ARE the users' when dataset.options.seed is the public seed."""
    from uedp.public_corpora import private_text_clash

    for source in sources_for(dataset):
        why = private_text_clash(_corpus_name(source), dataset, options, role="rewriter")
        if why is not None:
            raise ConfigError(f"rewrite: the DP-BART rewriter's public text {source!r} is not public for this run: "
                              f"{why}")


def _check(max_sentences: int, seed: int) -> None:
    positive_int("max_sentences", max_sentences)
    non_negative_int("seed", seed)


def public_text_key(private_corpus: str, *, max_sentences: int = DEFAULT_MAX_SENTENCES,
                    seed: int = DEFAULT_SEED) -> str:
    """A digest naming the list `public_text_for` returns for these arguments, computed without loading any text
    (each source's public-corpus key carries its data package's version)."""
    from uedp.tokenization import public_corpus

    _check(max_sentences, seed)
    keys = [public_corpus(_corpus_name(s)).key for s in sources_for(private_corpus)]
    payload = json.dumps({"v": 1, "sources": keys, "max": max_sentences, "seed": seed}, sort_keys=True)
    return hashlib.blake2b(payload.encode(), digest_size=12).hexdigest()


def _normalize(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).split())


@functools.cache
def _source_texts(source: str) -> tuple[str, ...]:
    """The normalized, non-empty, distinct sentences of a public source, in corpus order (loaded once per process)."""
    from uedp.tokenization import public_corpus

    texts = (_normalize(t) for t in public_corpus(_corpus_name(source)).texts())
    return tuple(dict.fromkeys(t for t in texts if t))


def _quotas(sizes: list[int], total: int) -> list[int]:
    """Equal shares of `total` (earlier sources get the remainder), a short source's unused share redistributed."""
    quotas = [0] * len(sizes)
    open_ = [i for i in range(len(sizes)) if sizes[i] > 0]
    left = total
    while left > 0 and open_:
        share, extra = divmod(left, len(open_))
        for rank, i in enumerate(list(open_)):
            take = min(share + (rank < extra), sizes[i] - quotas[i])
            quotas[i] += take
            left -= take
        open_ = [i for i in open_ if quotas[i] < sizes[i]]
    return quotas


def public_text_for(private_corpus: str, *, max_sentences: int = DEFAULT_MAX_SENTENCES,
                    seed: int = DEFAULT_SEED) -> tuple[str, list[str]]:
    """(description, sentences): public training text for a rewriter that will rewrite `private_corpus` (see the
    module docstring). At most `max_sentences` sentences, deterministic for a given `seed`."""
    from uedp.tokenization import public_corpus

    _check(max_sentences, seed)
    seen: set[str] = set()
    pools: list[list[str]] = []
    names = []
    for k, source in enumerate(sources_for(private_corpus)):
        names.append(public_corpus(_corpus_name(source)).description)
        unique = [text for text in _source_texts(source) if text not in seen]
        seen.update(unique)
        order = np.random.default_rng([seed, k]).permutation(len(unique))
        pools.append([unique[i] for i in order])
    quotas = _quotas([len(p) for p in pools], max_sentences)
    chosen = [s for pool, q in zip(pools, quotas) for s in pool[:q]]
    order = np.random.default_rng([seed, len(pools)]).permutation(len(chosen))
    sentences = [chosen[i] for i in order]
    counts = ", ".join(f"{q}" for q in quotas)
    description = (f"public text: {' + '.join(names)}; {len(sentences)} sentences ({counts}; deduplicated, "
                   f"shuffled with seed {seed})")  # no private corpus name: corpora with the same sources share it
    return description, sentences
