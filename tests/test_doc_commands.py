"""Every `python -m experiments.X` and `uedp SUB` command that README.md or docs/*.md cite still parses,
fast and offline:

- found in fenced shell blocks (each line, backslash continuations joined; `$ ` lines of unlabelled and
  console blocks) and in inline code spans (a span may wrap over the lines of its paragraph); every
  occurrence of the program in a line or span starts a command, so `A && B`, `VAR=1 B` and
  `ray_cluster ... -- B` give B too;
  a trailing comment, and a pipe, redirection or `&&`/`;` and what follows, are cut off;
- placeholders: optional `[...]` groups of a synopsis are dropped; a `...` word marks an elision (then a
  "required argument missing" error is allowed, every other parse error still fails); `HOST...` is HOST;
  an UPPERCASE word (FIGURE, RUN_DIR, HEAD_IP, D) or `<name>` is replaced from PLACEHOLDERS; a command that
  still cannot be made runnable must be listed in ALLOWED_UNPARSED with the reason (and a stale entry fails);
- an inline span of the bare program (`uedp rewrite`, `python -m experiments.figures`) names the command
  rather than running it: it is checked with `--help` (the module or sub-command exists);
- argparse commands (experiments.*, `uedp`): the module's real `main(argv)` runs with argparse stopped right
  after the outermost parse (nested sub-parsers included), so the real argv meets the real parser and
  nothing else runs; a parse error fails naming the doc file, line and command. `experiments.figures` is
  also really run with `--dry-run` (its job list and overrides are built); one figure target really runs
  at a tiny size in tests/test_figures.py::test_qs_figure_end_to_end (e2e tier). `uedp epsilon` with its
  arguments (a `--holders` list at its first K) and `uedp --version` really run;
- `experiments.run` (Hydra): its overrides (`-m` dropped; a sweep's first value: `a,b` -> a, `choice(a,b)`
  -> a) are composed from conf/ (tests/helpers.py compose_run_config) into a RunConfig, so an unknown key,
  a bad group option or a bad value fails.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

from tests.test_docs import FENCE, SHELL_INFO, _split_comment, blocks, doc_files

ROOT = Path(__file__).resolve().parents[1]

# An UPPERCASE placeholder word (not part of a longer word or path component) or <name>.
PLACEHOLDER = re.compile(r"(?<![\w.-])[A-Z][A-Z0-9_]*(?![\w-])|<[\w-]+>")
# Concrete values for the placeholders the docs use (a word missing here fails the command; an unused
# entry fails test_tables_are_current).
PLACEHOLDERS = {
    "FIGURE": "qs",  # experiments.figures FIGURE
    "RUN_DIR": "outputs/run",  # experiments.entity_perplexity RUN_DIR
    "OUT": "outputs/out",  # experiments.tls OUT HOST..., --report OUT.json
    "HOST": "127.0.0.1",
    "HEAD_IP": "127.0.0.1",  # federation.ray_address=HEAD_IP:6379
    "ADDRESS": "127.0.0.1:6379",  # replaced by experiments.ray_cluster
    "KEY": "owner",  # uedp fingerprint KEY.pub
    "NAME": "synthetic",  # uedp corpus-stats --dataset NAME
    "D": "spacy+rules",  # --detector D, entities.detector=D
    "S": "fedavg",  # strategy=S
    "<name>": "uedp",  # strategy=<name>, outputs/tuning/<name>
    "<date>": "2026-01-01",  # multirun/<date>
    "K": "2",  # uedp epsilon ... --holders K
}
# Cited commands that are not runnable as written, and why. Every key must still be cited.
ALLOWED_UNPARSED = {
    "python -m experiments.X": "the naming pattern of the thin commands, not a command",
    "uedp epsilon --json": "names the flag (docs/architecture.md: summary.json's keys and the --json output's)",
    "uedp epsilon --num-users": "names the flag that gives the accountant N (docs/proofs.md)",
}

PROGRAM = re.compile(r"(?<![\w./=:,-])(?:\.venv/bin/)?"
                     r"(?:python -m (?P<module>experiments\.\w+)(?=\s|$)|uedp(?=\s+[\w-]))")
CUT = {"|", "||", "&&", "&", ";", ">", ">>", "<", "2>", "2>&1", ">&"}
CODE_SPAN = re.compile(r"(?<!`)`((?:[^`\n]|\n(?![ \t]*\n))+)`(?!`)")  # within a paragraph


@dataclass(frozen=True)
class Cited:
    file: str  # relative to the repository root
    line: int
    text: str  # as cited, from the program to the end of the command
    program: str  # "uedp" or "experiments.NAME"
    words: tuple[str, ...]  # the arguments as cited (after the program)
    inline: bool  # in a code span (else a fenced block)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def _commands_in(text: str, file: str, line: int, inline: bool) -> list[Cited]:
    out = []
    for m in PROGRAM.finditer(text):
        rest = re.sub(r"<([\w-]+)>", r"__LT__\1__GT__", text[m.end():])  # <name> is a placeholder
        try:
            lexer = shlex.shlex(rest, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            words = list(lexer)
        except ValueError:  # an unbalanced quote: the words as they are
            words = rest.split()
        for i, w in enumerate(words):
            if w in CUT or (w and set(w) <= set("|&;<>")):
                words = words[:i]
                break
        words = [w.replace("__LT__", "<").replace("__GT__", ">") for w in words]
        program = m.group("module") or "uedp"
        cited = " ".join([m.group(0).removeprefix(".venv/bin/"), *words]).strip()
        out.append(Cited(file, line, cited, program, tuple(words), inline))
    return out


def _drop_optional_groups(text: str) -> str:
    """A synopsis's optional `[--flag X]` groups and optional `name[-suffix]` parts removed (innermost first)."""
    prev = None
    while prev != text:
        prev, text = text, re.sub(r"(?:^|(?<=\s))\[[^\[\]`]*\]|\[-[^\[\]\s`]*\]", "", text)
    return text


