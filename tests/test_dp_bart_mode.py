"""strategy=dp_bart, the federated local-DP mode: every owner rewrites its own sentences once, only text
that went through the mechanism reaches the server, the guarantee is recorded before any model, and a
second run reuses the rewrites (spends nothing more). A stand-in rewriter (deterministic encode, recording
decode) keeps this fast; the real rewriter has its own tests (test_rewriting_model.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import server.local_dp as local_dp
import uedp.rewriting.store as rewriter_store
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
    monkeypatch.setattr(rewriter_store, "load_rewriter", lambda **_: fake)
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
    # compose_documents on the same inputs, read back from the JSON summary (exact): the same value; rel 1e-6
    # is far below what another grid or document count would move it (~1e-4 and more)
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


def test_a_replicate_rewrites_again_with_fresh_noise_and_its_own_cache(rewriter, tmp_path):
    """rewrite.replicate: 0 reads back the owners' cached rewrites; another label rewrites again (a new release,
    fresh noise), and reading that replicate back spends nothing more."""
    fake, privatized, pooled = rewriter
    run_local(_cfg(tmp_path / "r0"))
    calls = len(privatized)
    run_local(_cfg(tmp_path / "r1", replicate=1))
    assert len(privatized) == 2 * calls
    fresh = privatized[calls:]
    assert not any(np.array_equal(a, b) for a, b in zip(privatized[:calls], fresh))  # other noise
    run_local(_cfg(tmp_path / "r1-again", replicate=1))
    assert len(privatized) == 2 * calls and pooled[2] == pooled[1]


def test_an_owner_whose_rewriter_differs_refuses_before_rewriting(rewriter, tmp_path):
    """The query carries the server's rewriter digest: an owner with another rewriter raises before any
    document goes through the mechanism."""
    from client.rewrite import client_rewrite
    from uedp.rewriting.rewrite import rewriter_digest

    fake, privatized, _ = rewriter
    cfg = _cfg(tmp_path / "run")
    cfg.validate()
    run_local(cfg)  # prepares the corpus the client reads
    before = len(privatized)
    with pytest.raises(ValueError, match="differs from the server's"):
        client_rewrite(cfg, partition_id=0, data_path="", expected="0" * 32)
    assert len(privatized) == before
    record = client_rewrite(cfg, partition_id=0, data_path="", expected=rewriter_digest(fake))
    assert len(record["texts"]) == 5
    local = json.loads((tmp_path / "run" / local_dp.LOCAL_DP).read_text())
    assert local["rewriter_digest"] == rewriter_digest(fake) and local["rewriter_path"] is None


def test_bad_replicate_is_refused_naming_the_key(tmp_path):
    from uedp.errors import ConfigError

    for bad in (-1, True, 1.5):
        with pytest.raises(ConfigError, match="rewrite.replicate"):
            _cfg(tmp_path, replicate=bad).validate()


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
    """rewrite.max_documents None: every training sentence is rewritten, and the per-user epsilon composes over
    the largest owner's documents (not over one), labelled data-dependent."""
    fake, privatized, pooled = rewriter
    summary = run_local(_cfg(tmp_path / "all", max_documents=None))
    local = summary["local"]
    assert len(pooled[0]) == len(privatized) > 8 * 5
    assert local["documents_per_user"] > 5 and "data-dependent" in local["documents_per_user_source"]
    mech = ClvMechanism(epsilon=500.0, delta=1e-5, dim=6, length=4)
    # the same compose on the same count (JSON round trips exact): rel 1e-6, as in the test above
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


def test_the_comparison_replicates_clv_and_pr_plus_and_summarizes_their_spread():
    """studies/dp_bart.py: --replicates R runs each CLV and PR+ setting R times with rewrite.replicate 0..R-1
    (PR once), every classification job on the classification default model; the replicate table gives each
    setting's mean and range."""
    from studies.dp_bart import Comparison, _config, jobs, replicate_of, replicate_rows
    from uedp.config import CLASSIFICATION_MODEL

    comparison = Comparison(dataset="synthetic", task="classification", variants=("clv", "pr", "pr+", "adept"),
                            epsilons=(1000.0, 3000.0), pr_plus_epsilons=(1000.0,), users=200, replicates=3,
                            out=Path("unused"), runs=Path("unused"))
    named = dict(jobs(comparison))
    clv = [n for n in named if n.startswith("dp_bart-clv-eps1000")]
    assert clv == ["dp_bart-clv-eps1000", "dp_bart-clv-eps1000-r1", "dp_bart-clv-eps1000-r2"]
    assert [named[n]["rewrite"]["replicate"] for n in clv] == [0, 1, 2]
    assert len([n for n in named if n.startswith("dp_bart-pr-")]) == 2  # PR: one run per epsilon
    assert len([n for n in named if n.startswith("dp_bart-pr+-")]) == 3
    assert [n for n in named if n.startswith("dp_bart-adept-")] == ["dp_bart-adept-eps1000", "dp_bart-adept-eps3000"]
    assert _config(Path("unused"), "synthetic", "classification",
                   **named["dp_bart-adept-eps3000"]).rewrite_settings().variant == "adept"
    assert replicate_of("dp_bart-pr+-eps1000-r2") == ("dp_bart-pr+-eps1000", 2)
    assert replicate_of("dp_bart-clv-eps1e+09") == ("dp_bart-clv-eps1e+09", 0)
    cfg = _config(Path("unused"), "synthetic", "classification", **named["dp_bart-clv-eps1000-r2"])
    assert cfg.model.name == CLASSIFICATION_MODEL.name and cfg.model.options == CLASSIFICATION_MODEL.options
    assert cfg.rewrite.replicate == 2
    results = {n: {"final": {"macro_f1": f, "error": 1 - f}} for n, f in zip(clv, (0.5, 0.7, 0.6))}
    results["fedavg"] = {"final": {"macro_f1": 0.9, "error": 0.1}}
    ((name, count, mean, low, high, error),) = replicate_rows(results, "macro_f1")
    assert (name, count, low, high) == ("dp_bart-clv-eps1000", 3, 0.5, 0.7)
    assert mean == pytest.approx(0.6) and error == pytest.approx(0.4)  # float64 means of 3 decimals: a few ulps


