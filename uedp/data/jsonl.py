"""`jsonl`: bring your own corpus, one JSON object per line.

    {"user": "alice", "text": "I met Bob in Paris. He was late.", "label": "travel", "split": "train"}

Fields: `user` (a non-empty string, or an integer: `42` is the user "42"; a file that writes one id both
ways, `42` and `"42"`, is refused as ambiguous) and `text` (string) are required; `label` (string or integer) and
`split` ("train", "valid" or "test") are optional; any other field is an error (a misspelt "lable" must
not silently drop the labels). A `null` label or split counts as absent. Blank lines are skipped.

Optional gold entities, hand-labelled: `"entities": [[start, end, "CATEGORY"], ...]`, character offsets
into `text` (`text[start:end]` is the entity), categories of uedp.categories (PERSON, GPE, LOC,
ORG, DATE, NORP, MISC, EMAIL, PHONE, ID, CARD, URL), spans not overlapping. If any line has the field,
every line must (`[]` for a sentence with no entity): a line without it is an error, never silently an
entity-free sentence. The corpus then has gold spans: `uedp corpus-stats` measures a detector against
them, and `entities.detector=gold` uses them (only when asked for: the default detector of a JSONL corpus,
entities.detector = auto, is balanced). With sentence splitting, each span moves to its sentence; a span
across a sentence boundary is an error.

- sentences: with `sentence_split=True` (default) each text is cut into sentences
  (`uedp.data.text.split_sentences`); with `False` each line's text is one sentence (white space
  normalized). A line's label and split apply to all of its sentences; sentences without a split get
  one drawn with `split_fractions` from a hash of (`seed`, user, text): a sentence's split never depends on
  the other sentences.
- labels: if any line has one, `label_names` are the distinct labels as strings, sorted (numerically
  when every label is an integer); `task="classification"` requires a label on every line and names the
  first line without one. With `task="lm"` labels are kept but optional.
- users: a user whose texts are all empty or white space is dropped and counted in
  `meta["dropped_users"]`.

Errors (`CorpusError`, naming the file and the 1-based line): missing file, bytes that are not UTF-8,
invalid JSON (also: nested too deeply, an integer too long to convert), a line that is not an object, a
field given twice, a missing or mistyped field, a string holding a lone surrogate (a "\\ud800" escape,
not text), a bad split, an empty corpus. A bad option (path, task, sentence_split, seed, split_fractions)
is a `ConfigError` naming it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from uedp.checks import integer
from uedp.data.corpus import SPLITS, Corpus, CorpusBuilder, GoldSpan, check_split_fractions
from uedp.data.loaders import LOADERS, DatasetFacts
from uedp.data.text import normalize_whitespace, read_text, split_sentences, text_lines
from uedp.errors import ConfigError, CorpusError

FIELDS = ("user", "text", "label", "split", "entities")
TASKS = ("lm", "classification")


Record = tuple[str | int, str, str | int | None, str | None, list[GoldSpan] | None]  # user: str after _user_ids


def _show(value: Any, limit: int = 80) -> str:
    """`repr(value)` cut to `limit` characters: an error names a huge value without repeating it."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _entities(value: Any, text: str, *, where: str) -> list[GoldSpan] | None:
    """The `entities` field of one line as sorted GoldSpans (None when the field is absent), validated."""
    from uedp.categories import CATEGORIES

    if value is None:
        return None
    if not isinstance(value, list):
        raise CorpusError(f"{where}: field 'entities' must be a list of [start, end, CATEGORY], got {_show(value)}")
    spans = []
    for item in value:
        if (not isinstance(item, list) or len(item) != 3 or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in item[:2]) or not isinstance(item[2], str)):
            raise CorpusError(f"{where}: entity {_show(item)} must be [start, end, CATEGORY] (two integers, a string)")
        start, end, category = item
        if category not in CATEGORIES:
            raise CorpusError(f"{where}: entity {_show(item)}: unknown category {_show(category)}; known: "
                              f"{', '.join(CATEGORIES)}")
        if not 0 <= start < end <= len(text):
            raise CorpusError(f"{where}: entity {_show(item)}: offsets out of range (the text has {len(text)} "
                              "characters; 0 <= start < end <= length)")
        spans.append(GoldSpan(start, end, category))
    spans.sort(key=lambda g: (g.start, g.end))
    for a, b in zip(spans, spans[1:]):
        if b.start < a.end:
            raise CorpusError(f"{where}: entities {[a.start, a.end, a.category]} ({_show(text[a.start:a.end])}) and "
                              f"{[b.start, b.end, b.category]} ({_show(text[b.start:b.end])}) overlap")
    return spans