def extract(text: str, file: str = "doc.md") -> list[Cited]:
    """Every command citing `python -m experiments.X` or `uedp` in a Markdown text."""
    out = []
    lines = text.split("\n")
    fenced = [False] * len(lines)
    for info, start, body, _ in blocks(text):
        for k in range(start - 1, min(start + len(body) + 1, len(lines))):
            fenced[k] = True
        if info not in SHELL_INFO and info not in ("", "text"):
            continue
        joined: list[tuple[int, str]] = []
        for k, raw in enumerate(body):
            if joined and joined[-1][1].endswith("\\"):
                joined[-1] = (joined[-1][0], joined[-1][1][:-1].rstrip() + " " + raw.strip())
            else:
                joined.append((start + 1 + k, raw))
        for line_no, raw in joined:
            line = raw.strip()
            if line.startswith("$ "):
                line = line[2:]
            elif info not in SHELL_INFO:  # an unlabelled block: commands only after a prompt
                continue
            command, _ = _split_comment(line)
            out += _commands_in(_drop_optional_groups(command), file, line_no, inline=False)
    prose = "\n".join("" if f or FENCE.match(ln) else ln for ln, f in zip(lines, fenced, strict=True))
    for m in CODE_SPAN.finditer(prose):
        span = " ".join(m.group(1).split())
        line_no = prose.count("\n", 0, m.start()) + 1
        out += _commands_in(_drop_optional_groups(span), file, line_no, inline=True)
    return sorted(out, key=lambda c: c.line)


def cited_commands() -> list[Cited]:
    return [c for p in doc_files() for c in extract(p.read_text(), p.relative_to(ROOT).as_posix())]


# --- from cited words to a runnable argv ------------------------------------------------------------------


@dataclass(frozen=True)
class Argv:
    argv: list[str]
    elided: bool  # a `...` word: required arguments may be left out
    mention: bool  # an inline span of the bare program: it names the command


def runnable(c: Cited) -> Argv | str:
    """The argv to check, or why there is none."""
    argv, elided = [], False
    for w in c.words:
        if w in ("...", "…"):
            elided = True
            continue
        if "[" in w or "]" in w:
            return f"an unclosed optional group in {w!r}"
        w = w.removesuffix("...")
        unknown = [p for p in PLACEHOLDER.findall(w) if p not in PLACEHOLDERS]
        if unknown:
            return f"placeholder {unknown[0]!r} has no value in PLACEHOLDERS"
        argv.append(PLACEHOLDER.sub(lambda m: PLACEHOLDERS[m.group(0)], w))
    mention = c.inline and len(c.words) <= (1 if c.program == "uedp" else 0)  # the program (and sub-command)
    return Argv(argv, elided, mention)


# --- parsing with argparse stopped right after the parse --------------------------------------------------


class _Parsed(Exception):
    def __init__(self, namespace: argparse.Namespace) -> None:
        super().__init__("parsed")
        self.namespace = namespace


class _ParseError(Exception):
    pass


