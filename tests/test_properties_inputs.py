"""Bad input by the thousand: property-based tests that generate malformed inputs and
check that each is refused with a clear error, never a traceback of another exception type, a hang or a
partial output.

Targets (the examples per target are the constants of EXAMPLES, reported in README's reliability section;
`pytest --hypothesis-show-statistics` prints what each ran):
1. bring-your-own JSONL corpora (uedp.data.jsonl): random bytes, encodings, bad JSON, fields, entity spans,
   empty files, loader options; the CLI path `uedp corpus-stats --dataset jsonl` (exit status 2);
2. run configs: the flat dict `flwr run` passes (RunConfig.from_flat, also parsed from TOML and from
   KEY=VALUE items) and Hydra's composition (runtime.hydra_job.to_run_config, uedp.hydra_schema);
3. a SuperNode's node config (client.app.read_node_config; the fault app's studies.fault_app.inject_fault);
4. `uedp rewrite` inputs and options (exit status 2, no output file, nothing half-written);
5. `model.init` public-start files (uedp.models.public_start.load_public_start) and what makes one
   (uedp.pretraining: the public text file, the training settings).

Library paths must raise a UedpError (ConfigError or CorpusError) whose message names the file and line, or
the field; command-line paths must exit with status 2 and print that message. Every example runs under a
time limit (`no_hang`). The profile is database-less and derandomized, so CI runs the same examples.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import signal
import string
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from uedp.errors import ConfigError, CorpusError, UedpError

# Examples tried per target (README's reliability table); each property below names its entry.
EXAMPLES = {
    "jsonl_line": 200,  # one malformed line among valid ones: expected error at that line
    "jsonl_entities": 150,  # bad entity spans
    "jsonl_spans_split": 120,  # well-formed spans through sentence splitting
    "jsonl_encodings": 100,  # latin-1, UTF-16/32, BOMs, random bytes
    "jsonl_bytes": 150,  # arbitrary bytes and JSON values, anywhere
    "jsonl_empty": 50,  # blank files
    "jsonl_options": 100,  # the loader's options
    "jsonl_cli": 40,  # uedp corpus-stats --dataset jsonl
    "run_config_invalid": 250,  # one out-of-range or mistyped value per key
    "run_config_fuzz": 200,  # any keys, any values
    "run_config_toml": 120,  # TOML documents / KEY=VALUE items, as flwr run passes them
    "hydra": 100,  # to_run_config and group_node
    "node_config": 200,  # read_node_config, studies.fault_app.inject_fault
    "rewrite_input": 60,  # uedp rewrite --in MALFORMED
    "rewrite_options": 100,  # uedp rewrite with bad options or output paths
    "model_init": 100,  # public-start files
    "pretraining": 60,  # experiments.pretrain's public text file and settings (uedp.pretraining)
}
HANG_SECONDS = 20  # per example: far above any example's time, far below a hang's


def profile(target: str) -> settings:
    return settings(max_examples=EXAMPLES[target], deadline=None, database=None, derandomize=True,
                    print_blob=False)


@contextlib.contextmanager
def no_hang(seconds: float = HANG_SECONDS) -> Iterator[None]:
    """Fail (TimeoutError) instead of hanging when the block runs past `seconds`."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"an input made the code under test run past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def listing(folder: Path) -> set[tuple[str, int]]:
    """The files under `folder` (hidden and temporary ones included) with their sizes: cheap for a cache."""
    return {(str(p.relative_to(folder)), p.stat().st_size) for p in folder.rglob("*")} if folder.exists() else set()


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (hidden and temporary ones included) with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("properties")


# ==================================================================================================
# 1. bring-your-own JSONL corpora
# ==================================================================================================

FIELDS = ("user", "text", "label", "split", "entities")
SPLITS = ("train", "valid", "test")
TEXTS = ("I met Bob in Paris. He was late.", "Call Ann on Monday!", "No. 10 is on Downing St. in London.",
         "  - a list item\n- another one  ", "Dr. J. K. Rowling wrote it. Then U.S. sales rose.",
         "é ü 漢字 ✓ emoji 🙂 and \u00a0non-breaking space.", "", "x")
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=8)
NO_NEWLINE = st.characters(blacklist_categories=("Cs",), blacklist_characters="\n")
USERS = st.text(string.ascii_letters + "é漢 _-.", min_size=1, max_size=8).filter(str.strip)


def load(path: Path, **options: Any):
    from uedp.data.jsonl import load_jsonl

    with no_hang():
        return load_jsonl(path=path, **options)


def record_line(record: dict[str, Any], ascii_only: bool) -> str:
    return json.dumps(record, ensure_ascii=ascii_only)


@st.composite
def valid_records(draw: st.DrawFn, *, entities: bool = False, labels: bool = False) -> list[dict[str, Any]]:
    out = []
    for _ in range(draw(st.integers(1, 4))):
        rec: dict[str, Any] = {"user": draw(USERS), "text": draw(st.sampled_from(TEXTS[:6]))}
        if labels or draw(st.booleans()):
            rec["label"] = draw(st.one_of(st.sampled_from(["a", "b", "sport"]), st.integers(-5, 5)))
        if draw(st.booleans()):
            rec["split"] = draw(st.sampled_from(SPLITS))
        if entities:
            rec["entities"] = []
        out.append(rec)
    return out


def _is_record_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


def _wrong(field: str) -> st.SearchStrategy[Any]:
    """JSON values of the wrong type (or value) for `field`; absent-meaning null is excluded where allowed."""
    if field == "user":
        return JSON_VALUES.filter(lambda v: not (isinstance(v, str) and v.strip()))
    if field == "text":
        return JSON_VALUES.filter(lambda v: not isinstance(v, str))
    if field == "label":
        return JSON_VALUES.filter(lambda v: v is not None and (isinstance(v, bool) or not isinstance(v, str | int)))
    if field == "split":
        return JSON_VALUES.filter(lambda v: v is not None and v not in SPLITS)
    return JSON_VALUES.filter(lambda v: v is not None and not isinstance(v, list))  # entities