def _char_map(original: str, sentence: str, *, where: str) -> list[int | None]:
    """For each character of `sentence` (a piece of `original` after white-space normalization), its
    index in `original`, found by matching non-space characters in order; None for white space."""
    out: list[int | None] = []
    i = 0
    for c in sentence:
        if c.isspace():
            out.append(None)
            continue
        while i < len(original) and original[i] != c:  # skips white space, invisible characters, bullets
            i += 1
        if i == len(original):
            raise CorpusError(f"{where}: cannot find the sentence {_show(sentence)} in its line's text")
        out.append(i)
        i += 1
    return out


def _sentences(text: str, spans: list[GoldSpan] | None, *, split: bool,
               where: str) -> list[tuple[str, list[GoldSpan] | None]]:
    """The line's sentences, each with its gold spans moved to the sentence's offsets."""
    sentences = split_sentences(text) if split else [t for t in [normalize_whitespace(text)] if t]
    if spans is None:
        return [(s, None) for s in sentences]
    placed: list[tuple[str, list[GoldSpan] | None]] = []
    todo = list(spans)
    search_from = 0
    for sentence in sentences:
        rel = [(i, j) for i, j in enumerate(_char_map(text[search_from:], sentence, where=where)) if j is not None]
        first, last = rel[0][1] + search_from, rel[-1][1] + search_from
        inside = []
        for g in [g for g in todo if g.start <= last and g.end > first]:
            if g.start < first or g.end - 1 > last:
                raise CorpusError(f"{where}: entity {[g.start, g.end, g.category]} ({_show(text[g.start:g.end])}) "
                                  "crosses a sentence boundary: fix the offsets, or load with sentence_split=false")
            ends = [i for i, j in rel if g.start <= j + search_from < g.end]
            if not ends:  # only white space or invisible characters, which the sentence does not keep
                raise CorpusError(f"{where}: entity {[g.start, g.end, g.category]} ({_show(text[g.start:g.end])}) "
                                  "covers no text of its sentence (only white space or invisible characters)")
            inside.append(GoldSpan(ends[0], ends[-1] + 1, g.category))
            todo.remove(g)
        placed.append((sentence, inside))
        search_from = last + 1
    if todo:  # a span over white space or characters that no sentence kept
        g = todo[0]
        raise CorpusError(f"{where}: entity {[g.start, g.end, g.category]} ({_show(text[g.start:g.end])}) covers no "
                          "text of any sentence")
    return placed


class _DuplicateKey(Exception):
    """A JSON object names a field twice (raised from inside json.loads; not a ValueError)."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


def _encodable(value: str, field: str, *, where: str) -> None:
    """A string from the file must be storable as UTF-8: JSON's escapes can spell a lone surrogate
    ("\\ud800"), which no UTF-8 file or Arrow column can hold."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CorpusError(f"{where}: field {field!r} holds a lone surrogate ({value[exc.start]!r} at character "
                          f"{exc.start}), which is not text: fix the \\u escape") from None


