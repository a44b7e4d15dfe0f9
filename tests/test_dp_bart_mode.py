"""strategy=dp_bart, the federated local-DP mode: every owner rewrites its own sentences once, only text
that went through the mechanism reaches the server, the guarantee is recorded before any model, and a
second run reuses the rewrites (spends nothing more). A stand-in rewriter (deterministic encode, recording
decode) keeps this fast; the real rewriter has its own tests (test_rewriting_model.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import server.local_dp as local_dp
import uedp.rewriting.model as rewriter_model
from runtime.local_grid import run_local
from tests.helpers import tiny_config
from uedp.rewriting.mechanism import ClvMechanism, compose_documents


@dataclass(frozen=True)
class _Config:
    clip: float = 0.1


@dataclass
class FakeRewriter:
    length: int = 4
    dim: int = 6
    kept: np.ndarray | None = None
    public: str = "stand-in"
    config: _Config = field(default_factory=_Config)
    decoded: list[np.ndarray] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def identity(self) -> dict[str, Any]:
        return {"kind": "stand-in", "length": self.length, "dim": self.dim}

    def mechanism(self, epsilon: float, delta: float, noise: str) -> ClvMechanism:  # as Rewriter.mechanism
        return ClvMechanism(epsilon=epsilon, delta=delta, dim=self.dim, clip=self.config.clip, length=self.length,
                            kept=self.kept, noise=noise)

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.stack([np.random.default_rng(abs(hash(t)) % 2**32).normal(size=(self.length, self.dim))
                         for t in texts])

    def decode(self, z: np.ndarray) -> list[str]:
        out = []
        for row in z:
            self.decoded.append(np.array(row))
            out.append(f"rewrite-{len(self.outputs)}")
            self.outputs.append(out[-1])
        return out


@pytest.fixture
def rewriter(monkeypatch, tmp_path):
    fake = FakeRewriter()
    privatized: list[np.ndarray] = []
    original = ClvMechanism.privatize

    def recording(self, z, rng):
        out = original(self, z, rng)
        privatized.extend(np.array(x) for x in out)
        return out

    monkeypatch.setattr(ClvMechanism, "privatize", recording)
    monkeypatch.setattr(rewriter_model, "load_rewriter", lambda **_: fake)
    pooled: list[list[str]] = []
    encode = local_dp.encode_sentences

    def capture(tokenizer, texts, labels, **kw):
        pooled.append(list(texts))
        return encode(tokenizer, texts, labels, **kw)

    monkeypatch.setattr(local_dp, "encode_sentences", capture)
    monkeypatch.setenv("UEDP_CACHE_DIR", str(tmp_path / "cache"))
    return fake, privatized, pooled


def _cfg(out, **rewrite):
    return tiny_config(out, strategy={"name": "dp_bart"}, task={"name": "classification"},
                       rewrite={"epsilon": 500.0, "max_documents": 5, "epochs": 2, **rewrite})


def test_only_mechanism_output_reaches_the_server(rewriter, tmp_path):
    fake, privatized, pooled = rewriter
    summary = run_local(_cfg(tmp_path / "run"))
    texts = pooled[0]
    assert len(texts) == 8 * 5  # 8 owners, at most 5 documents each
    assert set(texts) <= set(fake.outputs) and not any(t.startswith(("I ", "My ")) for t in texts)
    assert len(fake.decoded) == len(privatized) == 40
    for z in fake.decoded:  # the decoder only ever saw privatized encodings
        assert any(np.array_equal(z, p) for p in privatized)
        assert np.abs(z).max() > 0.1  # noised: beyond the clip bound C = 0.1
    expected_user = compose_documents(500.0, 1e-5, 5, noise_multiplier=ClvMechanism(
        epsilon=500.0, delta=1e-5, dim=6, length=4).sigma / ClvMechanism(
        epsilon=500.0, delta=1e-5, dim=6, length=4).l2_sensitivity).epsilon
    assert summary["strategy"] == "dp_bart" and summary["eps_local_document"] == 500.0
    assert summary["eps_local_user"] == pytest.approx(expected_user, rel=1e-6)
    assert summary["eps_uedp"] == float("inf") and summary["rounds"] == 2
    assert not summary["private"] and "labels released in the clear" in summary["warning"]
    local = json.loads((tmp_path / "run" / local_dp.LOCAL_DP).read_text())
    assert "labels" in local["in_the_clear"] and local["units"].startswith("local DP")
    record, model = tmp_path / "run" / local_dp.LOCAL_DP, tmp_path / "run" / "model.pt"
    assert record.stat().st_mtime_ns <= model.stat().st_mtime_ns  # the guarantee is written before any model


def test_rewrites_are_reused_and_labels_can_be_private(rewriter, tmp_path):
    fake, privatized, pooled = rewriter
    first = run_local(_cfg(tmp_path / "a", label_epsilon=2.0))
    assert first["private"] and first["warning"] is None and first["local"]["label_epsilon"] == 2.0
    calls = len(privatized)
    run_local(_cfg(tmp_path / "b", label_epsilon=2.0))  # same owners, same settings: read back, not re-noised
    assert len(privatized) == calls and pooled[1] == pooled[0]
    run_local(_cfg(tmp_path / "c", label_epsilon=2.0, epsilon=400.0))  # other settings: rewritten again
    assert len(privatized) == 2 * calls


def test_rewrite_command_round_trips_a_jsonl_file(rewriter, tmp_path, capsys):
    from uedp.cli import main

    fake, privatized, _ = rewriter
    src = tmp_path / "mine.jsonl"
    lines = [{"user": "ann", "text": "I met Bob in Paris. It rained.", "label": "travel", "split": "train"},
             {"user": "ann", "text": "Work was long.", "label": "work", "split": "test"},
             {"user": "bo", "text": "My cat is called Tom.", "label": "travel"}]
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "out" / "rewritten.jsonl"
    assert main(["rewrite", "--in", str(src), "--out", str(out), "--epsilon", "300", "--label-epsilon", "1.5"]) == 0
    got = [json.loads(x) for x in out.read_text().splitlines()]
    assert [g["user"] for g in got] == ["ann", "ann", "ann", "bo"]  # one line per sentence (document)
    assert [g["split"] for g in got][:3] == ["train", "train", "test"]
    assert all(g["label"] in ("travel", "work") for g in got)
    assert [g["text"] for g in got] == fake.outputs and len(privatized) == 4
    meta = json.loads(out.with_name("rewritten.jsonl.meta.json").read_text())
    assert meta["epsilon_document"] == 300 and meta["documents_per_user"] == 3 and meta["label_epsilon"] == 1.5
    assert meta["epsilon_user"] > 300 and meta["private"] and "labels" not in meta["in_the_clear"]
    assert "user ids" in meta["in_the_clear"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"user": "a", "text": "x"}\n{"user": "a"}\n')
    assert main(["rewrite", "--in", str(bad), "--out", str(tmp_path / "o.jsonl"), "--epsilon", "10"]) == 2
    assert "bad.jsonl line 2: field 'text'" in capsys.readouterr().err


def test_without_a_cap_the_user_guarantee_covers_the_largest_owner(rewriter, tmp_path):
    """rewrite.max_documents = 0: every training sentence is rewritten, and the per-user epsilon composes over
    the largest owner's documents (not over one), labelled data-dependent."""
    fake, privatized, pooled = rewriter
    summary = run_local(_cfg(tmp_path / "all", max_documents=0))
    local = summary["local"]
    assert len(pooled[0]) == len(privatized) > 8 * 5
    assert local["documents_per_user"] > 5 and "data-dependent" in local["documents_per_user_source"]
    mech = ClvMechanism(epsilon=500.0, delta=1e-5, dim=6, length=4)
    assert summary["eps_local_user"] == pytest.approx(mech.compose(local["documents_per_user"]).epsilon, rel=1e-6)
    assert "computed from the data" in summary["warning"]


def test_central_reference_trains_on_the_original_text_and_says_not_private(tmp_path):
    """studies/dp_bart.py's `central-original` job: the dp_bart pipeline's central training on the
    ORIGINAL sentences (a reference, never private), with the same epochs."""
    from studies.dp_bart import CENTRAL, central_reference

    cfg = tiny_config(tmp_path / "ref", task={"name": "classification"}, rewrite={"epochs": 2})
    summary = central_reference(cfg)
    assert summary["strategy"] == CENTRAL and summary["rounds"] == 2 and summary["documents"] > 8 * 10
    assert not summary["private"] and "not private" in summary["warning"]
    assert 0.0 <= summary["final"]["error"] <= 1.0
    assert json.loads((tmp_path / "ref" / "summary.json").read_text())["final"] == summary["final"]