@st.composite
def malformed_line(draw: st.DrawFn, line_no: int) -> tuple[bytes, str]:
    """One bad line (bytes, without its new line) and a fragment its error must contain."""
    base = {"user": "alice", "text": "Hello Bob."}
    kind = draw(st.sampled_from(["not_json", "not_object", "wrong_type", "missing", "extra", "duplicate",
                                 "surrogate", "deep", "long_int", "bad_utf8", "bom", "nan_literal"]))
    if kind == "not_json":
        text = draw(st.text(NO_NEWLINE, min_size=1, max_size=40).filter(
            lambda t: t.strip() and not _is_record_object(t) and not t.strip().startswith(("[", '"'))))
        assume(not _parses(text))
        return text.encode(), "invalid JSON"
    if kind == "not_object":
        value = draw(JSON_VALUES.filter(lambda v: not isinstance(v, dict)))
        return json.dumps(value).encode(), "expected a JSON object"
    if kind == "wrong_type":
        field = draw(st.sampled_from(FIELDS))
        return json.dumps({**base, field: draw(_wrong(field))}).encode(), f"'{field}'"
    if kind == "missing":
        field = draw(st.sampled_from(["user", "text"]))
        rec = {k: v for k, v in base.items() if k != field}
        return json.dumps(rec).encode(), f"field '{field}'"
    if kind == "extra":
        key = draw(st.text(max_size=10).filter(lambda k: k not in FIELDS))
        return json.dumps({**base, key: draw(JSON_VALUES)}).encode(), "unknown field"
    if kind == "duplicate":
        field = draw(st.sampled_from(["user", "text"]))
        return f'{{"user": "a", "text": "t", "{field}": "b"}}'.encode(), "appears twice"
    if kind == "surrogate":
        field = draw(st.sampled_from(["user", "text", "label"]))
        code = draw(st.integers(0xD800, 0xDFFF))
        rec = {**base, field: "x@SURR@y"}
        return json.dumps(rec).replace("@SURR@", f"\\u{code:04x}").encode(), "lone surrogate"
    if kind == "deep":
        depth = draw(st.sampled_from([10_000, 100_000]))
        return ('{"user": "a", "text": "t", "label": ' + "[" * depth + "]" * depth + "}").encode(), "invalid JSON"
    if kind == "long_int":
        digits = draw(st.integers(4301, 20_000))
        return ('{"user": "a", "text": "t", "label": ' + "7" * digits + "}").encode(), "invalid JSON"
    if kind == "bad_utf8":
        raw = draw(st.binary(min_size=1, max_size=30).filter(lambda b: b"\n" not in b and not _utf8(b)))
        return b'{"user": "a", "text": "' + raw + b'"}', "not valid UTF-8"
    if kind == "bom":
        assume(line_no > 1)  # a BOM that opens the file is allowed
        return "\ufeff".encode() + json.dumps(base).encode(), "invalid JSON"
    literal = draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999"]))
    return f'{{"user": "a", "text": "t", "label": {literal}}}'.encode(), "'label'"


def _parses(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except (ValueError, RecursionError):
        return False


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@st.composite
def file_with_bad_line(draw: st.DrawFn) -> tuple[bytes, int, str]:
    """(file bytes, 1-based number of the bad line, fragment): valid records, blank lines, CRLF or LF, and one
    malformed line."""
    records = draw(valid_records())
    ascii_only, newline = draw(st.booleans()), draw(st.sampled_from([b"\n", b"\r\n"]))
    lines = [record_line(r, ascii_only).encode() for r in records]
    for _ in range(draw(st.integers(0, 2))):  # blank lines are skipped but counted
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from([b"", b"   ", b"\t"])))
    position = draw(st.integers(0, len(lines)))
    bad, fragment = draw(malformed_line(position + 1))
    lines.insert(position, bad)
    data = newline.join(lines) + draw(st.sampled_from([b"", newline]))
    return data, position + 1, fragment


def write_case(path: Path, case: tuple[bytes, int, str]) -> tuple[str, str]:
    """Write a `file_with_bad_line` case to `path`: (how the error it must get starts, "<path> line <n>: ", and
    the fragment that error names)."""
    data, line, fragment = case
    path.write_bytes(data)
    return f"{path} line {line}: ", fragment


@profile("jsonl_line")
@given(case=file_with_bad_line())
def test_jsonl_one_bad_line_is_refused_naming_file_and_line(work: Path, case: tuple[bytes, int, str]) -> None:
    path = work / "bad_line.jsonl"
    start, fragment = write_case(path, case)
    with pytest.raises(CorpusError) as err:
        load(path)
    message = str(err.value)
    assert message.startswith(start), message
    assert fragment in message, message
    assert len(message) < 600, "a message repeats a huge value"


BAD_SPANS = {
    "negative": lambda n, d: [[d(st.integers(-(2**40), -1)), d(st.integers(0, max(n, 1))), "PERSON"]],
    "reversed": lambda n, d: [[(s := d(st.integers(0, n))), d(st.integers(-(2**40), s)), "PERSON"]],
    "out_of_range": lambda n, d: [[0, d(st.integers(n + 1, 2**70)), "GPE"]],
    "non_int": lambda n, d: [[d(st.one_of(st.floats(), st.text(max_size=3), st.booleans(), st.none(),
                                               st.lists(st.integers(), max_size=2))), 1, "ORG"]],
    "arity": lambda n, d: [d(st.lists(st.integers(0, 3), max_size=5).filter(lambda v: len(v) != 3))],
    "category": lambda n, d: [[0, 1, d(st.one_of(st.text(max_size=6), st.integers()).filter(
        lambda c: c not in ("PERSON", "GPE", "LOC", "ORG", "DATE", "NORP", "MISC", "EMAIL", "PHONE", "ID",
                            "CARD", "URL")))]],
    "item_not_list": lambda n, d: [d(JSON_VALUES.filter(lambda v: not isinstance(v, list)))],
    "not_a_list": lambda n, d: d(JSON_VALUES.filter(lambda v: v is not None and not isinstance(v, list))),
}


@st.composite
def bad_entities(draw: st.DrawFn) -> tuple[str, Any]:
    text = draw(st.sampled_from(TEXTS[:6] + ("Bob and Ann",)))
    kind = draw(st.sampled_from(sorted(BAD_SPANS) + ["overlap"]))
    if kind == "overlap":
        assume(len(text) >= 2)
        a = draw(st.integers(0, len(text) - 2))
        b = draw(st.integers(a + 1, len(text) - 1))
        c = draw(st.integers(a, b - 1))
        return text, [[a, b, "PERSON"], [c, draw(st.integers(c + 1, len(text))), "GPE"]]
    assume(kind != "out_of_range" or len(text) >= 0)
    return text, BAD_SPANS[kind](len(text), draw)


@profile("jsonl_entities")
@given(records=valid_records(entities=True), position=st.integers(0, 4), bad=bad_entities(),
       sentence_split=st.booleans())
def test_jsonl_bad_entity_spans_are_refused(work: Path, records: list[dict[str, Any]], position: int,
                                            bad: tuple[str, Any], sentence_split: bool) -> None:
    text, entities = bad
    position = min(position, len(records))
    records.insert(position, {"user": "bob", "text": text, "entities": entities})
    path = work / "bad_entities.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with pytest.raises(CorpusError) as err:
        load(path, sentence_split=sentence_split)
    message = str(err.value)
    assert message.startswith(f"{path} line {position + 1}: "), message
    assert "entit" in message and len(message) < 600, message


