"""`conll2003`: CoNLL-2003 named-entity data, one user per document, with gold entity spans.

Source (`path`): a directory holding the split files, or one file.
- directory: `train.txt` (or `eng.train`), `valid.txt` (or `dev.txt`, `testa.txt`, `eng.testa`),
  `test.txt` (or `testb.txt`, `eng.testb`); at least one must exist; each sentence's split is its file's;
- one file: its split comes from its name when that is one of the above, else each sentence gets a
  split drawn with `split_fractions` and `seed`.

Format: one token per line, `token POS chunk NER` (at least `token NER`: the NER tag is the last
column); a blank line ends a sentence; a `-DOCSTART-` line starts a new document. Tags are `O`,
`B-X` or `I-X` with X in PER, LOC, ORG, MISC, in IOB1 or IOB2: an entity starts at `B-X` or at `I-X`
not continuing an entity of type X, and runs over the following `I-X`.

Corpus: user `"<split>/doc<k>"` (k counts the documents of the file from 0; `all/doc<k>` for a file of
unknown split; tokens before the first `-DOCSTART-` form document 0). A sentence's text is its tokens
joined by single spaces; its gold spans are character offsets into that text, with categories mapped by
`uedp.categories.LABEL_MAP` (PER -> PERSON, LOC, ORG, MISC). A document with no sentence is
dropped and counted in `meta["dropped_users"]`. `max_users` keeps a sample of documents, each split in
proportion to its size. No labels.

Without `path`, the Hugging Face `conll2003` dataset is used if allowed (see `uedp.data.text.hub_dataset`);
it has no document boundaries, so its users are runs of `HUB_SENTENCES_PER_USER` consecutive sentences.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from uedp.categories import LABEL_MAP
from uedp.data.corpus import Corpus, CorpusBuilder, GoldSpan
from uedp.data.loaders import LOADERS, DatasetFacts
from uedp.data.text import check_max_users, hub_dataset, read_sources, sample_stratified, text_lines
from uedp.errors import CorpusError

SPLIT_FILES = {
    "train": ("train.txt", "eng.train"),
    "valid": ("valid.txt", "dev.txt", "testa.txt", "eng.testa"),
    "test": ("test.txt", "testb.txt", "eng.testb"),
}
TYPES = ("PER", "LOC", "ORG", "MISC")
_TAG = re.compile(r"O|[BI]-(?:PER|LOC|ORG|MISC)")
HUB_SENTENCES_PER_USER = 14  # about the mean CoNLL-2003 document length, in sentences
_HUB_SPLITS = {"train": "train", "validation": "valid", "test": "test"}


@dataclass
class Sentence:
    tokens: list[str]
    tags: list[str]
    line: int  # 1-based line of the first token, for messages


Document = list[Sentence]


def parse_conll(text: str, *, source: str) -> list[Document]:
    """Documents of a CoNLL file; `CorpusError` naming `source` and the line for a malformed line."""
    docs: list[Document] = []
    tokens: list[str] = []
    tags: list[str] = []
    first_line = 0

    def close_sentence() -> None:
        nonlocal tokens, tags
        if tokens:
            docs[-1].append(Sentence(tokens, tags, first_line))
            tokens, tags = [], []

    for number, line in enumerate(text_lines(text), start=1):
        cols = line.split()
        if not cols:
            close_sentence()
            continue
        if cols[0] == "-DOCSTART-":
            if docs:
                close_sentence()
            docs.append([])
            continue
        if len(cols) < 2:
            raise CorpusError(
                f"{source} line {number}: too few columns ({len(cols)}); expected 'token POS chunk NER' "
                "(at least 'token NER')"
            )
        tag = cols[-1]
        if not _TAG.fullmatch(tag):
            raise CorpusError(
                f"{source} line {number}: invalid NER tag {tag!r}; expected O, B-X or I-X with X in "
                f"{', '.join(TYPES)}"
            )
        if not docs:
            docs.append([])  # tokens before any -DOCSTART-: document 0
        if not tokens:
            first_line = number
        tokens.append(cols[0])
        tags.append(tag)
    if docs:
        close_sentence()
    return docs


def sentence_with_gold(tokens: list[str], tags: list[str]) -> tuple[str, list[GoldSpan]]:
    """Tokens joined by single spaces, and the IOB1/IOB2 entities as character spans of that text."""
    entities: list[tuple[str, int, int]] = []  # (type, start, end)
    inside: str | None = None  # type of the entity the previous token belongs to
    pos = 0
    for token, tag in zip(tokens, tags, strict=True):
        start, end = pos, pos + len(token)
        pos = end + 1
        if tag == "O":
            inside = None
            continue
        prefix, kind = tag.split("-", 1)
        if prefix == "B" or inside != kind:
            entities.append((kind, start, end))
        else:
            entities[-1] = (kind, entities[-1][1], end)
        inside = kind
    return " ".join(tokens), [GoldSpan(s, e, LABEL_MAP[k]) for k, s, e in entities]


def _hub_sources() -> list[tuple[str, list[Document]]]:
    hint = "pass path=DIR holding the CoNLL-2003 files train.txt, valid.txt and test.txt"
    data = hub_dataset("conll2003", loader="conll2003", local_hint=hint)
    out = []
    for hub_split, split in _HUB_SPLITS.items():
        if hub_split not in data:
            continue
        rows = data[hub_split]
        names = rows.features["ner_tags"].feature.names
        sentences = [
            Sentence(list(r["tokens"]), [names[t] for t in r["ner_tags"]], i + 1)
            for i, r in enumerate(rows)
            if r["tokens"]
        ]
        for s in sentences:
            bad = next((t for t in s.tags if not _TAG.fullmatch(t)), None)
            if bad is not None:
                raise CorpusError(f"hub conll2003 {hub_split} row {s.line}: invalid NER tag {bad!r}")
        k = HUB_SENTENCES_PER_USER
        out.append((split, [sentences[i : i + k] for i in range(0, len(sentences), k)]))
    return out


# hand-labelled spans: they measure a detector, a run uses them only with entities.detector = gold
@LOADERS.register("conll2003", facts=DatasetFacts(gold_by_construction=False, public_corpus="bbc_news"))
def load_conll2003(
    *,
    path: str | os.PathLike[str] | None = None,
    max_users: int | None = None,
    seed: int = 0,
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
) -> Corpus:
    """CoNLL-2003 documents as users, with gold PERSON/LOC/ORG/MISC spans."""
    check_max_users("conll2003", max_users)
    expected = "; ".join(f"{s}: {' or '.join(n)}" for s, n in SPLIT_FILES.items())
    source, sources = read_sources(
        path, SPLIT_FILES, parse_conll, hub=_hub_sources, hub_source="conll2003 (hub)",
        none_found=f"no CoNLL file found in this directory (expected {expected})")
    groups: dict[str, list[tuple[str | None, str, Document]]] = {}
    for split, docs in sources:
        prefix = split or "all"
        groups.setdefault(prefix, []).extend((split, f"{prefix}/doc{k}", d) for k, d in enumerate(docs))
    builder = CorpusBuilder("conll2003", source=source, has_gold=True)
    for split, user, doc in sample_stratified(groups, max_users, seed):
        builder.add_user(user)
        for s in doc:
            text, gold = sentence_with_gold(s.tokens, s.tags)
            builder.add(user, text, split=split, gold=gold, where=f"line {s.line}")
    meta = {"documents": sum(map(len, groups.values())), "options": {"max_users": max_users, "seed": seed}}
    return builder.build(seed=seed, split_fractions=tuple(split_fractions), meta=meta)
