"""uedp.summary: the schema of summary.json, its atomic writer and its reader."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import uedp.files as files
from uedp.errors import SummaryError, UedpError
from uedp.summary import (
    COMMON,
    KEYS,
    RUN,
    SUMMARY,
    SUMMARY_KINDS,
    has_summary,
    read_summary,
    summary_path,
    write_summary,
)

ROOT = Path(__file__).resolve().parents[1]


def federated(**changes: object) -> dict[str, object]:
    s: dict[str, object] = {k: None for k in SUMMARY_KINDS["federated"]}
    s.update(strategy="fedavg", method="noiseless", rounds=2, eps_uedp=math.inf, eps_user=math.inf,
             eps_undetected=math.inf, eps_rdp_bound=math.inf, metric="perplexity", private=False,
             initial={"perplexity": 900.0}, final={"perplexity": 400.5}, claims=[], seconds=1.5)
    s.update(changes)
    return s


def test_every_key_of_every_kind_is_documented() -> None:
    assert set().union(*SUMMARY_KINDS.values()) == set(KEYS)
    assert set(COMMON) <= set(RUN) and all(set(COMMON) <= keys for keys in SUMMARY_KINDS.values())
    assert set(RUN) <= SUMMARY_KINDS["federated"] and set(RUN) <= SUMMARY_KINDS["local"]


def test_round_trip_keeps_infinity(tmp_path: Path) -> None:
    s = federated()
    path = write_summary(tmp_path, s, kind="federated")
    assert path == tmp_path / SUMMARY == summary_path(tmp_path) and has_summary(tmp_path)
    text = path.read_text()
    assert '"eps_uedp": Infinity' in text and text == json.dumps(s, indent=1)  # the format runs always wrote
    back = read_summary(tmp_path, require=RUN)
    assert back == s and math.isinf(back["eps_uedp"])
    assert read_summary(path) == s  # the file's path or its run directory
    assert [p.name for p in tmp_path.iterdir()] == [SUMMARY]  # no temporary left


def test_the_writer_refuses_a_key_missing_or_unknown(tmp_path: Path) -> None:
    s = federated()
    del s["seconds"]
    with pytest.raises(ValueError, match=r"missing \['seconds'\]"):
        write_summary(tmp_path, s, kind="federated")
    with pytest.raises(ValueError, match=r"unknown \['flavour'\]"):
        write_summary(tmp_path, federated(flavour="x"), kind="federated")
    with pytest.raises(ValueError, match="kind"):
        write_summary(tmp_path, federated(), kind="mystery")
    assert not has_summary(tmp_path)
    reference = {k: None for k in SUMMARY_KINDS["reference"]}
    write_summary(tmp_path, reference, kind="reference")
    assert read_summary(tmp_path) == reference


def test_the_writer_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_summary(tmp_path, federated(rounds=1), kind="federated")

    def broken_replace(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_summary(tmp_path, federated(rounds=2), kind="federated")
    monkeypatch.undo()
    assert read_summary(tmp_path)["rounds"] == 1
    assert [p.name for p in tmp_path.iterdir()] == [SUMMARY]


def test_the_reader_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "job-3"
    with pytest.raises(SummaryError, match=f"{missing / SUMMARY} does not exist"):
        read_summary(missing)
    assert not has_summary(missing)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / SUMMARY).write_text('{"strategy": "uedp", "rou')  # cut off
    with pytest.raises(SummaryError, match=f"{bad / SUMMARY}: not valid JSON"):
        read_summary(bad)
    (bad / SUMMARY).write_text("[1, 2]")
    with pytest.raises(SummaryError, match="not a JSON object"):
        read_summary(bad)
    assert issubclass(SummaryError, UedpError) and issubclass(SummaryError, ValueError)


def test_the_reader_refuses_a_summary_without_a_schema_key(tmp_path: Path) -> None:
    s = federated()
    del s["metric"]
    (tmp_path / SUMMARY).write_text(json.dumps(s))
    assert read_summary(tmp_path)["strategy"] == "fedavg"  # COMMON is there
    with pytest.raises(SummaryError, match=f"{tmp_path / SUMMARY}: missing key\\(s\\) metric"):
        read_summary(tmp_path, require=RUN)
    del s["final"]
    (tmp_path / SUMMARY).write_text(json.dumps(s))
    with pytest.raises(SummaryError, match="missing key\\(s\\) final"):
        read_summary(tmp_path)
    (tmp_path / SUMMARY).write_text(json.dumps({**federated(), "from_the_future": 1}))
    assert read_summary(tmp_path, require=RUN)["from_the_future"] == 1  # unknown keys are read


FIXTURES = Path(__file__).parent / "assets" / "summaries"  # real runs' summaries, committed: FOLDER/summary.json


def test_existing_summaries_stay_readable() -> None:
    """Summaries that runs wrote read as runs: the committed ones (tests/assets/summaries/STRATEGY[-WHAT]/: copies
    of outputs/ jobs' summaries, numbers and settings only; fedavg, user_dp, uedp with a LoRA base model and
    with detector spans, deid_dp on a classification task) always, and outputs/ where a checkout has run jobs."""
    committed = sorted(FIXTURES.glob("*/summary.json"))
    assert {p.parent.name.split("-")[0] for p in committed} == {"fedavg", "user_dp", "uedp", "deid_dp"}, committed
    for path in committed:
        summary = read_summary(path.parent, require=RUN)
        assert summary == json.loads(path.read_text())  # every key, unknown ones too, as stored
        assert summary["strategy"] == path.parent.name.split("-")[0]
        assert summary["rounds"] > 0 and summary["final"][summary["metric"]] > 0
        assert summary["private"] == (summary["strategy"] != "fedavg")  # fedavg: no noise, infinite epsilons
        assert (summary["eps_user"] < math.inf) == summary["private"]
        assert (summary["eps_uedp"] < math.inf) == (summary["strategy"] == "uedp")
    for path in sorted((ROOT / "outputs").glob("**/summary.json"))[:50]:
        assert read_summary(path, require=RUN)["strategy"]