@contextlib.contextmanager
def parse_only() -> Iterator[None]:
    """argparse parses for real; the outermost parse_args / parse_known_args then raises _Parsed (nothing after
    it runs), an error raises _ParseError with argparse's message."""
    real_args, real_known = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args
    depth = 0

    def wrap(real):
        def parse(self, *args, **kwargs):
            nonlocal depth
            depth += 1
            try:
                result = real(self, *args, **kwargs)
            finally:
                depth -= 1
            if depth == 0:
                raise _Parsed(result[0] if isinstance(result, tuple) else result)
            return result
        return parse

    def error(self, message):
        raise _ParseError(f"{self.prog}: {message}")

    with mock.patch.object(argparse.ArgumentParser, "parse_args", wrap(real_args)), \
            mock.patch.object(argparse.ArgumentParser, "parse_known_args", wrap(real_known)), \
            mock.patch.object(argparse.ArgumentParser, "error", error):
        yield


def parse_problem(main, argv: list[str], elided: bool = False) -> str | None:
    """Why main(argv) does not parse (None: it parses, or --help / --version exits 0)."""
    try:
        with parse_only(), contextlib.redirect_stdout(io.StringIO()):
            main(argv)
    except _Parsed:
        return None
    except _ParseError as exc:
        if elided and "the following arguments are required" in str(exc):
            return None
        return str(exc)
    except SystemExit as exc:
        return None if exc.code in (0, None) else f"exit status {exc.code}"
    return "main() returned without parsing its arguments"


def hydra_overrides(argv: list[str]) -> list[str]:
    """`experiments.run` words as compose() overrides: -m dropped, a sweep's first value."""
    out = []
    for w in argv:
        if w in ("-m", "--multirun"):
            continue
        key, eq, value = w.partition("=")
        if eq and not key.startswith("hydra"):
            if m := re.fullmatch(r"choice\(([^,)]*)[,)].*", value):
                value = m.group(1)
            elif "," in value and not re.search(r"[\[\]{}()'\"]", value):
                value = value.split(",")[0]
            w = f"{key}={value}"
        out.append(w)
    return out


_CHECKED: dict[tuple, str | None] = {}  # a command cited twice is checked once per process


def check(c: Cited, tmp_path: Path) -> str | None:
    """Why the cited command is broken (None: it is fine)."""
    how = runnable(c)
    if isinstance(how, str):
        return how
    key = (c.program, tuple(how.argv), how.elided, how.mention)
    if key not in _CHECKED:
        _CHECKED[key] = _check(c.program, how, tmp_path)
    return _CHECKED[key]


