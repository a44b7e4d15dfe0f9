"""The README and docs/ hold together, fast and offline:

(a) every relative Markdown link in README.md and docs/*.md resolves: the file exists and a `#anchor` is
    a heading of the target under GitHub's slug rule (lowercase, punctuation other than - and _ dropped,
    spaces to -, a repeated slug gets -1, -2, ...);
(b) every place that names a section of README.md or of a docs page (`README, "Section"`, `README's
    "Section"`, `README section "Section"`, `(README: Section)`, `docs/page.md, "Section"`, and in docs/
    `page.md, "Section"`) in the repository's .py files, conf/, Makefile, .ci/, pyproject.toml, the
    shell scripts, README.md and docs/*.md names a heading that exists in that file;
(c) every command line of every shell block of README.md is run by a test or CI, as recorded below and
    checked against the runner's source (RUN_BY, BLOCKS_RUN_BY), or is marked `# not run by CI...` on its
    line, or by a comment line with that mark earlier in its block.
Each check has a self-check that it catches a made-up broken case.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SKIP_DIRS = {".git", ".venv", "outputs", "multirun", "node_modules", "__pycache__", "uedp.egg-info", ".flwr"}
NOT_RUN = "not run by CI"

# (c) README commands that a test or CI runs, and what runs them (each checked in test_run_by_is_true).
RUN_BY = {
    "make test": ".ci/run",  # .ci/run: make test-all, whose prerequisites are test and test-e2e
    "make test-all": ".ci/run",
    ".venv/bin/uedp epsilon --q-u 0.25 --q-e 0.2 --q-s 0.2 --target-epsilon 8 --k-cap 1 --beta 0.2 --rounds 30 "
    "--num-users 200 --json": "tests/test_fingerprint.py::test_results_match_the_committed_fingerprint",
}
# (c) README blocks run line by line by a test that finds the block by the HTML comment just before it.
BLOCKS_RUN_BY = {
    "<!-- own-corpus-commands -->": "tests/test_own_corpus.py::test_own_corpus_commands_run_as_written",
}
SHELL_INFO = {"bash", "sh", "shell", "console", "zsh"}


# --- Markdown ---------------------------------------------------------------------------------------------

FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")


def blocks(text: str) -> list[tuple[str, int, list[str], str]]:
    """Fenced blocks: (info string, first line number, lines, the text before the block)."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, start, body = m.group(1), m.group(2).lower(), i, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        out.append((info, start + 1, body, "\n".join(lines[:start])))
        i += 1
    return out


def prose(text: str) -> str:
    """The text with every fenced block blanked (line numbers kept)."""
    lines, out, fence = text.split("\n"), [], None
    for line in lines:
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            out.append("")
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def plain(heading: str) -> str:
    """A heading's visible text: code spans, emphasis and links reduced to their text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"`([^`]*)`", r"\1", text)
    text = re.sub(r"(\*\*|__|\*|(?<!\w)_(?=\S)|(?<=\S)_(?!\w))", "", text)
    return re.sub(r"<[^>]+>", "", text).strip()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (before the -1, -2 suffixes of repeats)."""
    text = plain(heading).lower()
    text = "".join(c for c in text if c.isalnum() or c in "-_ ")
    return text.replace(" ", "-")


def headings(path: Path) -> list[str]:
    return [m.group(2).strip() for m in re.finditer(r"^(#{1,6})\s+(.+?)\s*#*\s*$", prose(path.read_text()), re.M)]


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for h in headings(path):
        s = slug(h)
        n = seen.get(s, 0)
        out.add(s if n == 0 else f"{s}-{n}")
        seen[s] = n + 1
    text = path.read_text()
    out |= set(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))
    return out


LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(text: str) -> list[str]:
    """Link targets of the text outside fenced blocks and code spans."""
    body = re.sub(r"`[^`\n]*(?:\n[^`\n]*)?`", "``", prose(text))
    return [m.group(2) for m in LINK.finditer(body)]


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    out = []
    for target in links(path.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            out.append(f"{path.relative_to(root)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{path.relative_to(root)}: {target} (no heading with anchor #{anchor} in {dest.name})")
    return out


def doc_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


# --- (b) references to named sections ---------------------------------------------------------------------

_DOC = r"(?<![\w/.-])(?P<file>README(?:\.md)?|docs/[\w.-]+\.md|[\w-]+\.md)"  # not a path into another folder
SECTION_REF = [
    re.compile(_DOC + r"(?:'s)?[,:]?\s+(?:section\s+)?\"(?P<name>[^\"\n]{2,100}?)\""),
    re.compile(r"\((?P<file>README(?:\.md)?):\s+(?P<name>[^)\"]{2,100})\)"),
]


def _flatten(text: str) -> str:
    """Line breaks (with a comment's `#` or a docstring's indentation) as single spaces, so that a reference
    wrapped over two lines is one."""
    return re.sub(r"[ \t]*\n[ \t]*(?:#+[ \t]+)?", " ", text)


def section_refs(text: str, where: Path | None = None) -> list[tuple[Path, str]]:
    """(file, section name) of every reference to a named section in `text` (found in file `where`)."""
    out = []
    flat = _flatten(text)
    for pattern in SECTION_REF:
        for m in pattern.finditer(flat):
            name, file = " ".join(m.group("name").split()), m.group("file")
            if file.startswith("README"):
                target = README
            elif file.startswith("docs/"):
                target = ROOT / file
            elif where is not None and where.parent == DOCS:
                target = DOCS / file  # a docs page naming a sibling page
            else:
                continue
            out.append((target, name))
    return out


def stale(refs: list[tuple[Path, str]]) -> list[str]:
    out = []
    for target, name in refs:
        names = {plain(h).casefold() for h in headings(target)} if target.is_file() else set()
        if plain(name).casefold() not in names:
            what = "no such file" if not target.is_file() else "no such heading"
            out.append(f'{target.relative_to(ROOT)}, "{name}" ({what})')
    return out


def scanned_files() -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not (d.startswith(".") and d != ".ci")]
        here = Path(dirpath)
        for f in filenames:
            p = here / f
            rel = p.relative_to(ROOT)
            if p.suffix in (".py", ".sh") or rel.parts[0] in ("conf", ".ci") \
                    or rel.as_posix() in ("Makefile", "pyproject.toml", "README.md") \
                    or (rel.parts[0] == "docs" and p.suffix == ".md" and len(rel.parts) == 2):
                out.append(p)
    return sorted(p for p in out if p != Path(__file__).resolve())


# --- (c) commands of the README's shell blocks ------------------------------------------------------------


def _split_comment(line: str) -> tuple[str, str]:
    """(command, trailing comment) of a shell line: the first # outside quotes that starts a word."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def readme_commands(text: str) -> list[tuple[str, str]]:
    """(command, how it is covered) for every command line of every shell block: `run by: ...` or
    `not run: ...`, or `UNCOVERED`."""
    out = []
    for info, line_no, body, before in blocks(text):
        if info not in SHELL_INFO:
            continue
        marker = next((m for m in BLOCKS_RUN_BY if before.rstrip().endswith(m)), None)
        block_note = None
        joined: list[str] = []
        for raw in body:
            if joined and joined[-1].endswith("\\"):
                joined[-1] = joined[-1][:-1].rstrip() + " " + raw.strip()
            else:
                joined.append(raw)
        for line in joined:
            command, comment = _split_comment(line.strip())
            if not command:
                if NOT_RUN in comment:
                    block_note = comment
                continue
            command = " ".join(command.split())
            if NOT_RUN in comment:
                out.append((command, f"not run: {comment}"))
            elif block_note:
                out.append((command, f"not run: {block_note}"))
            elif marker:
                out.append((command, f"run by: {BLOCKS_RUN_BY[marker]}"))
            elif command in RUN_BY:
                out.append((command, f"run by: {RUN_BY[command]}"))
            else:
                out.append((command, f"UNCOVERED (block at README line {line_no})"))
    return out


def _make_reaches(target: str) -> set[str]:
    """The Makefile targets that `make target` runs (itself and its prerequisites, transitively)."""
    rules = {}
    for m in re.finditer(r"^([\w.-]+):([^=\n]*)$", (ROOT / "Makefile").read_text(), re.M):
        rules[m.group(1)] = m.group(2).split()
    seen, todo = set(), [target]
    while todo:
        t = todo.pop()
        if t not in seen and t in rules:
            seen.add(t)
            todo += rules[t]
    return seen


def _string_sequences(path: Path) -> list[list[str]]:
    """The string constants of every list or tuple literal in a Python file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.List, ast.Tuple)):
            out.append([e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)])
    return out