SPLIT_TEXT = st.lists(st.sampled_from(["Bob", "Ann", "met", "in", "Paris", ".", "!", "?", " ", "  ", "\n",
                                       "\n\n", "- ", "Dr.", "U.S.", "\u200b", "\u00a0", "\t", "No.", "10", "é"]),
                      min_size=1, max_size=14).map("".join)


@st.composite
def spans_over(draw: st.DrawFn, text: str) -> list[list[Any]]:
    """Non-overlapping, in-range spans of `text` (well-formed: the loader may still refuse one that crosses
    a sentence boundary or covers only white space)."""
    cuts = sorted(set(draw(st.lists(st.integers(0, len(text)), max_size=6))))
    spans = []
    for a, b in zip(cuts[::2], cuts[1::2]):
        if a < b:
            spans.append([a, b, draw(st.sampled_from(["PERSON", "GPE", "DATE"]))])
    return spans


@profile("jsonl_spans_split")
@given(data=st.data(), sentence_split=st.booleans())
def test_jsonl_well_formed_spans_follow_their_sentences_or_are_refused(work: Path, data: st.DataObject,
                                                                      sentence_split: bool) -> None:
    rows = []
    for _ in range(data.draw(st.integers(1, 3))):
        text = data.draw(SPLIT_TEXT)
        rows.append({"user": data.draw(USERS), "text": text, "entities": data.draw(spans_over(text))})
    path = work / "spans.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    try:
        corpus = load(path, sentence_split=sentence_split)
    except CorpusError as exc:
        message = str(exc)
        if message.startswith(f"{path} line "):
            assert "crosses a sentence boundary" in message or "covers no text" in message, message
        else:  # every text was white space
            assert message == f"{path}: the corpus is empty (no sentence was found)", message
        return
    for row in corpus.table.to_pylist():
        for g in row["gold"]:
            piece = row["text"][g["start"]:g["end"]]
            assert piece and piece == piece.strip(), (row, g)


