"""The layering of the code base, lazy imports inside functions included:

    uedp (the library)  <-  server, client, strategies (the Flower apps)  <-  runtime (how a run is executed)
                        <-  studies (what is measured)  <-  experiments (thin commands, imported by nothing)

each layer imports only those to its left; tests import any layer but experiments (no import, importlib or
runpy of a command module: a test runs a command as a subprocess, as a user would; the one exception is
tests/test_doc_commands.py, which only parses the commands the docs cite with each command's own parser, in
process, since ~150 interpreters would cost minutes); inside the library,
uedp.data (corpora) does not import uedp.entities (detection), which builds on it; and no module imports
itself back through others (no import cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("uedp", "server", "client", "strategies", "runtime", "studies", "experiments", "tests")
LAYER = {"uedp": 0, "server": 1, "client": 1, "strategies": 1, "runtime": 2, "studies": 3, "experiments": 4}


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


def _layering_violations(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(module, import) pairs against the layering: an import of a layer above (or of another package of the
    apps' layer: the apps talk through the library), and any import of experiments from outside it."""
    bad = set()
    for m, deps in graph.items():
        pm = m.split(".")[0]
        for t in deps:
            pt = t.split(".")[0]
            if pt not in LAYER or pt == pm:
                continue
            if pm == "tests":
                if pt == "experiments":
                    bad.add((m, t))
            elif LAYER[pt] > LAYER[pm] or (LAYER[pt] == LAYER[pm] == 1 and pt != "strategies"):
                bad.add((m, t))
    return bad


def test_each_layer_imports_only_the_layers_below():
    assert _layering_violations(_graph()) == set()


def test_the_checker_finds_layering_violations():
    graph = {"uedp.x": {"server.app"}, "runtime.a": {"studies.b", "uedp.y"}, "tests.t": {"experiments.run"},
             "studies.b": {"runtime.a"}, "experiments.c": {"studies.b", "experiments.d"}}
    assert _layering_violations(graph) == {("uedp.x", "server.app"), ("runtime.a", "studies.b"),
                                           ("tests.t", "experiments.run")}


def _dynamic_command_loads(tree: ast.AST) -> list[str]:
    """importlib.import_module("experiments.x"), runpy.run_module("experiments.x"), __import__(...): calls
    that load a command module without an import statement (the graph cannot see them)."""
    return [node.args[0].value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str) and node.args[0].value.startswith("experiments")
            and ast.unparse(node.func).endswith(("import_module", "run_module", "run_path", "__import__"))]


def test_no_test_loads_a_command_module_dynamically():
    assert _dynamic_command_loads(ast.parse('importlib.import_module("experiments.run")')) == ["experiments.run"]
    assert _dynamic_command_loads(ast.parse('subprocess.run(["python", "-m", "experiments.tls"])')) == []
    hits = {p.name: found for p in (ROOT / "tests").rglob("*.py")
            if (found := _dynamic_command_loads(ast.parse(p.read_text())))}
    assert hits == {}


def test_the_corpora_do_not_import_entity_detection():
    bad = {(m, t) for m, deps in _graph().items() if m.startswith("uedp.data") for t in deps
           if t.startswith("uedp.entities")}
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
    assert "client.update" in graph["runtime.local_grid"]