def test_a_fixed_seed_runs_rewrites_are_never_read_back_by_a_private_run(rewriter, tmp_path):
    """Adversarial read of docs/proofs.md section 10: the rewrite cache key left the seed out, so a private run
    read back a fixed-seed run's rewrites (whose noise anyone can regenerate) and was recorded as private."""
    fake, privatized, pooled = rewriter

    def cfg(out, seed):
        return tiny_config(out, strategy={"name": "dp_bart"}, task={"name": "classification"},
                           privacy={"seed": seed}, rewrite={"epsilon": 500.0, "max_documents": 5, "epochs": 2,
                                                            "label_epsilon": 2.0})

    fixed = run_local(cfg(tmp_path / "fixed", 0))
    assert not fixed["private"]
    calls = len(privatized)
    private = run_local(cfg(tmp_path / "private", -1))
    assert len(privatized) == 2 * calls  # rewritten with fresh noise, not read back
    assert private["private"] and not set(pooled[1]) & set(pooled[0])


def test_the_guarantee_composes_the_labels_and_never_raises_after_a_release():
    from uedp.rewriting.rewrite import RewriteSettings, guarantee

    mech = ClvMechanism(epsilon=100.0, delta=1e-5, dim=6, length=4)
    settings = RewriteSettings(epsilon=100.0, label_epsilon=2.0, max_documents=5)
    g = guarantee(mech, settings, documents_per_user=5)
    # sums and products of small decimals (basic composition): a few ulps, default rel 1e-6
    assert g["epsilon_document_with_label"] == pytest.approx(102.0)
    assert g["epsilon_user_with_labels"] == pytest.approx(g["epsilon_user"] + 10.0)
    loose = ClvMechanism(epsilon=100.0, delta=0.05, dim=6, length=4)  # 32 documents: n * delta >= 1
    g = guarantee(loose, RewriteSettings(epsilon=100.0, delta=0.05), documents_per_user=40)
    assert g["epsilon_user"] == float("inf") and g["delta_user"] == 1.0 and g["epsilon_entity"]["32"] == float("inf")
    assert g["epsilon_entity"]["8"] < float("inf") and "epsilon_user_with_labels" not in g


def test_report_only_rebuilds_the_report_from_the_finished_jobs_and_runs_nothing(tmp_path, monkeypatch):
    """`experiments.dp_bart --report-only` (studies.dp_bart.compare): a job with a run directory is read
    from it, one without is read from the comparison's previous JSON in --out (a clean checkout has no run
    directories), one in neither is named as not finished; no job, rewriter or survival sample is run."""
    import studies.dp_bart as study
    from uedp.summary import write_summary

    real = json.loads(Path("docs/figures/dp_bart-synthetic-u100-classification.json").read_text())
    # a local job's summary as the study writes it (that committed run predates the device key: it ran on the CPU)
    template = {"device": "cpu", **real["results"]["dp_bart-clv-eps1000"]}

    def local(f1: float) -> dict[str, Any]:
        return {**template, "final": {**template["final"], "macro_f1": f1, "error": 1 - f1}}

    for name in ("run_local", "central_reference", "survival"):
        monkeypatch.setattr(study, name, lambda *a, **k: pytest.fail("--report-only ran something"))
    out, runs = tmp_path / "figures", tmp_path / "runs"
    out.mkdir()
    comparison = study.Comparison(dataset="synthetic", users=200, task="classification", epsilons=(1000.0,),
                                  variants=("clv",), pr_plus_epsilons=(1000.0,), replicates=2, out=out, runs=runs)
    stem = "dp_bart-synthetic-classification"
    prior = {"results": {"dp_bart-clv-eps1000": local(0.4)},
             "survival": {"dp_bart-clv-eps1000": {"bleu": 1.5, "fraction": 0.01, "example": ["a", "b"]}},
             "timing": {"dp_bart-clv-eps1000": 12.0}, "rewriter_training_s": {"dp_bart-clv-eps1000": 600.0}}
    (out / f"{stem}.json").write_text(json.dumps(prior))
    write_summary(runs / stem / "dp_bart-clv-eps1000-r1", local(0.6), kind="local")
    text = study.compare(comparison, report_only=True)
    assert (out / f"{stem}.md").read_text() == text
    assert "| DP-BART-CLV | 0.500 (0.400-0.600) |" in text  # one from the JSON, one from its run directory
    assert "| dp_bart-clv-eps1000 | 2 | 0.5 | 0.4 - 0.6 |" in text
    assert "dp_bart-clv-eps1000: 600 s" in text and "Compute: 12 s over the 1 timed jobs" in text
    assert "NOT FINISHED (not in the tables): dp_bart-clv-eps1e+09, uedp, user_dp, fedavg, central-original" in text
    written = json.loads((out / f"{stem}.json").read_text())
    assert written["survival"]["dp_bart-clv-eps1000"]["bleu"] == 1.5
    assert written["rewriter_training_s"] == {"dp_bart-clv-eps1000": 600.0}
    assert set(written["results"]) == {"dp_bart-clv-eps1000", "dp_bart-clv-eps1000-r1"}
