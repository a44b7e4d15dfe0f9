"""Every command of experiments/ is a thin module in one pattern (experiments/__init__.py): its docstring is the
usage, `add_parser(parser)` declares the options, `run(options)` turns them into plain values for a study, and
`main = command(__doc__, add_parser, run)` with `if __name__ == "__main__": raise SystemExit(main())`. argparse
is for declaring options only: no command builds or runs a parser of its own (`command` does), and the studies
take plain values, never an argparse Namespace (no studies module imports argparse). experiments/run.py,
Hydra's entry point, is the one exception. Checked on the source (tests do not import experiments).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXCEPTIONS = ("__init__.py", "run.py")
COMMANDS = sorted(p for p in (ROOT / "experiments").glob("*.py") if p.name not in EXCEPTIONS)
# argparse names a command may use beyond type hints: the values and classes that declare options
DECLARING = {"REMAINDER", "SUPPRESS", "ArgumentTypeError", "RawDescriptionHelpFormatter"}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _functions(tree: ast.Module) -> set[str]:
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def _main_is_command(tree: ast.Module) -> bool:
    """`main = command(__doc__, add_parser, run)` at the top level."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["main"]
                and isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "command"):
            return [ast.unparse(a) for a in node.value.args] == ["__doc__", "add_parser", "run"]
    return False


def _runs_main(tree: ast.Module) -> bool:
    """`if __name__ == "__main__": raise SystemExit(main())` at the top level."""
    return any(isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"
               and [ast.unparse(s) for s in node.body] == ["raise SystemExit(main())"] for node in tree.body)


def _annotations(tree: ast.AST) -> set[int]:
    """The ids of every node inside an annotation (arguments, returns, annotated assignments)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        hints: list[ast.AST | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            hints = [a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
                     if a is not None] + [node.returns]
        elif isinstance(node, ast.AnnAssign):
            hints = [node.annotation]
        for hint in hints:
            if hint is not None:
                inside |= {id(n) for n in ast.walk(hint)}
    return inside


def argparse_misuse(tree: ast.Module) -> list[str]:
    """What a command does with argparse beyond type hints and declaring options: `from argparse import ...`, a
    parser of its own (`argparse.ArgumentParser(...)`), a parse (`.parse_args`, `.parse_known_args`), or
    another argparse name outside an annotation."""
    bad = [f"from argparse import {', '.join(a.name for a in n.names)}" for n in ast.walk(tree)
           if isinstance(n, ast.ImportFrom) and n.module == "argparse"]
    hinted = _annotations(tree)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "argparse"
                and id(node) not in hinted and node.attr not in DECLARING):
            bad.append(f"line {node.lineno}: argparse.{node.attr}")
        if isinstance(node, ast.Attribute) and node.attr in ("parse_args", "parse_known_args"):
            bad.append(f"line {node.lineno}: .{node.attr}")
    return bad


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: p.stem)
def test_each_command_is_a_thin_module_in_the_one_pattern(path: Path) -> None:
    tree = _tree(path)
    assert ast.get_docstring(tree), f"{path.name}: no docstring (the usage)"
    assert {"add_parser", "run"} <= _functions(tree), f"{path.name}: add_parser and run must be defined"
    assert _main_is_command(tree), f"{path.name}: main = command(__doc__, add_parser, run) is missing"
    assert _runs_main(tree), f"{path.name}: if __name__ == '__main__': raise SystemExit(main()) is missing"
    assert argparse_misuse(tree) == [], path.name


def test_no_study_imports_argparse() -> None:
    bad = sorted(p.name for p in (ROOT / "studies").rglob("*.py") for n in ast.walk(_tree(p))
                 if (isinstance(n, ast.Import) and any(a.name == "argparse" for a in n.names))
                 or (isinstance(n, ast.ImportFrom) and n.module == "argparse"))
    assert bad == []


def test_the_checks_find_a_command_outside_the_pattern() -> None:
    thin = ast.parse('"""Usage."""\nimport argparse\nfrom experiments import command\n\n'
                     "def add_parser(ap: argparse.ArgumentParser) -> None:\n"
                     "    ap.add_argument('rest', nargs=argparse.REMAINDER)\n\n"
                     "def run(options: argparse.Namespace) -> int:\n    return 0\n\n"
                     "main = command(__doc__, add_parser, run)\n\n"
                     "if __name__ == '__main__':\n    raise SystemExit(main())\n")
    assert _main_is_command(thin) and _runs_main(thin) and argparse_misuse(thin) == []
    own = ast.parse("import argparse\nfrom argparse import Namespace\n\ndef main(argv=None):\n"
                    "    ap = argparse.ArgumentParser()\n    return ap.parse_args(argv)\n")
    assert not _main_is_command(own) and not _runs_main(own)
    assert argparse_misuse(own) == ["from argparse import Namespace", "line 5: argparse.ArgumentParser",
                                    "line 6: .parse_args"]