def runner_problem(command: str, runner: str, marker: str | None = None) -> str | None:
    """Why `runner` does not run `command` (None: it does)."""
    if runner == ".ci/run":
        words = command.split()
        if words[0] != "make" or len(words) != 2:
            return f"{command!r}: .ci/run runs only make targets"
        ci_targets = re.findall(r"^\s*make\s+([\w-]+)\s*$", (ROOT / ".ci" / "run").read_text(), re.M)
        if not any(words[1] in _make_reaches(t) for t in ci_targets):
            return f"{command!r}: no `make` line of .ci/run reaches target {words[1]}"
        return None
    file, _, func = runner.partition("::")
    path = ROOT / file
    if not path.is_file() or not re.search(rf"^def {re.escape(func)}\(", path.read_text(), re.M):
        return f"{command!r}: no test {runner}"
    source = path.read_text()
    if marker is not None:  # the test reads the block after this marker from README.md
        return None if marker in source and "README.md" in source else f"{runner} does not read the block {marker}"
    argv = shlex.split(command)
    program, args = argv[0], argv[1:]
    if program.endswith("/uedp") or program == "uedp":  # the console script: uedp.cli:main
        if 'uedp = "uedp.cli:main"' not in (ROOT / "pyproject.toml").read_text() or "cli.main(" not in source:
            return f"{runner} does not call uedp.cli.main, the `uedp` script"
    elif argv[1:2] == ["-m"]:
        args = argv[3:]
        if argv[2] not in source:
            return f"{runner} does not name the module {argv[2]}"
    if not any(seq[i:i + len(args)] == args for seq in _string_sequences(path) for i in range(len(seq) + 1)):
        return f"{runner} has no list of the arguments {args}"
    return None


# --- tests ------------------------------------------------------------------------------------------------


def test_slug_follows_github():
    assert slug("Set-up: two commands") == "set-up-two-commands"
    assert slug("Data owners' own files") == "data-owners-own-files"
    assert slug("The `uedp epsilon` command") == "the-uedp-epsilon-command"
    assert slug("Loaders conll2003 and ag_news") == "loaders-conll2003-and-ag_news"
    assert slug("7. Scale, public starts and what limits UeDP (5,000 users)") == \
        "7-scale-public-starts-and-what-limits-uedp-5000-users"
    assert slug("**Bold** and [a link](x.md)") == "bold-and-a-link"


def test_link_check_catches_a_broken_link_and_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n\n## Same\n\n## Same\n\n```bash\n# not a heading\n```\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#same-1) [ok](a.md#top) [ok](#here) `[not a link](nowhere.md)`\n\n# Here\n\n"
                    "[gone](missing.md) [bad anchor](a.md#same-2) [fenced heading](a.md#not-a-heading)\n"
                    "[wrapped\ntext](a.md#nope) [web](https://example.org/x#y)\n")
    problems = broken_links(page, root=tmp_path)
    assert [p.split(": ", 1)[1].split(" (")[0] for p in problems] == \
        ["missing.md", "a.md#same-2", "a.md#not-a-heading", "a.md#nope"]


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_and_anchors_resolve(path):
    assert broken_links(path) == []


def test_section_reference_check_catches_a_stale_one():
    made_up = "x" * 3 + " section that was never written"
    text = (f'see (README, "{made_up}") and README\'s "Your own\n    corpus" and\n# README section "The main job"'
            f' and docs/performance.md, "Benchmark" and docs/nowhere.md, "Benchmark" and (README: {made_up})')
    refs = section_refs(text)
    assert [name for _, name in refs] == [made_up, "Your own corpus", "The main job", "Benchmark", "Benchmark",
                                          made_up]
    assert stale(refs) == [f'README.md, "{made_up}" (no such heading)', 'docs/nowhere.md, "Benchmark" (no such file)',
                           f'README.md, "{made_up}" (no such heading)']
    sibling = section_refs('[known-gaps.md, "No such gap"](known-gaps.md#x)', DOCS / "results.md")
    assert stale(sibling) == ['docs/known-gaps.md, "No such gap" (no such heading)']


