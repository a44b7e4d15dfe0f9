"""Public starts (model.init, uedp/pretraining.py) and the fixed evaluation subset (federation.eval_sentences)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from runtime.local_grid import run_local
from tests.helpers import tiny_config
from uedp.errors import ConfigError
from uedp.models.public_start import load_public_start, save_public_start
from uedp.pipeline import ModelShape, load_split, new_model, prepare, run_tokenizer
from uedp.pretraining import pretrain, public_text


@pytest.fixture(scope="module")
def public_start(tmp_path_factory):
    """A tiny model pretrained on 100 personas of public synthetic text, saved as a public start."""
    tmp = tmp_path_factory.mktemp("public_start")
    cfg = tiny_config(tmp / "run")
    texts, description = public_text("synthetic", public_users=100)
    model, tokenizer, history = pretrain(cfg, texts, epochs=1, lr=3e-3, batch_size=32)
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
