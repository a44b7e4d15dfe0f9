"""`uedp corpus-stats`: JSON output, human output, and bad input -> exit code 2 with a clear message."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def test_quality_has_intervals_overlap_and_flag_rates():
    """Wilson intervals, class-matched overlap and the sentence flag / false-flag rates, on counts
    small enough to check by hand."""
    import pyarrow as pa

    from uedp.data.corpus import SCHEMA, Corpus
    from uedp.entities.quality import detection_quality, wilson

    gold = [[{"start": 0, "end": 5, "category": "PERSON"}], [], [], [{"start": 3, "end": 9, "category": "GPE"}]]
    pred = [[{"start": 0, "end": 5, "category": "PERSON"}], [{"start": 0, "end": 2, "category": "ORG"}], [],
            [{"start": 3, "end": 6, "category": "LOC"}]]
    table = pa.table({"sid": [0, 1, 2, 3], "user": ["a"] * 4, "text": ["x" * 12] * 4, "label": [0] * 4,
                      "split": ["test"] * 4, "gold": gold}, schema=SCHEMA)
    annotations = pa.table({"sid": [0, 1, 2, 3], "entities": pred})
    q = detection_quality(annotations, Corpus("t", table, has_gold=True))
    assert (q["overall"]["recall"], q["lenient"]["overall"]["recall"]) == (0.5, 1.0)  # GPE/LOC overlap: found
    assert q["overall"]["ci95"]["recall"] == wilson(1, 2)
    flags = q["flags"]
    assert (flags["flag_rate"], flags["gold_flag_rate"], flags["false_flag_rate"]) == (0.75, 0.5, 0.5)
    assert flags["missed_flag_rate"] == 0.0 and flags["ci95"]["false_flag_rate"] == wilson(1, 2)
    lo, hi = wilson(60, 100)
    assert abs(lo - 0.5020) < 1e-4 and abs(hi - 0.6906) < 1e-4  # the textbook Wilson interval


def test_the_default_detector_is_the_runs_and_is_named(capsys):
    """No --detector: the detector a run on that dataset uses (entities.detector = auto, one rule:
    EntityConfig.detector_for): gold on the synthetic corpus, balanced on a JSONL corpus; the output names it."""
    from uedp.config import EntityConfig

    assert main(["corpus-stats", "--dataset", "synthetic", "-o", "num_users=3"]) == 0
    assert "(detector gold = auto, as runs on it, protected" in capsys.readouterr().out
    path = Path(__file__).parent / "assets" / "my_corpus.jsonl"
    assert main(["corpus-stats", "--dataset", "jsonl", "-o", f"path={path}", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["detector"] == EntityConfig().detector_for("jsonl") == "balanced" and out["detector_option"] == "auto"
    assert "recall" in out  # balanced is measured against the file's gold spans


def test_public_policy_option_and_holder_table(tmp_path, capsys):
    """--public places_calendar: the policy's entities (GPE paris, DATE monday) leave the holders report, which
    names the policy; the text output prints p90 / p99 / share and a per-category holder table."""
    lines = [{"user": u, "text": "Paris on Monday.", "entities": [[0, 5, "GPE"], [9, 15, "DATE"]]} for u in "abc"]
    lines.append({"user": "a", "text": "Ann Lee called.", "entities": [[0, 7, "PERSON"]]})
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    base = ["corpus-stats", "--dataset", "jsonl", "-o", f"path={path}", "-o", "sentence_split=false",
            "--detector", "gold"]
    assert main([*base, "--json"]) == 0
    before = json.loads(capsys.readouterr().out)
    assert before["public"] == "none" and before["entities"] == 3
    assert sorted(before["users_per_entity"]["per_category"]) == ["DATE", "GPE", "PERSON"]
    assert (before["users_per_entity"]["max"], before["users_per_entity"]["share_2plus"]) == (3, 2 / 3)
    assert main([*base, "--public", "places_calendar", "--json"]) == 0
    after = json.loads(capsys.readouterr().out)
    assert after["public"] == "places_calendar" and after["entities"] == 1 and after["sensitive_sentences"] == 1
    assert list(after["users_per_entity"]["per_category"]) == ["PERSON"]
    assert (after["users_per_entity"]["max"], after["users_per_entity"]["share_2plus"]) == (1, 0.0)
    assert main([*base, "--public", "places_calendar"]) == 0
    text = capsys.readouterr().out
    assert "public places_calendar)" in text and "p90 1  p99 1  max 1  share >= 2 0.000" in text
    assert "share >= 2" in text.splitlines()[7] and text.splitlines()[8].split()[:2] == ["PERSON", "1"]
    assert main([*base, "--public", "everything"]) == 2
    assert "entities.public must be one of none, places_calendar" in capsys.readouterr().err
