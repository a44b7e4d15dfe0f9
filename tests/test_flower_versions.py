"""The installed package's Flower range, tested at both ends: the lowest release it declares and the highest on
the index. For each, a fresh venv holds that flwr release and a wheel of this checkout's `uedp` (both
--no-deps), and runs tests/flower_versions/check_component.py, which drives the INSTALLED uedp.flower
component with that release's own `Strategy.start` (its docstring lists the checks: two rounds, the
instructions, the counted replies, privacy_spent, the keyed place map, the budget stop).

The venv and the wheel: tests/installed.py (NETWORK: pip takes flwr==X from PyPI or its cache). The script
runs with `python -I` from a temporary directory outside the checkout and checks itself that uedp and flwr
come from the venv and that flwr is the release asked for.

The range: below 1.38.0 Flower's Grid has no get_nodes(), with which the keyed place map (KeyedPlaces, what a
deployment uses) reads each node's registered public key; below 1.34.0 there is no
flwr.supercore.privacy_accounting (PrivacySpent); below 1.21.0 no Message-API strategies at all.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.installed import ROOT, venv_with

SCRIPT = ROOT / "tests" / "flower_versions" / "check_component.py"
LOWEST = "1.38.0"  # the lower end of the range pyproject.toml declares for flwr
HIGHEST = "1.42.0"  # the newest release on the index (the repository's own runtime is pinned to it)


@pytest.mark.e2e
@pytest.mark.parametrize("flwr", [LOWEST, HIGHEST])
def test_the_installed_component_runs_on_flower(tmp_path, uedp_wheel, flwr):
    python = venv_with(tmp_path, flwr, uedp_wheel)
    work = tmp_path / "work"  # outside the checkout
    work.mkdir()
    t0 = time.monotonic()
    proc = subprocess.run([str(python), "-I", str(SCRIPT), "--flwr", flwr], cwd=work, capture_output=True,
                          text=True, timeout=300)
    log = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, log
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"] and result["flwr"] == flwr, log
    assert result["uedp"].startswith(str(python.parent.parent)), result["uedp"]  # the wheel's, not the checkout's
    print(f"flwr {flwr}: the component's check took {time.monotonic() - t0:.1f} s")
