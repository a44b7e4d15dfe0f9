"""`jsonl`: bring your own corpus, one JSON object per line.

    {"user": "alice", "text": "I met Bob in Paris. He was late.", "label": "travel", "split": "train"}

Fields: `user` (non-empty string) and `text` (string) are required; `label` (string or integer) and
`split` ("train", "valid" or "test") are optional; any other field is an error (a misspelt "lable" must
not silently drop the labels). A `null` label or split counts as absent. Blank lines are skipped.

- sentences: with `sentence_split=True` (default) each text is cut into sentences
  (`uedp.data.text.split_sentences`); with `False` each line's text is one sentence (white space
  normalized). A line's label and split apply to all of its sentences; sentences without a split get
  one drawn with `split_fractions` and `seed`.
- labels: if any line has one, `label_names` are the distinct labels as strings, sorted (numerically
  when every label is an integer); `task="classification"` requires a label on every line and names the
  first line without one. With `task="lm"` labels are kept but optional.
- users: a user whose texts are all empty or white space is dropped and counted in
  `meta["dropped_users"]`.

Errors (`CorpusError`, naming the file and the 1-based line): missing file, bytes that are not UTF-8,
invalid JSON, a line that is not an object, a missing or mistyped field, a bad split, an empty corpus.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from uedp.data.corpus import SPLITS, Corpus, CorpusBuilder
from uedp.data.loaders import LOADERS
from uedp.data.text import normalize_whitespace, read_text, split_sentences, text_lines
from uedp.errors import ConfigError, CorpusError

FIELDS = ("user", "text", "label", "split")
TASKS = ("lm", "classification")


def _record(line: str, *, where: str) -> tuple[str, str, str | int | None, str | None]:
    """(user, text, label, split) of one non-blank line, validated."""
    try:
        obj: Any = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CorpusError(f"{where}: invalid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise CorpusError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    extra = sorted(set(obj) - set(FIELDS))
    if extra:
        raise CorpusError(
            f"{where}: unknown field(s) {', '.join(map(repr, extra))}; allowed: {', '.join(FIELDS)}"
        )
    user, text = obj.get("user"), obj.get("text")
    if not isinstance(user, str) or not user.strip():
        raise CorpusError(f"{where}: field 'user' must be a non-empty string, got {user!r}")
    if not isinstance(text, str):
        raise CorpusError(f"{where}: field 'text' must be a string, got {text!r}")
    label = obj.get("label")
    if label is not None and (isinstance(label, bool) or not isinstance(label, str | int)):
        raise CorpusError(f"{where}: field 'label' must be a string or an integer, got {label!r}")
    split = obj.get("split")
    if split is not None and split not in SPLITS:
        raise CorpusError(f"{where}: field 'split' must be one of {', '.join(SPLITS)}, got {split!r}")
    return user, text, label, split


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


@LOADERS.register("jsonl")
def load_jsonl(
    *,
    path: str | os.PathLike[str],
    task: str = "lm",
    sentence_split: bool = True,
    seed: int = 0,
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
) -> Corpus:
    """A user-supplied JSON-lines corpus (see the module docstring for the format)."""
    if task not in TASKS:
        raise ConfigError(f"jsonl: task must be one of {', '.join(TASKS)}, got {task!r}")
    source = str(path)
    records = []
    for number, line in enumerate(text_lines(read_text(Path(path))), start=1):
        if line.strip():
            records.append((number, *_record(line, where=f"{source} line {number}")))
    if not records:
        raise CorpusError(f"{source}: the file has no record (it is empty or holds only blank lines)")
    labels = {r[3] for r in records if r[3] is not None}
    if task == "classification":
        missing = next((r[0] for r in records if r[3] is None), None)
        if missing is not None:
            raise CorpusError(
                f"{source} line {missing}: field 'label' is missing; task 'classification' needs a label "
                "on every line"
            )
    names, index = _label_names(labels) if labels else (None, {})
    builder = CorpusBuilder("jsonl", source=source)
    for number, user, text, label, split in records:
        builder.add_user(user)
        if sentence_split:
            sentences = split_sentences(text)
        else:
            sentences = [t for t in [normalize_whitespace(text)] if t]
        for sentence in sentences:
            builder.add(user, sentence, label=None if label is None else index[label], split=split,
                        where=f"line {number}")
    meta = {"options": {"task": task, "sentence_split": sentence_split, "seed": seed}}
    return builder.build(seed=seed, split_fractions=tuple(split_fractions), label_names=names, meta=meta)