def _check(program: str, how: Argv, tmp_path: Path) -> str | None:
    argv = how.argv
    if program == "experiments.run":
        from tests.helpers import compose_run_config

        try:
            compose_run_config(hydra_overrides(argv))
        except Exception as exc:  # noqa: BLE001 - Hydra's and RunConfig's errors alike
            if "federation.device=cuda" in argv and "has no CUDA" in str(exc):
                return None  # a valid value that this machine's torch refuses (the doc marks it: not run by CI)
            return f"{type(exc).__name__}: {exc}".split("\n")[0]
        return None
    if program == "uedp":
        from uedp import cli

        if how.mention:
            return parse_problem(cli.main, argv + ["--help"])
        problem = parse_problem(cli.main, argv, how.elided)
        if problem is None and (argv == ["--version"] or (argv[:1] == ["epsilon"] and not how.elided)):
            err = io.StringIO()  # really run (2-5 s each): values the parser cannot check, e.g. m_max against N
            run = list(argv)
            if "--holders" in run:  # a list of K runs at its first K (K = 85 takes minutes; tests/test_holders.py)
                i = run.index("--holders") + 1
                run[i] = run[i].split(",")[0]
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                    rc = cli.main(run)
            except SystemExit as exc:
                rc = exc.code
            if rc not in (0, None):
                problem = f"exit status {rc}: {err.getvalue().strip()}"
        return problem
    try:
        module = importlib.import_module(program)
    except ModuleNotFoundError as exc:
        return f"no module {exc.name}"
    problem = parse_problem(module.main, argv + ["--help"] if how.mention else argv, how.elided)
    if problem is None and program == "experiments.figures" and not how.mention:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = module.main([*argv, "--dry-run", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
        if rc != 0 or "experiments.run" not in out.getvalue():
            return f"--dry-run exited {rc} without a job list"
    return problem


# --- tests ------------------------------------------------------------------------------------------------

CITED = cited_commands()


def test_the_docs_cite_commands():
    files = {c.file for c in CITED}
    assert len(CITED) >= 100 and {"README.md", "docs/results.md", "docs/deployment.md"} <= files
    assert {c.program for c in CITED} >= {"uedp", "experiments.run", "experiments.figures", "experiments.audit"}


@pytest.mark.parametrize("cited", CITED, ids=lambda c: f"{c.file}:{c.line}")
def test_cited_command_parses(cited, tmp_path):
    if cited.text in ALLOWED_UNPARSED:
        return
    problem = check(cited, tmp_path)
    assert problem is None, f"{cited.where}\n  -> {problem}"


def test_tables_are_current(tmp_path):
    used = {p for c in CITED for w in c.words for p in PLACEHOLDER.findall(w.removesuffix("..."))}
    assert [p for p in PLACEHOLDERS if p not in used] == [], "PLACEHOLDERS has a value no cited command needs"
    texts = {c.text for c in CITED}
    assert [t for t in ALLOWED_UNPARSED if t not in texts] == [], "ALLOWED_UNPARSED lists a command no doc cites"
    fixed = [t for t in ALLOWED_UNPARSED if check(next(c for c in CITED if c.text == t), tmp_path) is None]
    assert fixed == [], "ALLOWED_UNPARSED lists a command that runs now"


def test_extractor_finds_commands_and_reports_a_broken_one(tmp_path):
    text = ("Intro `uedp epsilon` and `HF_HUB_OFFLINE=1 python -m experiments.figures qs\n--reps 1` done.\n\n"
            "```bash\n.venv/bin/python -m experiments.run -m strategy=uedp,fedavg \\\n    federation.rounds=2"
            "   # a sweep\nmake x && .venv/bin/uedp fingerprint a.pub --no-such-flag | tail -3 > out.txt\n"
            "python -m experiments.figures FIGURE --reps 1 [--workers 2]\npython -m experiments.tls OUT HOST...\n"
            "python -m experiments.figures NOT_A_PLACEHOLDER\n```\n\n```\n$ uedp fingerprint KEY.pub ...\n"
            "uedp output line\n```\n\n```python\nuedp epsilon --nothing\n```\n")
    got = extract(text)
    assert [(c.line, c.text, c.inline) for c in got] == [
        (1, "uedp epsilon", True),
        (1, "python -m experiments.figures qs --reps 1", True),
        (5, "python -m experiments.run -m strategy=uedp,fedavg federation.rounds=2", False),
        (7, "uedp fingerprint a.pub --no-such-flag", False),
        (8, "python -m experiments.figures FIGURE --reps 1", False),
        (9, "python -m experiments.tls OUT HOST...", False),
        (10, "python -m experiments.figures NOT_A_PLACEHOLDER", False),
        (14, "uedp fingerprint KEY.pub ...", False),
    ]
    problems = [check(c, tmp_path) for c in got]
    assert problems[:2] == [None, None]
    assert problems[2] is None and hydra_overrides(["-m", "strategy=uedp,fedavg"]) == ["strategy=uedp"]
    assert "unrecognized arguments: --no-such-flag" in problems[3]
    assert problems[4:6] == [None, None]  # FIGURE -> qs (and its dry run); OUT, HOST from PLACEHOLDERS
    assert "NOT_A_PLACEHOLDER" in problems[6]
    assert problems[7] is None  # elided: the missing --q-u etc. may be in the `...`
    def made_up(program: str, words: str) -> str | None:
        return check(Cited("x.md", 1, words, program, tuple(words.split()), False), tmp_path)

    assert "required" in made_up("uedp", "epsilon --q-u 0.5")  # not elided
    assert "no_such_key" in made_up("experiments.run", "privacy.no_such_key=1")
    assert made_up("experiments.run", "strategy=no_such_strategy") is not None
    assert "no_such_launcher" in made_up("experiments.run", "-m hydra/launcher=no_such_launcher")
    assert made_up("experiments.run", "privacy.q_u=two") is not None
    # really run: --rounds 0 parses, and is refused
    assert made_up("uedp", "epsilon --q-u 0.5 --q-e 0.5 --q-s 0.5 --noise-multiplier 1 --rounds 0 --num-users 10") \
        .startswith("exit status 2: uedp epsilon: error: --rounds")
    assert "no module" in made_up("experiments.nowhere", "")
    assert "unrecognized arguments" in made_up("experiments.audit", "--no-such-flag")
    assert "invalid" in made_up("experiments.audit", "local --claims x")  # a nested parser's error
    assert "invalid choice" in made_up("experiments.figures", "no-such-figure")
