"""Helpers shared by the corpus loaders: strict reading of source files, sentence splitting, stratified
user sampling, and the rule for falling back to the Hugging Face hub.

Reading. `read_text(path)` returns a file's text decoded as strict UTF-8 (a leading BOM is dropped). It
raises `CorpusError` naming the file when it is missing, is a directory, is not a regular file (a FIFO or a
device, which could block or never end), has a name no file system holds (a NUL byte) or cannot be read,
and naming the 1-based line of the first byte that is not UTF-8. `text_lines` splits on "\\n" only (so
line numbers agree with that byte count and with editors) and drops a trailing "\\r". `read_sources(path,
split_files, parse, ...)` reads and parses a loader's source files by split (a file alone, or each split's file
in a directory), or takes its data from the hub when there is no path.

Sentence splitting. `split_sentences(text)` is a light rule-based splitter (no model): blank lines, and
new lines that start a list item ("- ", "* ", "• ": the marker is dropped), are hard boundaries; inside
a paragraph, white space is collapsed and a sentence ends after `.`, `!`, `?` or `...` (plus any closing
quotes or brackets) when white space follows and the next word starts like a sentence (an upper-case
letter or a digit, possibly after an opening quote or bracket). A period does not end a sentence after
a title or other abbreviation that is never final ("Mr.", "Dr.", "e.g.", "Jan."), after a single
capital initial ("J. K. Rowling"), after a dotted acronym ("U.S.", "U.K."), or after "No." before a
number. Decimals ("3.5") and "$1.13bn" never split (no white space follows the period). The splitter
errs towards longer sentences: a missed boundary costs less than a sentence cut after "Dr.".

Sampling. `sample_stratified(groups, k, seed)` keeps `k` items, each group (a class, a split, a play) in
proportion to its size; `check_max_users` validates the common `max_users` option.

Hub fallback. `hub_dataset(name, loader=...)` loads a Hugging Face dataset only when the `datasets`
package is importable and the hub is not switched off (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE unset or
"0"); otherwise it raises `CorpusError` saying that a local path is needed.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from uedp.checks import integer
from uedp.errors import CorpusError

T = TypeVar("T")

# -- reading -------------------------------------------------------------------------------------------


def read_text(path: str | os.PathLike[str]) -> str:
    """The whole file as strict UTF-8 text; `CorpusError` naming the file (and line) on any failure."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
        if stat.S_ISREG(mode):
            data = p.read_bytes()
    except FileNotFoundError:
        raise CorpusError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise CorpusError(f"{p}: is a directory, expected a file") from None
    except OSError as exc:
        raise CorpusError(f"{p}: cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:  # a name no file system holds: "embedded null byte"
        raise CorpusError(f"{str(p)!r}: not a valid file name ({exc})") from None
    if stat.S_ISDIR(mode):
        raise CorpusError(f"{p}: is a directory, expected a file")
    if not stat.S_ISREG(mode):  # a FIFO or a device could block or never end: refused, never read
        raise CorpusError(f"{p}: not a regular file (a pipe, socket or device), expected a file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
        start = exc.start + bom
        line = data.count(b"\n", 0, start) + 1
        raise CorpusError(
            f"{p} line {line}: not valid UTF-8 (byte 0x{data[start]:02x} at offset {start}); "
            "convert the file to UTF-8"
        ) from None


def read_sources(
    path: str | os.PathLike[str] | None,
    split_files: Mapping[str, Sequence[str]],
    parse: Callable[..., T],
    *,
    none_found: str,
    hub: Callable[[], list[tuple[str, T]]],
    hub_source: str,
) -> tuple[str, list[tuple[str | None, T]]]:
    """A loader's source (its description) and its parsed files, each with its split. `path` None: `hub_source`
    and `hub()`. Else `str(path)` and each file found there parsed as `parse(read_text(file), source=str(file))`:
    `path` a file, that one, with the split its name (case-insensitive) has in `split_files` (split -> file
    names), or None; `path` a directory, for each split the first of its names that is a file there, and
    `CorpusError(f"{path}: {none_found}")` when there is none. `CorpusError` too when `path` does not exist."""
    if path is None:
        return hub_source, hub()
    root = Path(path)
    if not root.exists():
        raise CorpusError(f"{root}: no such file or directory")
    if root.is_file():
        names = {n: split for split, files in split_files.items() for n in files}
        found: list[tuple[str | None, Path]] = [(names.get(root.name.lower()), root)]
    else:
        found = []
        for split, files in split_files.items():
            match = next((root / n for n in files if (root / n).is_file()), None)
            if match is not None:
                found.append((split, match))
        if not found:
            raise CorpusError(f"{root}: {none_found}")
    return str(path), [(split, parse(read_text(p), source=str(p))) for split, p in found]


def text_lines(text: str) -> list[str]:
    """Lines split on "\\n" only (not on other Unicode separators), each without a trailing "\\r"."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


# -- sentence splitting ----------------------------------------------------------------------------------

_WS = re.compile(r"\s+")
_PARAGRAPH = re.compile(r"\n[^\S\n]*\n")
_LIST_ITEM = re.compile(r"\n(?=[^\S\n]*[-*\u2022][^\S\n])")  # a line "- ", "* ", "• "
_BULLET = re.compile(r"^\s*[-*\u2022]\s+")
_INVISIBLE = re.compile("[\u200b\u200c\u200d\u2060\ufeff]")
# Candidate boundary: terminal punctuation, closing quotes/brackets, then white space.
_BOUNDARY = re.compile(r"(?:[.!?]+|\u2026)[\"'\u201d\u2019)\]]*(?=\s)")
_OPENERS = "\"'\u201c\u2018([\u00ab"
# A period after these words (case-insensitive, without their final period) never ends a sentence. Not
# "mar" (a verb in Shakespeare), not "may".
NEVER_FINAL = frozenset({
    "mr", "mrs", "ms", "mssrs", "messrs", "dr", "prof", "rev", "hon", "st", "mt", "ft", "sr", "jr", "gen",
    "col", "maj", "capt", "cpt", "lt", "sgt", "cmdr", "adm", "gov", "sen", "rep", "pres", "supt", "insp",
    "det", "fr", "vs", "v", "cf", "e.g", "i.e", "viz", "approx", "fig", "figs", "vol", "vols", "ch", "sec",
    "art", "no", "nos", "pp", "esp", "jan", "feb", "apr", "jun", "jul", "aug", "sep", "sept", "oct",
    "nov", "dec",
})
_NUMBER_ABBREV = frozenset({"no", "nos", "vol", "vols", "fig", "figs", "ch", "sec", "art", "pp"})
_ACRONYM = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")


def normalize_whitespace(text: str) -> str:
    """Collapse every run of white space (including non-breaking space) to one space; strip the ends."""
    return _WS.sub(" ", _INVISIBLE.sub("", text)).strip()


def _starts_sentence(rest: str) -> bool:
    """Does `rest` (the text after the white space) look like the start of a sentence?"""
    i = 0
    while i < len(rest) and rest[i] in _OPENERS:
        i += 1
    return i < len(rest) and (rest[i].isupper() or rest[i].isdigit())


def _ends_sentence(sentence: str, punct: str, rest: str) -> bool:
    if not _starts_sentence(rest):
        return False
    if punct.rstrip("\"'\u201d\u2019)]") != ".":
        return True  # "!", "?", "...", "?!": the next word starts with a capital
    words = sentence[: len(sentence) - len(punct)].rsplit(" ", 1)
    word = words[-1].lstrip(_OPENERS)
    low = word.lower()
    if low in NEVER_FINAL:
        # "No. 10" never splits; "no." or "vol." before a capital word may end a sentence
        return low in _NUMBER_ABBREV and not rest[:1].isdigit()
    if len(word) == 1 and word.isupper() and word != "I":
        return False  # an initial: "J. K. Rowling" (but "...than I. Come")
    return not _ACRONYM.fullmatch(word)  # "U.S.", "U.K."


def _split_paragraph(paragraph: str) -> list[str]:
    text = normalize_whitespace(paragraph)
    out: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        end = m.end()
        if _ends_sentence(text[start:end], m.group(0), text[end + 1 :]):
            out.append(text[start:end].strip())
            start = end + 1
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return [s for s in out if s]


def split_sentences(text: str) -> list[str]:
    """Sentences of `text`, white space normalized; blank lines and list items are hard boundaries."""
    out: list[str] = []
    for paragraph in _PARAGRAPH.split(text.replace("\r\n", "\n")):
        for item in _LIST_ITEM.split(paragraph):
            out.extend(_split_paragraph(_BULLET.sub("", item)))
    return out


# -- sampling ------------------------------------------------------------------------------------------------


def check_max_users(loader: str, max_users: int | None) -> None:
    """`max_users` must be None or an integer >= 1 (ConfigError naming the loader otherwise)."""
    if max_users is None:
        return
    integer(f"{loader}: max_users", max_users, minimum=1, note="or None")


def sample_stratified(groups: dict[str, list[T]], k: int | None, seed: int) -> list[T]:
    """All items (group order, then item order) if `k` is None or large enough; else `k` of them, each
    group contributing in proportion to its size, returned in the same order as the full list.

    Each group is shuffled with `seed`; its r-th item gets the key (r + 0.5) / group size; the `k`
    smallest keys win, ties broken by group name.
    """
    everything = [(g, i) for g in groups for i in range(len(groups[g]))]
    if k is None or k >= len(everything):
        return [groups[g][i] for g, i in everything]
    rng = np.random.default_rng(seed)
    keyed = []
    for g in sorted(groups):
        order = rng.permutation(len(groups[g]))
        keyed += [((rank + 0.5) / len(groups[g]), g, int(i)) for rank, i in enumerate(order)]
    keyed.sort(key=lambda t: (t[0], t[1]))
    chosen = {(g, i) for _, g, i in keyed[:k]}
    return [groups[g][i] for g, i in everything if (g, i) in chosen]


# -- hub fallback ------------------------------------------------------------------------------------------

_FALSE = {"", "0", "false", "no", "off"}


def hub_dataset(name: str, *, loader: str, local_hint: str) -> Any:
    """`datasets.load_dataset(name)` if allowed and possible, else `CorpusError` asking for a local path.

    `loader` names the corpus loader and `local_hint` says which local files to pass, for the message.
    """
    offline = [v for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
               if os.environ.get(v, "").strip().lower() not in _FALSE]
    if offline:
        why = f"{offline[0]}={os.environ[offline[0]]} (offline)"
    elif importlib.util.find_spec("datasets") is None:
        why = "the 'datasets' package is not installed"
    else:
        datasets = importlib.import_module("datasets")
        try:
            return datasets.load_dataset(name)
        except Exception as exc:  # any hub or cache failure: tell the user how to load locally
            why = f"datasets.load_dataset({name!r}) failed: {type(exc).__name__}: {exc}"
    raise CorpusError(f"{loader}: no local 'path' was given and the hub cannot be used: {why}; {local_hint}")
