"""The copy of the app's source that `flwr run` submits (runtime/federation.py `Federation.app_source`).

The copy (HOME/app-src) is the tree less .git and the directories .gitignore names (.venv and outputs/ among
them), made once per federation: Flower 1.42 builds the FAB by walking and resolving every file under the
directory it gets (flwr.cli.utils.collect_files), which took 16 s of every submission in this repository; Flower
filters the copy by the same rules, so the FAB is the same. The copy may name another ClientApp than the app's
own (`set_client_app`: the fault-injecting app of the fault tests, studies/fault_app.py).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
from pathlib import Path

from uedp.errors import ConfigError

CLIENTAPP_LINE = re.compile(r'^(clientapp\s*=\s*)"[^"]*"', re.MULTILINE)


def ignored_directories(root: Path) -> list[str]:
    """The directory patterns of root/.gitignore (lines ending in "/", without it), and .git."""
    gitignore = root / ".gitignore"
    lines = gitignore.read_text().splitlines() if gitignore.is_file() else []
    return [".git", *(ln.strip().rstrip("/").lstrip("/") for ln in lines
                      if ln.strip().endswith("/") and not ln.strip().startswith(("#", "!")))]


def stage_app_source(root: Path, dest: Path, *, client_app: str = "") -> Path:
    """Copy the app's source tree `root` to `dest` (replaced), less the directories .gitignore names and
    .git, and return `dest`: what `flwr run` then submits (Flower applies .gitignore and its include rules to
    the copy, so the FAB holds the same files, without walking the virtual environment and outputs/).
    `client_app` ("module:attribute"): the copy's pyproject.toml names that ClientApp instead of its own."""
    skip = ignored_directories(root)
    if dest.exists():
        shutil.rmtree(dest)
    for here, dirs, files in os.walk(root):
        rel = Path(here).relative_to(root)
        dirs[:] = [d for d in dirs if not any(fnmatch.fnmatch(d, pat) for pat in skip)
                   and not (Path(here) / d).is_symlink() and (Path(here) / d).resolve() != dest.resolve()]
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for f in files:
            src = Path(here) / f
            if not src.is_symlink():  # Flower skips symbolic links too
                shutil.copy2(src, dest / rel / f)
    if client_app:
        set_client_app(dest / "pyproject.toml", client_app)
    return dest


def set_client_app(pyproject: Path, client_app: str) -> None:
    """Make `pyproject`'s [tool.flwr.app.components] clientapp `client_app` ("module:attribute")."""
    if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", client_app):
        raise ConfigError(f"Federation client_app must be 'module:attribute', got {client_app!r}")
    text = pyproject.read_text()
    table = text.find("[tool.flwr.app.components]")
    line = CLIENTAPP_LINE.search(text, table) if table >= 0 else None
    if line is None:
        raise ConfigError(f"{pyproject}: no clientapp under [tool.flwr.app.components] to replace")
    pyproject.write_text(f"{text[:line.start()]}{line.group(1)}\"{client_app}\"{text[line.end():]}")