def _record(line: str, *, where: str) -> Record:
    """(user, text, label, split, entities) of one non-blank line, validated."""
    try:
        obj: Any = json.loads(line, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise CorpusError(f"{where}: invalid JSON: {exc.msg} (column {exc.colno})") from None
    except _DuplicateKey as exc:
        raise CorpusError(f"{where}: field {_show(exc.args[0])} appears twice in one object (which value is "
                          "meant?)") from None
    except RecursionError:
        raise CorpusError(f"{where}: invalid JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise CorpusError(f"{where}: invalid JSON value: {exc}") from None
    if not isinstance(obj, dict):
        raise CorpusError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    extra = sorted(set(obj) - set(FIELDS))
    if extra:
        raise CorpusError(
            f"{where}: unknown field(s) {', '.join(map(repr, extra))}; allowed: {', '.join(FIELDS)}"
        )
    user, text = obj.get("user"), obj.get("text")
    if isinstance(user, int) and not isinstance(user, bool):
        return user, *_fields(obj, text, where=where)  # a numeric id: its decimal string (load_jsonl)
    if not isinstance(user, str) or not user.strip():
        raise CorpusError(f"{where}: field 'user' must be a non-empty string or an integer, got {_show(user)}")
    _encodable(user, "user", where=where)
    return user, *_fields(obj, text, where=where)


def _fields(obj: dict[str, Any], text: Any, *, where: str
            ) -> tuple[str, str | int | None, str | None, list[GoldSpan] | None]:
    """(text, label, split, entities) of a line's object, validated."""
    if not isinstance(text, str):
        raise CorpusError(f"{where}: field 'text' must be a string, got {_show(text)}")
    _encodable(text, "text", where=where)
    label = obj.get("label")
    if label is not None and (isinstance(label, bool) or not isinstance(label, str | int)):
        raise CorpusError(f"{where}: field 'label' must be a string or an integer, got {_show(label)}")
    if isinstance(label, str):
        _encodable(label, "label", where=where)
    split = obj.get("split")
    if split is not None and split not in SPLITS:
        raise CorpusError(f"{where}: field 'split' must be one of {', '.join(SPLITS)}, got {_show(split)}")
    return text, label, split, _entities(obj.get("entities"), text, where=where)


def _user_ids(records: list[tuple], source: str) -> list[tuple]:
    """The records with every user id a string: a numeric id (42) stands for its decimal string ("42"), unless
    the file also writes that id as a string: then which user a line means is ambiguous, and it is refused."""
    first: dict[str, tuple[int, bool]] = {}  # id -> (first line, written as a number)
    for number, user, *_ in records:
        name, numeric = str(user), not isinstance(user, str)
        seen = first.setdefault(name, (number, numeric))
        if seen[1] != numeric:
            lines = sorted((seen[0], number))
            raise CorpusError(f"{source} lines {lines[0]} and {lines[1]}: user {name} is written both as a number "
                              f"and as a string (\"{name}\"); write every id of one user the same way")
    return [(number, str(user), *rest) for number, user, *rest in records]


def _label_names(labels: set[str | int]) -> tuple[list[str], dict[str | int, int]]:
    if all(isinstance(v, int) for v in labels):
        ordered: list[str | int] = sorted(labels, key=int)
    else:
        ordered = sorted(labels, key=str)
    names: list[str] = []
    index: dict[str | int, int] = {}
    for value in ordered:
        name = str(value)
        if name not in names:  # 1 and "1" are the same label
            names.append(name)
        index[value] = names.index(name)
    return names, index


# gold spans, if the file has them, are hand-labelled: used only with entities.detector = gold
@LOADERS.register("jsonl", facts=DatasetFacts(
    gold_by_construction=False, public_corpus="synthetic",
    task_option={"next_word": "lm", "classification": "classification"}))  # its `task` option, from the task group
def load_jsonl(
    *,
    path: str | os.PathLike[str],
    task: str = "lm",
    sentence_split: bool = True,
    seed: int = 0,
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
) -> Corpus:
    """A user-supplied JSON-lines corpus (see the module docstring for the format)."""
    if not isinstance(task, str) or task not in TASKS:
        raise ConfigError(f"jsonl: task must be one of {', '.join(TASKS)}, got {_show(task)}")
    if not isinstance(path, str | os.PathLike) or not str(path):
        raise ConfigError(f"jsonl: option path must name a JSONL file, got {_show(path)}")
    if not isinstance(sentence_split, bool):
        raise ConfigError(f"jsonl: option sentence_split must be true or false, got {_show(sentence_split)}")
    seed = integer("jsonl: option seed", seed)
    split_fractions = check_split_fractions("jsonl", split_fractions)
    source = str(path)
    records = []
    for number, line in enumerate(text_lines(read_text(Path(path))), start=1):
        if line.strip():
            records.append((number, *_record(line, where=f"{source} line {number}")))
    if not records:
        raise CorpusError(f"{source}: the file has no record (it is empty or holds only blank lines)")
    records = _user_ids(records, source)
    labels = {r[3] for r in records if r[3] is not None}
    if task == "classification":
        missing = next((r[0] for r in records if r[3] is None), None)
        if missing is not None:
            raise CorpusError(
                f"{source} line {missing}: field 'label' is missing; task 'classification' needs a label "
                "on every line"
            )
    with_entities = [r[0] for r in records if r[5] is not None]
    if with_entities and len(with_entities) < len(records):
        missing = next(r[0] for r in records if r[5] is None)
        raise CorpusError(
            f"{source} line {missing}: field 'entities' is missing, but line {with_entities[0]} has it: with gold "
            "entities every line needs the field ([] for a sentence without an entity)"
        )
    names, index = _label_names(labels) if labels else (None, {})
    builder = CorpusBuilder("jsonl", source=source, has_gold=bool(with_entities))
    for number, user, text, label, split, spans in records:
        builder.add_user(user)
        where = f"{source} line {number}"
        for sentence, gold in _sentences(text, spans, split=sentence_split, where=where):
            builder.add(user, sentence, label=None if label is None else index[label], split=split,
                        gold=gold, where=f"line {number}")
    meta = {"options": {"task": task, "sentence_split": sentence_split, "seed": seed}}
    return builder.build(seed=seed, split_fractions=split_fractions, label_names=names, meta=meta)