def test_every_named_section_exists():
    files = scanned_files()
    assert ROOT / "uedp" / "config.py" in files and ROOT / ".ci" / "run" in files and README in files
    problems = [f"{p.relative_to(ROOT)}: {s}" for p in files for s in stale(section_refs(p.read_text(), p))]
    assert problems == []


def test_readme_links_every_docs_page():
    targets = {(README.parent / t.partition("#")[0]).resolve() for t in links(README.read_text())}
    assert [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in targets] == []
    assert "## Where to add things" in (DOCS / "architecture.md").read_text().split("\n")


def outside_citations(text: str) -> list[str]:
    """The lines of `text` that cite a page outside the repository (the project's shared/docs folder)."""
    return [line.strip() for line in text.split("\n") if re.search(r"shared/docs\b", line)]


def test_outside_citation_check_catches_one():
    assert outside_citations("the rule (see ../shared/docs/uedp-mechanism.md, section 3)\nok") != []
    assert outside_citations("the rule (see docs/mechanism.md, section 3)") == []


def test_no_file_cites_a_page_outside_the_repository():
    """The mechanism's and DP-BART's specifications are docs/mechanism.md and docs/dp-bart-system.md: no
    README, docs page (figures included), .py file, conf/, .ci/, Makefile or pyproject.toml cites a page a
    user of the repository cannot read."""
    files = scanned_files() + sorted((DOCS / "figures").glob("*.md"))
    assert DOCS / "mechanism.md" in files and ROOT / "Makefile" in files and ROOT / "conf" / "config.yaml" in files
    problems = [f"{p.relative_to(ROOT)}: {line}" for p in files for line in outside_citations(p.read_text())]
    assert problems == []


def test_readme_is_short():
    assert len(README.read_text()) <= 15_000


def test_command_coverage_catches_an_unmarked_command():
    text = ("<!-- own-corpus-commands -->\n```bash\n.venv/bin/uedp corpus-stats --dataset jsonl\n```\n\n"
            "```bash\nmake test\nmake lint\nrm -rf / # not run by CI: a bad idea\n"
            "# not run by CI: needs a cluster\nray start --head \\\n    --port 1\n```\n```json\n{\"a\": 1}\n```\n")
    got = readme_commands(text)
    assert [c for c, _ in got] == [".venv/bin/uedp corpus-stats --dataset jsonl", "make test", "make lint",
                                   "rm -rf /", "ray start --head --port 1"]
    assert [how.split(":")[0].split(" (")[0] for _, how in got] == ["run by", "run by", "UNCOVERED", "not run",
                                                                   "not run"]
    assert runner_problem("make lint", ".ci/run") is not None  # .ci/run runs ruff itself, not `make lint`
    assert runner_problem("make test", ".ci/run") is None
    fingerprint = "tests/test_fingerprint.py::test_results_match_the_committed_fingerprint"
    assert runner_problem(".venv/bin/uedp epsilon --rounds 31", fingerprint) is not None  # not its arguments
    assert runner_problem("make test", "tests/test_fingerprint.py::no_such_test") is not None


def test_every_readme_command_is_run_or_marked():
    commands = readme_commands(README.read_text())
    assert len(commands) >= 8
    assert [f"{c}: {how}" for c, how in commands if how.startswith("UNCOVERED")] == []
    assert all(len(how.split(NOT_RUN, 1)[1].strip(" :")) >= 10 for _, how in commands if how.startswith("not run"))
    assert set(RUN_BY) <= {c for c, _ in commands}, "RUN_BY lists a command the README no longer has"


def test_run_by_is_true():
    text = README.read_text()
    for _, _, body, before in blocks(text):
        marker = next((m for m in BLOCKS_RUN_BY if before.rstrip().endswith(m)), None)
        if marker:
            command = " ".join(body[0].split())
            assert runner_problem(command, BLOCKS_RUN_BY[marker], marker) is None
    assert all(m in text for m in BLOCKS_RUN_BY)
    assert [p for c, r in RUN_BY.items() if (p := runner_problem(c, r))] == []
