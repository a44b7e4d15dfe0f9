"""`ag_news`: the AG News topic-classification corpus from local CSV files (4 classes).

Source (`path`): a CSV file, or a directory holding `train.csv` and/or `test.csv` (and optionally
`valid.csv` or `dev.csv`); each sentence's split is its file's. A single file whose name is not one of
these gets splits drawn per sentence with `split_fractions` and `seed`.

Format: rows `class,title,description` (CSV quoting; no header, though a first row whose class field is
"class", "class index" or "label" is taken as a header and skipped). `class` is 1-4, giving label 0-3 of
`LABEL_NAMES` = World, Sports, Business, Sci/Tech. The original files' artefacts are undone: `\\` (a lost
line break) becomes a space, HTML entities (`#39;`, `&amp;`, `&lt;b&gt;`) are decoded.

AG News has no authors, so users are made up: each file's articles, in file order, are cut into groups
of `articles_per_user` (default 10; 1 = one article per user); user id `"<split>/user<k>"` (`all/...` for
a file of unknown split). An article's sentences are its title and its description's sentences, each
labelled with the article's class. A user whose articles are all empty is dropped and counted in
`meta["dropped_users"]`. `max_users` keeps a sample of users, each file in proportion to its size.

Without `path`, the Hugging Face `ag_news` dataset is used if allowed (see `uedp.data.text.hub_dataset`);
its `text` field (title and description together) is split into sentences.
"""

from __future__ import annotations

import csv
import html
import io
import os
import re

from uedp.checks import integer
from uedp.data.corpus import Corpus, CorpusBuilder
from uedp.data.loaders import LOADERS, DatasetFacts
from uedp.data.text import check_max_users, hub_dataset, read_sources, sample_stratified, split_sentences
from uedp.errors import CorpusError

LABEL_NAMES = ["World", "Sports", "Business", "Sci/Tech"]
SPLIT_FILES = {"train": ("train.csv",), "valid": ("valid.csv", "dev.csv"), "test": ("test.csv",)}
_HEADER = {"class", "class index", "class_index", "label"}
_BARE_ENTITY = re.compile(r"(?<!&)#(\d+);")  # "it #39;s": the "&" was lost
_BARE_NAMED = re.compile(r"(?<![&\w])(quot|amp|lt|gt);")

Article = tuple[int, str, str]  # (label, title, description), raw: sentences are cut only for kept users


def clean(text: str) -> str:
    """Undo AG News artefacts: backslashes for line breaks, HTML entities with or without their '&'."""
    text = text.replace("\\", " ")
    text = _BARE_NAMED.sub(r"&\1;", _BARE_ENTITY.sub(r"&#\1;", text))
    return html.unescape(html.unescape(text))  # "&amp;lt;" is doubly escaped in places


def article_sentences(title: str, description: str) -> list[str]:
    head = " ".join(clean(title).split())
    return ([head] if head else []) + split_sentences(clean(description))


def parse_csv(text: str, *, source: str) -> list[Article]:
    """Articles of one AG News CSV file; `CorpusError` naming `source` and the line of a bad row."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    articles: list[Article] = []
    line = 1  # first physical line of the next record
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise CorpusError(f"{source} line {line}: malformed CSV: {exc}") from None
        here, line = line, reader.line_num + 1
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if not articles and here == 1 and row[0].strip().lower() in _HEADER:
            continue
        if len(row) != 3:
            raise CorpusError(
                f"{source} line {here}: expected 3 columns (class, title, description), got {len(row)}"
            )
        cls = row[0].strip()
        if cls not in {"1", "2", "3", "4"}:
            raise CorpusError(f"{source} line {here}: field 'class' must be 1, 2, 3 or 4, got {cls!r}")
        articles.append((int(cls) - 1, row[1], row[2]))
    return articles


def _hub_sources() -> list[tuple[str, list[Article]]]:
    hint = "pass path=DIR holding the AG News files train.csv and test.csv (rows: class,title,description)"
    data = hub_dataset("ag_news", loader="ag_news", local_hint=hint)
    out = []
    for split in ("train", "test"):
        if split in data:
            out.append((split, [(int(r["label"]), "", r["text"]) for r in data[split]]))
    return out


@LOADERS.register("ag_news", facts=DatasetFacts(gold_by_construction=False, public_corpus="bbc_news"))
def load_ag_news(*, path: str | os.PathLike[str] | None = None, articles_per_user: int = 10,
                 max_users: int | None = None, seed: int = 0,
                 split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> Corpus:
    """AG News articles grouped into users; label = topic."""
    articles_per_user = integer("ag_news: articles_per_user", articles_per_user, minimum=1)
    check_max_users("ag_news", max_users)
    source, sources = read_sources(
        path, SPLIT_FILES, parse_csv, hub=_hub_sources, hub_source="ag_news (hub)",
        none_found="no AG News file found in this directory (expected train.csv, test.csv)")
    groups: dict[str, list[tuple[str | None, str, list[Article]]]] = {}
    n = articles_per_user
    for split, articles in sources:
        prefix = split or "all"
        users = [(split, f"{prefix}/user{k:06d}", articles[i : i + n])
                 for k, i in enumerate(range(0, len(articles), n))]
        groups.setdefault(prefix, []).extend(users)
    builder = CorpusBuilder("ag_news", source=source)
    for split, user, articles in sample_stratified(groups, max_users, seed):
        builder.add_user(user)
        for label, title, description in articles:
            for sentence in article_sentences(title, description):
                builder.add(user, sentence, label=label, split=split)
    meta = {
        "articles": sum(len(a) for g in groups.values() for _, _, a in g),
        "options": {"articles_per_user": n, "max_users": max_users, "seed": seed},
    }
    return builder.build(
        seed=seed, split_fractions=tuple(split_fractions), label_names=list(LABEL_NAMES), meta=meta
    )
