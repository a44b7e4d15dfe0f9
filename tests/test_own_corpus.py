"""README's "Your own corpus": the commands in its block, run exactly as written (end-to-end tier) on the
fixture they name, in a scratch directory holding only that fixture and the virtual environment."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
MARKER = "<!-- own-corpus-commands -->"


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(re.escape(MARKER) + r"\s*```bash\n(.*?)```", text, re.S)
    assert block, f"README.md has no bash block after {MARKER}"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_block_is_corpus_stats_then_uedp_then_noiseless():
    commands = readme_commands()
    assert len(commands) == 3 and "corpus-stats --dataset jsonl" in commands[0]
    assert all("dataset=jsonl" in c for c in commands[1:]) and "strategy=fedavg" in commands[2]
    for c in commands:  # every path it names exists in the repository
        for word in shlex.split(c):
            if word.startswith(("tests/", "path=tests/")) or "=tests/" in word:
                assert (ROOT / word.split("=")[-1]).is_file(), word


@pytest.mark.e2e
def test_own_corpus_commands_run_as_written(tmp_path):
    (tmp_path / "tests" / "assets").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "assets" / "my_corpus.jsonl", tmp_path / "tests" / "assets")
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    outputs = []
    for command in readme_commands():
        done = subprocess.run(shlex.split(command), cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        assert "DEPRECATED" not in done.stdout + done.stderr and "FutureWarning" not in done.stderr, command
        outputs.append(done.stdout)
    stats = outputs[0]
    assert "users                24" in stats and "vs gold" in stats and "PERSON" in stats
    uedp = json.loads((tmp_path / "outputs/my_corpus/uedp/summary.json").read_text())
    fedavg = json.loads((tmp_path / "outputs/my_corpus/fedavg/summary.json").read_text())
    assert uedp["private"] and uedp["detector"] == "balanced" and uedp["eps_uedp"] <= 8.0 + 1e-6
    assert uedp["rounds"] == 30 and uedp["metric"] == "error" and 0 <= uedp["final"]["error"] <= 1
    assert not fedavg["private"] and fedavg["eps_uedp"] == float("inf") and fedavg["rounds"] == 30
    assert (tmp_path / "outputs/my_corpus/uedp/ledger.json").is_file()
