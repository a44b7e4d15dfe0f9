"""The run configuration stops at the apps' edge (docs/architecture.md): under uedp/, only the configuration's own
modules, the one edge that unpacks a RunConfig for the data and model steps (uedp/pipeline.py), the Hydra schema,
the audit's variant builder and the component's `UserEntityDP.from_run_config` name RunConfig in code; every
other function takes the values it uses."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {
    "uedp/config.py", "uedp/config_values.py", "uedp/config_training.py",  # the configuration itself
    "uedp/pipeline.py",  # the edge
    "uedp/hydra_schema.py",  # Hydra's view of the configuration
    "uedp/audit/config.py",  # builds each audit variant's RunConfig
    "uedp/flower/strategy.py",  # UserEntityDP.from_run_config only (checked below)
}  # fmt: skip


def run_config_uses(source: str) -> list[tuple[int, str]]:
    """(line, where) for every name RunConfig in code: imports, annotations, calls, attributes (not docstrings)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and any(a.name == "RunConfig" for a in node.names):
            found.append((node.lineno, "import"))
        elif isinstance(node, ast.Name) and node.id == "RunConfig":
            found.append((node.lineno, "name"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip() == "RunConfig":
            found.append((node.lineno, "string annotation"))
    return found


def test_no_module_under_uedp_but_the_edge_takes_a_run_config():
    offenders = []
    for path in sorted((ROOT / "uedp").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel not in ALLOWED:
            offenders += [f"{rel}:{line} ({what})" for line, what in run_config_uses(path.read_text(encoding="utf-8"))]
    assert not offenders, "RunConfig below the apps' edge:\n" + "\n".join(offenders)


def test_the_component_names_run_config_only_in_from_run_config():
    source = (ROOT / "uedp" / "flower" / "strategy.py").read_text(encoding="utf-8")
    inside = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "from_run_config":
            inside |= set(range(node.lineno, node.end_lineno + 1))
    uses = [line for line, _ in run_config_uses(source)]
    assert uses and all(line in inside for line in uses), (uses, sorted(inside)[:1])


def test_the_check_sees_a_run_config_in_code_but_not_in_prose():
    assert run_config_uses('"""RunConfig in a docstring."""\nx = 1\n') == []
    assert [w for _, w in run_config_uses("from uedp.config import RunConfig\ndef f(cfg: RunConfig): ...\n")] == [
        "import", "name"]
    assert run_config_uses('def f(cfg: "RunConfig"): ...\n') == [(1, "string annotation")]
