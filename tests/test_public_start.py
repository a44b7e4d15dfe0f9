"""Public starts (model.init, uedp/pretraining.py) and the fixed evaluation subset (federation.eval_sentences)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from runtime.local_grid import run_local
from tests.helpers import tiny_config
from uedp.errors import ConfigError
from uedp.models.public_start import load_public_start, save_public_start
from uedp.pipeline import ModelShape, load_split, new_model, prepare, pretrain_run, run_tokenizer
from uedp.pretraining import pretrain, public_text


@pytest.fixture(scope="module")
def public_start(tmp_path_factory):
    """A tiny model pretrained on 100 personas of public synthetic text, saved as a public start."""
    tmp = tmp_path_factory.mktemp("public_start")
    cfg = tiny_config(tmp / "run")
    texts, description = public_text("synthetic", public_users=100)
    model, tokenizer, history = pretrain(pretrain_run(cfg), texts, epochs=1, lr=3e-3, batch_size=32)
    path = tmp / "start.pt"
    save_public_start(path, model, model_name=cfg.model.name, model_options=cfg.model.option_dict(),
                      tokenizer=tokenizer, corpus=description, details={"epochs": 1})
    return cfg, path, history


def test_pretraining_on_public_text_lowers_held_out_perplexity(public_start):
    _, _, history = public_start
    assert history[1]["perplexity"] < 0.5 * history[0]["perplexity"]


def test_a_run_starts_from_the_public_start_and_says_so(public_start, tmp_path):
    cfg, path, _ = public_start
    scratch = run_local(replace(cfg, federation=replace(cfg.federation, out_dir=str(tmp_path / "scratch"))))
    started = run_local(replace(cfg, model=replace(cfg.model, init=str(path)),
                                federation=replace(cfg.federation, out_dir=str(tmp_path / "init"))))
    assert scratch["initial_model"] == {"source": "random"}
    assert started["initial_model"]["source"] == "public"
    assert started["initial_model"]["corpus"].startswith("synthetic-public")
    # the initial evaluation is the pretrained model's: far below a random model's on the users' test text
    assert started["initial"]["perplexity"] < 0.5 * scratch["initial"]["perplexity"]
    saved = json.loads((tmp_path / "init" / "summary.json").read_text())
    assert saved["initial_model"]["file"] == str(path)


def test_a_public_start_made_for_another_model_is_refused(public_start, tmp_path):
    cfg, path, _ = public_start
    other = replace(cfg, model=replace(cfg.model, options='{"emb_dim": 16, "hidden_dim": 24}', init=str(path)),
                    federation=replace(cfg.federation, out_dir=str(tmp_path / "other")))
    with pytest.raises(ConfigError, match=r"model.init .*start.pt: field 'options'"):
        run_local(other)
    tokenizer, _ = run_tokenizer(cfg, None)
    model = new_model(cfg, ModelShape(tokenizer.vocab_size, tokenizer.pad_id, None))
    bad = tmp_path / "bad.pt"
    torch.save({"weights": []}, bad)
    with pytest.raises(ConfigError, match=r"bad.pt: not a public-start file"):
        load_public_start(bad, model, model_name=cfg.model.name, model_options=cfg.model.option_dict(),
                          tokenizer=tokenizer)
    with pytest.raises(ConfigError, match="no such file"):
        load_public_start(tmp_path / "missing.pt", model, model_name=cfg.model.name,
                          model_options=cfg.model.option_dict(), tokenizer=tokenizer)


def test_eval_sentences_is_a_fixed_subset_of_the_test_split(tmp_path):
    cfg = tiny_config(tmp_path)
    prepare(cfg)
    full = load_split(cfg, "test")
    k = len(full) // 2
    a, b = load_split(cfg, "test", limit=k), load_split(cfg, "test", limit=k)
    assert len(a) == k and torch.equal(a.ids, b.ids)  # the same subset every time
    rows = {tuple(r.tolist()) for r in full.ids}
    assert all(tuple(r.tolist()) in rows for r in a.ids)
    assert len(load_split(cfg, "test", limit=len(full) + 5)) == len(full)
    with pytest.raises(ConfigError, match="eval_sentences"):
        replace(cfg, federation=replace(cfg.federation, eval_sentences=-1)).validate()


@pytest.mark.e2e  # runs the pretraining command as a user would (a subprocess)
def test_a_public_gpt2_start_in_hugging_face_format_starts_a_run_and_is_refused_for_its_own_text(tmp_path):
    """experiments.pretrain --hf-out: a GPT-2 pretrained on public text is written as a checkpoint directory that
    records the project tokenizer's digest and its public corpus; a run starts from it with model hf and the
    project's tokenizer (its first evaluation is the pretrained model's), and the server refuses it for a run whose
    private text is that corpus, as it refuses such a model.init start."""
    from server.setup import describe_model
    from uedp.models.checkpoints import PUBLIC_CORPUS_KEY
    from uedp.public_corpora import public_source

    size = {"n_layer": 1, "n_embd": 32, "n_head": 2}
    folder = tmp_path / "gpt2-public"
    subprocess.run([sys.executable, "-m", "experiments.pretrain", "--public", "synthetic", "--public-users", "20",
                    "--epochs", "1", "--out", str(tmp_path / "gpt2.pt"), "--hf-out", str(folder), "--set",
                    "model.name=gpt2", f"model.options={json.dumps(size)}", "tokenizer.vocab_size=300",
                    "task.max_len=16"], cwd=Path(__file__).parents[1], check=True, capture_output=True, timeout=300)
    record = json.loads((tmp_path / "gpt2.json").read_text())
    description, history = record["corpus"], record["history"]
    config = json.loads((folder / "config.json").read_text())
    assert config[PUBLIC_CORPUS_KEY] == description and config["uedp_tokenizer_digest"]
    assert "public text" in (folder / "README.md").read_text()

    run = tiny_config(tmp_path / "run", model={"name": "hf", "options": {"path": str(folder), "tokenizer": "project"},
                                              "lora": {"r": 4}}, federation={"rounds": 1, "eval_every": 1},
                      strategy={"name": "fedavg"})  # noiseless: no accounting to wait for
    summary = run_local(run)
    assert summary["base_model"]["public_corpus"] == description
    assert summary["initial"]["perplexity"] < 0.5 * history[0]["perplexity"]  # the pretrained model, not random

    bbc = public_source("bbc_news").pretraining_description()
    config[PUBLIC_CORPUS_KEY] = bbc if bbc.startswith("bbc_news") else f"bbc_news: {bbc}"
    (folder / "config.json").write_text(json.dumps(config))
    on_bbc = replace(run, dataset=replace(run.dataset, name="bbc_news", options="{}"))
    tokenizer, _ = run_tokenizer(run, None)
    start = new_model(run, ModelShape(tokenizer.vocab_size, tokenizer.pad_id, None))
    with pytest.raises(ConfigError, match=r"model 'hf' checkpoint .*gpt2-public.*not public"):
        describe_model(on_bbc, start, io.StringIO())
