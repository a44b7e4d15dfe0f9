"""The layering of the code base: the library (uedp/) imports none of the apps, strategies or scripts, and
no module imports itself back through others (no import cycle), lazy imports inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("uedp", "server", "client", "strategies", "experiments")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports (anywhere in the file), resolved to modules that exist."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for t in targets:
            while t and t not in known:  # `from pkg import name`: name may be a module or an attribute
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, set(mods)) for name, path in mods.items()}


def test_the_library_imports_no_app_strategy_or_script():
    bad = {(m, t) for m, deps in _graph().items() if m.split(".")[0] == "uedp"
           for t in deps if t.split(".")[0] in ("experiments", "server", "client", "strategies")}
    assert bad == set()


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for t in sorted(edges.get(m, ())):
            if state.get(t) == 1:
                cycles.append([*stack[stack.index(t):], t])
            elif t not in state:
                visit(t, [*stack, t])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    return cycles


def test_no_import_cycle():
    # A package's __init__ importing its own submodules is not a cycle of the design: skip those edges.
    edges = {m: {t for t in deps if not t.startswith(m + ".")} for m, deps in _graph().items()}
    assert _cycles(edges) == []


def test_the_checker_sees_imports_and_cycles():
    """The graph is real (the library imports the privacy core, the server the strategy) and a cycle,
    like the one strategies/base.py and strategies/variants.py once had, is found."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    graph = _graph()
    assert "uedp.privacy.mechanisms" in graph["uedp.config"]
    assert "strategies.strategy" in graph["server.setup"] or "strategies" in graph["server.setup"]
    assert "client.update" in graph["experiments.local_grid"]
