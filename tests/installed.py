"""The installed package in a fresh venv: a wheel of this checkout's `uedp`, installed --no-deps beside one
flwr release, for the tests that must import only what a user installs (tests/test_example_app.py,
tests/test_flower_versions.py).

The venv reuses this environment's installed dependencies (numpy, torch, Ray, transformers, dp-accounting,
spaCy...) without installing them again: its site-packages holds a .pth file with ONE plain path line, this
environment's site-packages. Python appends such a line to sys.path after the venv's own site-packages (whose
flwr and uedp therefore win) without reading that directory's own .pth files, so neither the checkout (put on
the dev venv's path by a .pth) nor the editable install of uedp is visible; pip needs --ignore-installed,
since it sees the outer flwr and uedp through that line. flwr is installed into the venv (not reused) so that
its executables (flwr, flower-superlink, flwr-simulation, ...) run with the venv's interpreter.

NETWORK: `pip install --no-deps flwr==X` takes the release from PyPI (or pip's cache; CI reaches PyPI).
Offline, point pip at a directory of flwr wheels with its own environment variables (PIP_NO_INDEX=1
PIP_FIND_LINKS=DIR).
"""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_wheel(src: Path, dist: Path) -> Path:
    """A wheel of this checkout's package, built from a copy in `src` of what the build reads (pyproject.toml,
    the README, the packages it includes), so that the build leaves no build/ or egg-info in the checkout and
    no stale build/lib of an earlier build can slip into it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    shutil.copy2(ROOT / "pyproject.toml", src)
    for path in ROOT.iterdir():
        if path.is_file() and (path.name == project["project"].get("readme") or path.name.startswith("LICENSE")):
            shutil.copy2(path, src)
        elif path.is_dir() and (path / "__init__.py").is_file() and any(fnmatch.fnmatch(path.name, p) for p in include):
            shutil.copytree(path, src / path.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist),
                    str(src)], check=True, capture_output=True, text=True, timeout=300)
    (built,) = dist.glob("uedp-*.whl")
    return built


def venv_with(tmp: Path, flwr: str, wheel: Path) -> Path:
    """A venv in `tmp` with flwr==`flwr` and the wheel (--no-deps), and this environment's site-packages after
    its own (module docstring); returns its interpreter."""
    venv = tmp / f"venv-flwr-{flwr}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    (Path(purelib) / "uedp-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                           "--ignore-installed", f"flwr=={flwr}", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"pip could not install flwr=={flwr} (it needs PyPI, or PIP_FIND_LINKS):\n"
                           f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return python
