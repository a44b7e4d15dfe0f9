"""`uedp corpus-stats`: JSON output, human output, and bad input -> exit code 2 with a clear message."""

from __future__ import annotations

import json
import subprocess
import sys

from uedp.cli import main


def test_json_keys_and_gold_quality(capsys):
    rc = main(["corpus-stats", "--dataset", "synthetic", "--detector", "rules", "--protected", "contact",
               "-o", "num_users=6", "-o", "min_sentences=20", "-o", "max_sentences=30", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("users", "sentences", "sensitive_sentences", "entities", "recall", "precision", "users_per_entity"):
        assert key in out
    assert out["users"] == 6 and 120 <= out["sentences"] <= 180 + 6
    # rules find every contact pattern the generator planted, and nothing else
    assert out["recall"] == 1.0 and out["precision"] == 1.0


def test_gold_detector_has_no_quality_keys(capsys):
    assert main(["corpus-stats", "--dataset", "synthetic", "--detector", "gold", "-o", "num_users=3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "recall" not in out and out["detector"] == "gold"


def test_human_output(capsys):
    assert main(["corpus-stats", "--dataset", "synthetic", "--detector", "gold", "-o", "num_users=3"]) == 0
    text = capsys.readouterr().out
    assert "sensitive sentences" in text and "users per entity" in text


def test_bad_input_exits_2_with_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"user": "a", "text": "fine"}\n{"user": "b", "text": \n')
    proc = subprocess.run(
        [sys.executable, "-m", "uedp.cli", "corpus-stats", "--dataset", "jsonl", "-o", f"path={bad}",
         "--detector", "rules"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert "bad.jsonl" in proc.stderr and "line 2" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_file_and_unknown_dataset_exit_2(tmp_path, capsys):
    assert main(["corpus-stats", "--dataset", "jsonl", "-o", f"path={tmp_path / 'nope.jsonl'}"]) == 2
    assert "nope.jsonl" in capsys.readouterr().err
    assert main(["corpus-stats", "--dataset", "wikipedia"]) == 2
    assert "unknown dataset 'wikipedia'" in capsys.readouterr().err