ENCODINGS = ("latin-1", "cp1252", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-8-sig", "utf-8")


@profile("jsonl_encodings")
@given(records=valid_records(), encoding=st.sampled_from(ENCODINGS), accent=st.sampled_from("éüßÀ¿ø"),
       prefix=st.sampled_from([b"", b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\x00"]))
def test_jsonl_other_encodings_are_refused_naming_a_line(work: Path, records: list[dict[str, Any]],
                                                         encoding: str, accent: str, prefix: bytes) -> None:
    records[-1]["text"] += accent  # a character outside ASCII, written raw
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    data = prefix + text.encode(encoding, errors="replace")
    path = work / "encoding.jsonl"
    path.write_bytes(data)
    try:
        load(path)
    except CorpusError as exc:
        message = str(exc)
        assert message.startswith(f"{path} line "), message
        return
    # accepted only when it is the UTF-8 file it claims to be (one BOM at most, dropped)
    assert data.decode("utf-8-sig").lstrip("\ufeff") == text or (encoding in ("utf-8", "utf-8-sig"))


@profile("jsonl_bytes")
@given(chunks=st.lists(st.one_of(
    st.binary(max_size=60),
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.sampled_from(FIELDS + ("lable", "")), JSON_VALUES, max_size=5).map(
        lambda d: json.dumps(d, ensure_ascii=False).encode()),
    st.sampled_from([b"\n", b"\r\n", b"\r", b"\xef\xbb\xbf", b"\x00", b"{", b'"', b"\\", b"\\ud800"]),
), max_size=8))
def test_jsonl_arbitrary_bytes_load_or_name_the_file(work: Path, chunks: list[bytes]) -> None:
    data = b"".join(chunks)
    path = work / "random.jsonl"
    path.write_bytes(data)
    try:
        corpus = load(path)
    except UedpError as exc:
        message = str(exc)
        assert message.startswith(str(path)), message
        if message.startswith(f"{path} line "):
            line = int(message.split(" line ", 1)[1].split(":", 1)[0])
            assert 1 <= line <= data.count(b"\n") + 1, message
        return
    assert corpus.num_sentences >= 1


@profile("jsonl_empty")
@given(data=st.lists(st.sampled_from([b"", b"\n", b"\r\n", b" ", b"\t", b"\xef\xbb\xbf"]), max_size=6).map(
    lambda parts: b"".join(parts)))
def test_jsonl_blank_files_are_refused(work: Path, data: bytes) -> None:
    assume(b"\xef\xbb\xbf" not in data[1:])  # a BOM that does not open the file is bad JSON
    path = work / "blank.jsonl"
    path.write_bytes(data)
    with pytest.raises(CorpusError, match="no record"):
        load(path)


def test_jsonl_files_that_cannot_be_read(work: Path) -> None:
    """Missing, a directory, a FIFO (which would block a reader forever), a device, a NUL in the name."""
    fifo = work / "fifo.jsonl"
    if not fifo.exists():
        os.mkfifo(fifo)
    for path, message in [(work / "missing.jsonl", "no such file"), (work, "is a directory"),
                          (fifo, "not a regular file"), (Path("/dev/zero"), "not a regular file"),
                          (Path(f"{work}/a\x00b.jsonl"), "not a valid file name")]:
        with pytest.raises(CorpusError, match=message):
            load(path)


@st.composite
def classification_missing_label(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int]:
    records = draw(valid_records(labels=True))
    position = draw(st.integers(0, len(records)))
    records.insert(position, {"user": "bob", "text": "No label here.", **draw(st.sampled_from([{}, {"label": None}]))})
    return records, position + 1


@st.composite
def options_one_bad(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """Loader options with exactly one bad value (or an unknown option) and the name the error must give."""
    name = draw(st.sampled_from(["path", "task", "sentence_split", "seed", "split_fractions", "unknown"]))
    if name == "path":
        return {"path": draw(st.one_of(st.none(), st.integers(), st.floats(), st.just(""), st.lists(st.text())))}, \
            "path"
    if name == "task":
        return {"task": draw(JSON_VALUES.filter(lambda v: v not in ("lm", "classification")))}, "task"
    if name == "sentence_split":
        return {"sentence_split": draw(JSON_VALUES.filter(lambda v: not isinstance(v, bool)))}, "sentence_split"
    if name == "seed":
        return {"seed": draw(JSON_VALUES.filter(lambda v: isinstance(v, bool) or not isinstance(v, int)))}, "seed"
    if name == "split_fractions":
        bad = draw(st.one_of(
            st.lists(st.floats(0, 1), max_size=5).filter(lambda v: len(v) != 3),
            st.tuples(st.floats(), st.floats(), st.floats()).filter(
                lambda v: not (all(math.isfinite(x) and x >= 0 for x in v) and abs(sum(v) - 1) <= 1e-9)),
            st.tuples(st.just(math.nan), st.just(0.5), st.just(0.5)),
            JSON_SCALARS.filter(lambda v: not isinstance(v, str)),
        ))
        return {"split_fractions": bad}, "split_fractions"
    key = draw(st.text(string.ascii_lowercase + "_", min_size=1, max_size=12).filter(
        lambda k: k not in ("path", "task", "sentence_split", "seed", "split_fractions")))
    return {key: draw(JSON_VALUES)}, key


@profile("jsonl_options")
@given(case=options_one_bad(), missing=classification_missing_label())
def test_jsonl_bad_options_and_missing_labels(work: Path, case: tuple[dict[str, Any], str],
                                              missing: tuple[list[dict[str, Any]], int]) -> None:
    from uedp.data.loaders import load_corpus

    good = work / "good.jsonl"
    if not good.exists():
        good.write_text('{"user": "a", "text": "Hello Bob."}\n', encoding="utf-8")
    options, name = case
    with no_hang(), pytest.raises(ConfigError) as err:
        load_corpus("jsonl", **{"path": str(good), **options})
    assert name in str(err.value) and len(str(err.value)) < 600, str(err.value)
    records, line = missing  # task=classification needs a label on every line
    path = work / "missing_label.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with pytest.raises(CorpusError, match=rf"^{path} line {line}: field 'label' is missing"):
        load(path, task="classification")


def run_cli(argv: list[str]) -> tuple[int, str]:
    """`uedp ARGV` in this process: (exit status, stderr); argparse's own exits are caught too."""
    from uedp.cli import main

    err, out = io.StringIO(), io.StringIO()
    with no_hang(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            status = main(argv)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
    return status, err.getvalue()


@profile("jsonl_cli")
@given(case=file_with_bad_line())
def test_corpus_stats_exits_2_naming_file_and_line(work: Path, case: tuple[bytes, int, str]) -> None:
    from uedp.paths import cache_root

    path = work / "cli_bad_line.jsonl"
    start, fragment = write_case(path, case)
    corpora = cache_root() / "corpora"
    before = listing(corpora)
    status, err = run_cli(["corpus-stats", "--dataset", "jsonl", "-o", f"path={json.dumps(str(path))}"])
    assert status == 2, err
    assert err.startswith(f"uedp corpus-stats: error: {start}") and fragment in err, err
    assert "Traceback" not in err
    assert listing(corpora) == before, "a refused corpus left a file in the cache"


# ==================================================================================================
# 2. run configs: the flat dict of `flwr run`, TOML, KEY=VALUE items, Hydra
# ==================================================================================================


def _defaults() -> dict[str, Any]:
    """Every key's default, a sentinel's as its run-config number (so its type is the key's: float, int)."""
    from uedp.config import RunConfig
    from uedp.config_values import to_wire

    return {k: to_wire(k, v) for k, v in RunConfig().to_flat().items()}


DEFAULTS = _defaults()
KEYS = sorted(DEFAULTS)
FLOAT_KEYS = [k for k in KEYS if type(DEFAULTS[k]) is float]
INT_KEYS = [k for k in KEYS if type(DEFAULTS[k]) is int]
STR_KEYS = [k for k in KEYS if type(DEFAULTS[k]) is str]
BOOL_KEYS = [k for k in KEYS if type(DEFAULTS[k]) is bool]
NUMBERS = st.one_of(st.integers(-(2**80), 2**80), st.floats())
ANY_VALUE = st.one_of(NUMBERS, st.booleans(), st.text(max_size=12), st.none(), st.lists(st.integers(), max_size=2),
                      st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


def _below(x: float) -> st.SearchStrategy[float]:
    return st.one_of(st.floats(max_value=x, exclude_max=True, allow_nan=False, allow_infinity=False),
                     st.just(-math.inf))


def _int_below(x: int) -> st.SearchStrategy[int]:
    return st.integers(-(2**63), x - 1)


def _not_in(names: tuple[str, ...]) -> st.SearchStrategy[str]:
    return st.text(max_size=12).filter(lambda s: s not in names)


# key -> values of the right type that are out of range (context: other keys that make the check apply)
OUT_OF_RANGE: dict[str, tuple[st.SearchStrategy[Any], dict[str, Any]]] = {
    "privacy.q_u": (st.one_of(_below(0.0), st.floats(min_value=1.0, exclude_min=True, allow_nan=False)), {}),
    "privacy.q_e": (st.one_of(_below(0.0), st.floats(min_value=1.0, exclude_min=True, allow_nan=False)), {}),
    "privacy.q_s": (st.one_of(_below(0.0), st.floats(min_value=1.0, exclude_min=True, allow_nan=False)), {}),
    "privacy.delta": (st.one_of(st.floats(max_value=0.0, allow_nan=False), st.floats(min_value=1.0, allow_nan=False)),
                      {}),
    "privacy.m_max": (_int_below(0), {}),
    "privacy.k_cap": (_int_below(0), {}),
    "privacy.beta": (st.floats(max_value=0.0, allow_nan=False), {}),
    "privacy.w_max": (st.one_of(st.floats(max_value=0.0, allow_nan=False),
                                st.floats(min_value=1.0, exclude_min=True, allow_nan=False)), {}),
    "privacy.gamma": (_below(0.0), {}),
    "privacy.noise_multiplier": (_below(0.0), {}),
    "privacy.target_epsilon": (_below(0.0), {}),
    "privacy.seed": (_int_below(-1), {}),
    "privacy.target_on": (st.text(string.ascii_lowercase + ",", min_size=1, max_size=10).filter(
        lambda s: any(p not in ("", "uedp", "undetected") for p in s.split(","))), {}),
    "train.lr": (st.floats(max_value=0.0, allow_nan=False), {}),
    "server.lr": (st.floats(max_value=0.0, allow_nan=False), {}),
    "train.momentum": (_below(0.0), {}),
    "server.momentum": (_below(0.0), {}),
    "train.local_epochs": (_int_below(1), {}),
    "train.local_steps": (_int_below(0), {}),
    "train.batch_size": (_int_below(1), {}),
    "train.optimizer": (_not_in(("sgd", "adam")), {}),
    "server.optimizer": (_not_in(("sgd", "adam")), {}),
    "task.max_len": (_int_below(2), {}),
    "task.name": (_not_in(("next_word", "lm", "classification", "cls")), {}),
    "tokenizer.kind": (_not_in(("bpe", "wordpiece")), {}),
    "tokenizer.source": (_not_in(("public", "private_split")), {}),
    "tokenizer.vocab_size": (_int_below(1), {}),
    "strategy.name": (st.text(string.ascii_lowercase + "_+", max_size=10).filter(
        lambda s: s not in ("uedp", "uedp_split", "user_dp", "fedavg", "noiseless", "deid", "deid_dp", "dp_bart",
                            "uedp_naive")), {}),
    "strategy.estimator": (_not_in(("f_E+", "f_E")), {}),
    "entities.public": (_not_in(("none", "places_calendar")), {}),
    "federation.rounds": (_int_below(1), {}),
    "federation.eval_every": (_int_below(1), {}),
    "federation.eval_sentences": (_int_below(0), {}),
    "federation.checkpoint_every": (_int_below(1), {}),
    "federation.num_nodes": (_int_below(0), {}),
    "federation.round_timeout": (st.floats(max_value=0.0, allow_nan=False), {}),
    "federation.wait_timeout": (_below(0.0), {}),
    "federation.poll_interval": (_below(0.0), {}),
    "federation.data": (_not_in(("corpus", "owners")), {}),
    "federation.eval_data": (st.text(min_size=1, max_size=8), {}),  # only for federation.data = owners
    "dataset.options": (st.text(max_size=20).filter(lambda s: not _is_record_object(s)), {}),
    "model.options": (st.text(max_size=20).filter(lambda s: not _is_record_object(s)), {}),
    "rewrite.epsilon": (st.floats(max_value=0.0, allow_nan=False), {"strategy.name": "dp_bart"}),
    "rewrite.delta": (st.one_of(st.floats(max_value=0.0, allow_nan=False), st.floats(min_value=1.0, allow_nan=False)),
                      {"strategy.name": "dp_bart"}),
    "rewrite.variant": (_not_in(("clv", "pr", "pr+")), {"strategy.name": "dp_bart"}),
    "rewrite.noise": (_not_in(("gaussian", "laplace")), {"strategy.name": "dp_bart"}),
    "rewrite.label_epsilon": (_below(0.0), {"strategy.name": "dp_bart"}),
    "rewrite.max_documents": (_int_below(0), {"strategy.name": "dp_bart"}),
    "rewrite.epochs": (_int_below(1), {}),
}


def _wrong_type(key: str) -> st.SearchStrategy[Any]:
    kind = type(DEFAULTS[key])
    if kind is float:
        return st.one_of(st.text(max_size=6), st.booleans(), st.none(), st.lists(st.floats(), max_size=2),
                         st.just(math.nan), st.just(math.inf), st.just(-math.inf), st.integers(2**1024, 2**1100))
    if kind is int:
        return st.one_of(st.text(max_size=6), st.booleans(), st.floats(), st.none(),
                         st.integers(min_value=2**63), st.integers(max_value=-(2**63) - 1))
    if kind is bool:
        return st.one_of(st.integers(), st.floats(), st.text(max_size=6), st.none())
    return st.one_of(NUMBERS, st.booleans(), st.none(), st.lists(st.text(max_size=3), max_size=2),
                     st.integers(0xD800, 0xDFFF).map(lambda c: f"a{chr(c)}b"))  # a lone surrogate is not text


@st.composite
def one_invalid_value(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    if draw(st.booleans()):
        key = draw(st.sampled_from(sorted(OUT_OF_RANGE)))
        values, context = OUT_OF_RANGE[key]
        return {**context, key: draw(values)}, key
    key = draw(st.sampled_from(KEYS))
    from uedp.config_values import SENTINELS

    sentinel = SENTINELS.get(key)  # its None or "auto" is a valid value of the key
    wrong = _wrong_type(key) if sentinel is None else _wrong_type(key).filter(
        lambda v: not (v is None or isinstance(v, str)) or v != sentinel.value)
    return {key: draw(wrong)}, key


@profile("run_config_invalid")
@given(case=one_invalid_value())
def test_run_config_refuses_a_bad_value_naming_its_key(case: tuple[dict[str, Any], str]) -> None:
    from uedp.config import RunConfig

    flat, key = case
    with no_hang(), pytest.raises(ConfigError) as err:
        RunConfig.from_flat(flat)
    message = str(err.value)
    assert key in message, (flat, message)
    assert len(message) < 800, message


@profile("run_config_fuzz")
@given(flat=st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=16)), ANY_VALUE, max_size=4))
def test_run_config_fuzz_is_a_config_or_a_config_error(flat: dict[str, Any]) -> None:
    from uedp.config import RunConfig

    try:
        with no_hang():
            cfg = RunConfig.from_flat(flat)
    except ConfigError as exc:
        message = str(exc)
        named = {k for k in flat} | {k.partition(".")[0] for k in flat}
        assert any(n and (n in message or repr(n) in message) for n in named) or "group.option" in message, \
            (flat, message)
        return
    assert RunConfig.from_flat(cfg.to_flat()) == cfg  # what it accepted, it accepts again


TOML_VALUES = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(str), st.floats().map(repr),
    st.sampled_from(["inf", "-inf", "nan", "+nan", "true", "false", "1979-05-27", "07:32:00", "[1, 2]", "{}",
                     '""', "''", '"\\ud800"', "0x10", "1_000", "1e999", "[]", '"a" "b"', "= =", "", "\"unterminated"]),
    st.text(max_size=10).map(json.dumps),
)


@profile("run_config_toml")
@given(lines=st.lists(st.tuples(st.one_of(st.sampled_from(KEYS), st.text(string.ascii_letters + "._-", max_size=12)),
                                TOML_VALUES), max_size=4),
       as_items=st.booleans())
def test_run_config_from_toml_and_key_value_items(work: Path, lines: list[tuple[str, str]], as_items: bool) -> None:
    """A run-config TOML file as `flwr run --run-config FILE` reads it (flwr's parser), or KEY=VALUE items as
    experiments.federation reads them (uedp.commands.options.toml_value): RunConfig accepts the result or
    refuses it naming a key; a file that is not TOML is Flower's to refuse (tomllib's error names the line)."""
    from flwr.common.config import parse_config_args

    from uedp.commands.options import parse_options, toml_value
    from uedp.config import RunConfig

    with no_hang():
        if as_items:
            try:
                flat = parse_options([f"{k}={v}" for k, v in lines], value=toml_value)
            except ConfigError as exc:  # an item without KEY
                assert "KEY=VALUE" in str(exc)
                return
        else:
            path = work / "run-config.toml"
            path.write_text("".join(f"{k} = {v}\n" for k, v in lines), encoding="utf-8", errors="surrogatepass")
            try:
                flat = parse_config_args([str(path)])
            except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError):  # Flower refuses it (not ours)
                return
        try:
            RunConfig.from_flat(flat)
        except ConfigError as exc:
            message = str(exc)
            assert any(k in message or k.partition(".")[0] in message for k in flat), (flat, message)


@pytest.fixture(scope="module")
def composed() -> Any:
    """The default composition of conf/ (Hydra), composed once."""
    from hydra import compose, initialize_config_dir

    import runtime.hydra_job  # noqa: F401 - registers RunConfig's defaults in Hydra's ConfigStore

    conf = str(Path(__file__).parents[1] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        return compose(config_name="config", overrides=["federation.out_dir=x"])


HYDRA_KEYS = [k for k in KEYS if not k.endswith(".options")] + ["runner", "replicate", "dataset.options.num_users",
                                                                  "model.options.emb_dim", "nogroup.key"]


@profile("hydra")
@given(updates=st.lists(st.tuples(st.sampled_from(HYDRA_KEYS), st.one_of(
    ANY_VALUE.filter(lambda v: not (isinstance(v, float) and math.isnan(v))),
    st.sampled_from(["local", "simulation", "dp_bart", "owners", "-1", "${oops}", "???"]))), min_size=1, max_size=3),
       node=st.dictionaries(st.sampled_from(["name", "options", "estimator", "q_u", "nope"]),
                            st.one_of(ANY_VALUE, st.text(max_size=10)), max_size=3),
       group=st.sampled_from(["dataset", "model", "strategy", "privacy", "nogroup"]))
def test_hydra_compositions_are_configs_or_config_errors(composed: Any, updates: list[tuple[str, Any]],
                                                        node: dict[str, Any], group: str) -> None:
    """Values a Hydra override or a preset can put in the composed config: to_run_config returns a RunConfig
    or raises a ConfigError naming the key (run_job then records `bad_input`: exit status 2); a stored
    option (uedp.hydra_schema.group_node) is checked the same way."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from runtime.hydra_job import to_run_config
    from uedp.hydra_schema import group_node

    cfg = copy.deepcopy(composed)
    OmegaConf.set_struct(cfg, False)
    try:
        for key, value in updates:
            OmegaConf.update(cfg, key, value, force_add=True)
    except (OmegaConfBaseException, ValueError):  # not a value Hydra holds (Hydra refuses it first)
        assume(False)
    try:
        with no_hang():
            to_run_config(cfg)
    except ConfigError as exc:
        message = str(exc)
        assert any(k.partition(".")[0] in message for k, _ in updates), (updates, message)
    except OmegaConfBaseException as exc:  # an interpolation that does not resolve: Hydra's own error
        assert any(isinstance(v, str) and ("${" in v or v == "???") for _, v in updates), exc
    try:
        group_node(group, node)
    except ConfigError as exc:
        assert group in str(exc), exc


def test_a_refused_hydra_job_is_recorded_as_bad_input(composed: Any, work: Path) -> None:
    """runner=bogus, a replicate that is not a label: ConfigError (experiments.run exits 2), not ValueError."""
    from omegaconf import OmegaConf

    from runtime.hydra_job import run_job

    for key, value in (("runner", "bogus"), ("replicate", "x"), ("privacy.seed", "3")):
        cfg = copy.deepcopy(composed)
        OmegaConf.update(cfg, key, value, force_add=True)
        OmegaConf.update(cfg, "federation.out_dir", str(work / "job"), force_add=True)
        assert run_job(cfg) is None
        error = json.loads((work / "job" / "error.json").read_text())
        assert error["bad_input"] is True and error["error"].startswith("ConfigError: "), error
        assert key.partition(".")[0] in error["error"], error


# ==================================================================================================
# 3. a SuperNode's node config
# ==================================================================================================

@pytest.fixture(scope="module")
def node_setup(work: Path) -> dict[str, Any]:
    from uedp.config import RunConfig

    file = work / "owner.jsonl"
    file.write_text('{"user": "a", "text": "Hi."}\n')
    fifo = work / "node.fifo"
    os.mkfifo(fifo)
    return {"configs": {False: RunConfig(), True: RunConfig.from_nested({"federation": {"data": "owners",
                                                                                       "num_nodes": 3}})},
            "paths": {"file": str(file), "dir": str(work), "missing": str(work / "nope.jsonl"), "nul": "a\x00b",
                      "fifo": str(fifo)}}


NODE_VALUES = st.one_of(st.integers(-(2**70), 2**70), st.floats(), st.booleans(), st.text(max_size=12),
                        st.integers(-5, 50).map(str), st.sampled_from(["", " 3 ", "+2", "1e3", "0x1", "٣"]))


@profile("node_config")
@given(node_config=st.dictionaries(st.sampled_from(["partition-id", "num-partitions", "data-path", "fault",
                                                    "other"]), NODE_VALUES, max_size=4),
       owners=st.booleans(), path_kind=st.sampled_from(["none", "file", "dir", "missing", "nul", "fifo"]),
       fault=st.one_of(st.text(max_size=10), st.sampled_from(["raise", "raise:", "hang", "hang:", "hang:-1",
                                                              "hang:nan", "hang:inf", "hang:x", "hang:0"])))
def test_node_config_is_data_or_a_config_error(node_setup: dict[str, Any], node_config: dict[str, Any],
                                               owners: bool, path_kind: str, fault: str) -> None:
    from client.app import read_node_config
    from studies.fault_app import inject_fault

    cfg, paths = node_setup["configs"][owners], node_setup["paths"]
    if path_kind != "none":
        node_config["data-path"] = paths[path_kind]
    try:
        with no_hang():
            node = read_node_config(cfg, node_config)
    except ConfigError as exc:
        message = str(exc)
        assert ("data-path" in message) if owners else ("partition-id" in message or "num-partitions" in message), \
            (node_config, message)
    else:
        if owners:
            assert path_kind == "file" and node.data_path == paths["file"]
        else:
            assert isinstance(node.partition_id, int) and node.partition_id >= 0
            partitions = node_config.get("num-partitions")
            if partitions is not None:
                assert node.partition_id < int(str(partitions).strip())
    slept: list[float] = []
    with no_hang(), mock.patch("studies.fault_app.time.sleep", slept.append):
        try:
            inject_fault(fault)
        except RuntimeError as exc:
            assert fault == "raise" and "injected fault" in str(exc)
        except ConfigError as exc:
            assert "node config fault" in str(exc)
        else:
            assert fault == "" or fault.startswith("hang")
            assert slept == ([] if not fault else slept[:1]) and all(0 <= t < math.inf for t in slept)


# ==================================================================================================
# 4. `uedp rewrite`
# ==================================================================================================


class _NoRewriter(Exception):
    """Raised by the patched rewriter_for: the command got past every check (no model is loaded here)."""


@contextlib.contextmanager
def no_rewriter() -> Iterator[None]:
    with mock.patch("uedp.rewriting.rewrite.rewriter_for", side_effect=_NoRewriter):
        yield


@profile("rewrite_input")
@given(case=file_with_bad_line())
def test_rewrite_refuses_a_malformed_input_and_writes_nothing(work: Path, case: tuple[bytes, int, str]) -> None:
    data, line, fragment = case
    folder = work / "rewrite_in"
    folder.mkdir(exist_ok=True)
    inp = folder / "owner.jsonl"
    inp.write_bytes(data)
    (folder / "earlier.jsonl").write_text("written before\n")
    before = snapshot(folder)
    with no_rewriter():
        status, err = run_cli(["rewrite", "--in", str(inp), "--out", str(folder / "out.jsonl"), "--epsilon", "100"])
    assert status == 2, err
    assert err.startswith(f"uedp rewrite: error: {inp} line {line}: ") and fragment in err, err
    assert snapshot(folder) == before


def test_rewrite_checks_pass_a_good_call_and_exit_2_in_a_real_process(work: Path) -> None:
    """Control: good options and input get past every check (to the rewriter, patched out here); and the
    installed entry point, in its own process, exits 2 with one line naming file and line, no traceback."""
    import subprocess
    import sys

    folder = work / "rewrite_good"
    folder.mkdir(exist_ok=True)
    inp = folder / "owner.jsonl"
    inp.write_text('{"user": "a", "text": "I met Bob in Paris."}\n', encoding="utf-8")
    from uedp.cli import main

    with no_rewriter(), pytest.raises(_NoRewriter):
        main(["rewrite", "--in", str(inp), "--out", str(folder / "out.jsonl"), "--epsilon", "100", "--seed", "0"])
    assert snapshot(folder) == {"owner.jsonl": inp.read_bytes()}
    data = b'{"user": "a", "text": "ok"}\n{"user": "b", "text": "\xff"}\n'
    inp.write_bytes(data)
    with no_hang(60):
        proc = subprocess.run([sys.executable, "-m", "uedp.cli", "rewrite", "--in", str(inp), "--out",
                               str(folder / "out.jsonl"), "--epsilon", "100"], capture_output=True, text=True,
                              timeout=60, cwd=Path(__file__).parents[1], env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (f"uedp rewrite: error: {inp} line 2: not valid UTF-8 (byte 0xff at offset "
                           f"{data.index(0xFF)}); convert the file to UTF-8\n"), proc.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["owner.jsonl"]


OPTION_DEFAULTS = {"--epsilon": "100", "--delta": "1e-5", "--variant": "clv", "--noise": "gaussian",
                   "--label-epsilon": "0", "--max-documents": "0", "--public-for": "jsonl"}
BAD_OPTIONS = {
    "--epsilon": st.sampled_from(["abc", "nan", "inf", "-inf", "-1", "0", "", "1e999", "0x1", "1,5"]),
    "--delta": st.sampled_from(["0", "1", "-0.5", "nan", "2", "abc", "inf"]),
    "--variant": st.text(max_size=6).filter(lambda s: s not in ("clv", "pr", "pr+")),
    "--noise": st.text(max_size=8).filter(lambda s: s not in ("gaussian", "laplace")),
    "--label-epsilon": st.sampled_from(["-1", "nan", "inf", "x", "-1e-9"]),
    "--max-documents": st.one_of(st.integers(max_value=-1).map(str), st.sampled_from(["1.5", "x", "", "1e3"])),
    "--seed": st.one_of(st.integers(max_value=-1).map(str), st.sampled_from(["1.5", "x", ""])),
    "--public-for": st.sampled_from(["", "  "]),
}
OUTPUTS = ("the_input", "a_directory", "under_a_file", "meta_is_a_directory", "ok")


@profile("rewrite_options")
@given(bad=st.sampled_from(sorted(BAD_OPTIONS)), data=st.data(), output=st.sampled_from(OUTPUTS),
       drop=st.sampled_from(["", "--in", "--out", "--epsilon"]), extra=st.sampled_from([[], ["--frobnicate"]]))
def test_rewrite_refuses_bad_options_and_paths_before_any_work(work: Path, bad: str, data: st.DataObject,
                                                               output: str, drop: str, extra: list[str]) -> None:
    folder = work / "rewrite_opts"
    folder.mkdir(exist_ok=True)
    inp = folder / "owner.jsonl"
    inp.write_text('{"user": "a", "text": "I met Bob in Paris.", "label": "x"}\n', encoding="utf-8")
    (folder / "a_file").write_text("a file, not a directory\n")
    (folder / "out_dir").mkdir(exist_ok=True)
    (folder / "meta_dir.jsonl.meta.json").mkdir(exist_ok=True)
    out = {"the_input": inp, "a_directory": folder / "out_dir", "under_a_file": folder / "a_file" / "x.jsonl",
           "meta_is_a_directory": folder / "meta_dir.jsonl", "ok": folder / "rewritten.jsonl"}[output]
    options = dict(OPTION_DEFAULTS)
    if output == "ok" and not drop and not extra:  # then an option must be bad
        options[bad] = data.draw(BAD_OPTIONS[bad])
    argv = ["rewrite", "--in", str(inp), "--out", str(out)]
    for name, value in options.items():
        argv += [name, value] if not value.startswith("-") else [f"{name}={value}"]
    if drop:
        i = argv.index(drop)
        del argv[i:i + 2]
    argv += extra
    before = snapshot(folder)
    with no_rewriter():
        status, err = run_cli(argv)
    assert status == 2, (argv, err)
    assert "Traceback" not in err and ("error:" in err), err
    assert snapshot(folder) == before


# ==================================================================================================
# 5. `model.init` public-start files
# ==================================================================================================


@pytest.fixture(scope="module")
def start(work: Path) -> dict[str, Any]:
    """A tiny LSTM, two tokenizers and a valid public-start file for the first."""
    import torch

    from uedp.config import RunConfig
    from uedp.models.public_start import save_public_start
    from uedp.pipeline import ModelShape, new_model
    from uedp.tokenization import TokenizerTraining, train_tokenizer

    torch.manual_seed(0)
    texts = [f"Bob met Ann {i} times in Paris." for i in range(50)]
    tokenizer = train_tokenizer(texts, TokenizerTraining(vocab_size=300, min_frequency=1))
    other = train_tokenizer([t.upper() + " zq" for t in texts], TokenizerTraining(vocab_size=300, min_frequency=1))
    cfg = RunConfig.from_nested({"model": {"options": {"emb_dim": 8, "hidden_dim": 8}}})
    options = cfg.model.option_dict()

    def model():
        return new_model(cfg, ModelShape(tokenizer.vocab_size, tokenizer.pad_id, None))

    path = work / "start.pt"
    save_public_start(path, model(), model_name="lstm", model_options=options, tokenizer=tokenizer,
                      corpus="synthetic-public", details={"epochs": 1})
    return {"path": path, "bytes": path.read_bytes(), "model": model, "tokenizer": tokenizer, "other": other,
            "options": options, "blob": torch.load(path, weights_only=True)}


def _mutated_blob(draw: st.DrawFn, blob: dict[str, Any]) -> dict[str, Any] | Any:
    import torch

    kind = draw(st.sampled_from(["format", "model", "options", "tokenizer", "drop", "state_key", "state_extra",
                                 "state_shape", "state_value", "state_type", "state_nan", "not_a_dict"]))
    new = dict(blob)
    state = dict(blob["state_dict"])
    name = draw(st.sampled_from(sorted(state)))
    if kind in ("format", "model", "options", "tokenizer"):
        new[kind] = draw(st.one_of(JSON_VALUES, st.just(torch.zeros(3)), st.just(torch.tensor(1.0))).filter(
            lambda v: not (isinstance(v, type(blob[kind])) and v == blob[kind])))
    elif kind == "drop":
        del new[draw(st.sampled_from(["format", "model", "options", "tokenizer", "state_dict"]))]
    elif kind == "state_key":
        del state[name]
    elif kind == "state_extra":
        state[draw(st.text(max_size=8).filter(lambda k: k not in state))] = torch.zeros(2)
    elif kind == "state_shape":
        shape = draw(st.lists(st.integers(0, 4), max_size=3).filter(lambda s: tuple(s) != tuple(state[name].shape)))
        state[name] = torch.zeros(shape)
    elif kind == "state_value":
        state[name] = draw(st.one_of(JSON_SCALARS, st.lists(st.floats(), max_size=3)))
    elif kind == "state_type":
        state[name] = torch.zeros(state[name].shape, dtype=draw(st.sampled_from(
            [torch.int64, torch.bool, torch.complex64, torch.uint8])))
    elif kind == "state_nan":
        t = state[name].clone()
        assume(t.numel() > 0)
        t.view(-1)[draw(st.integers(0, t.numel() - 1))] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
        state[name] = t
    else:
        return draw(st.one_of(JSON_VALUES.filter(lambda v: not isinstance(v, dict)), st.just(torch.zeros(2)),
                              st.just([blob])))
    if kind.startswith("state"):
        new["state_dict"] = state
    return new


@profile("model_init")
@given(data=st.data(), kind=st.sampled_from(["random_bytes", "truncated", "flipped", "mutated", "other_tokenizer",
                                             "other_model", "empty"]))
def test_model_init_refuses_a_bad_file_and_leaves_the_model_unchanged(work: Path, start: dict[str, Any],
                                                                      data: st.DataObject, kind: str) -> None:
    import torch

    from uedp.models.public_start import load_public_start

    path = work / "init.pt"
    good = start["bytes"]
    tokenizer, name, options = start["tokenizer"], "lstm", start["options"]
    expect_refusal = True
    if kind == "random_bytes":
        path.write_bytes(data.draw(st.binary(max_size=400)))
    elif kind == "truncated":
        path.write_bytes(good[: data.draw(st.integers(0, len(good) - 1))])
    elif kind == "flipped":  # may still be a valid file (a flipped weight): refused or loaded, never a crash
        i = data.draw(st.integers(0, len(good) - 1))
        path.write_bytes(good[:i] + bytes([good[i] ^ data.draw(st.integers(1, 255))]) + good[i + 1:])
        expect_refusal = False
    elif kind == "mutated":
        torch.save(_mutated_blob(data.draw, start["blob"]), path)
    elif kind == "other_tokenizer":
        path.write_bytes(good)
        tokenizer = start["other"]
    elif kind == "other_model":
        path.write_bytes(good)
        name, options = data.draw(st.sampled_from([("gpt2", options), ("lstm", {**options, "hidden_dim": 9}),
                                                   ("lstm", {}), ("lstm", {**options, "emb_dim": 8.0 + 1})]))
    else:
        path.write_bytes(b"")
    model = start["model"]()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        with no_hang():
            load_public_start(path, model, model_name=name, model_options=options, tokenizer=tokenizer)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith(f"model.init {path}: "), message
        assert len(message) < 1500, message
        after = model.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before), "a refused file changed the model"
        return
    assert not expect_refusal, f"{kind}: a bad public-start file was accepted"
    assert all(bool(torch.isfinite(v).all()) for v in model.state_dict().values() if v.is_floating_point())


@profile("pretraining")
@given(content=st.one_of(st.binary(max_size=200), st.lists(st.sampled_from(["", " ", "\t", "x", "Bob met Ann.",
                                                                            "\r"]), max_size=4).map(
    lambda lines: "\n".join(lines).encode())),
       settings_=st.fixed_dictionaries({"epochs": st.one_of(st.integers(-3, 3), st.floats(), st.booleans()),
                                        "lr": st.one_of(st.floats(), st.integers(-2, 2)),
                                        "batch_size": st.one_of(st.integers(-3, 3), st.floats())}))
def test_pretraining_refuses_a_bad_public_text_or_settings(work: Path, content: bytes,
                                                           settings_: dict[str, Any]) -> None:
    """`python -m experiments.pretrain --public FILE`: a file that is not UTF-8 text, too little text (one
    sentence is held out: none would be left to train on), or bad --epochs / --lr / --batch-size are refused
    (ConfigError or CorpusError naming them) before any training."""
    from uedp.config import RunConfig
    from uedp.pipeline import pretrain_run
    from uedp.pretraining import pretrain, public_text

    path = work / "public.txt"
    path.write_bytes(content)
    with no_hang():
        try:
            texts, _ = public_text(str(path), public_users=10)
        except CorpusError as exc:
            assert str(path) in str(exc) and "UTF-8" in str(exc), exc
            return
        good = (isinstance(settings_["epochs"], int) and not isinstance(settings_["epochs"], bool)
                and settings_["epochs"] >= 1 and not isinstance(settings_["lr"], bool)
                and 0 < settings_["lr"] < math.inf and isinstance(settings_["batch_size"], int)
                and settings_["batch_size"] >= 1)
        assume(not (good and sum(1 for t in texts if t.strip()) >= 2))  # only bad inputs here (no training)
        with pytest.raises(ConfigError) as err:
            pretrain(pretrain_run(RunConfig()), texts, **settings_)
    assert any(w in str(err.value) for w in ("--epochs", "--lr", "--batch-size", "public text")), err.value
