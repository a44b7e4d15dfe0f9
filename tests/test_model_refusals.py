"""Bring your own model: what is refused before a run starts (docs/own-model.md), each a ConfigError raised when
the model or its tokenizer is built, naming the file, option or field; and the truncation counts task.max_len
gives (the server's evaluation set in its start lines, a node's training sentences in its own log only).

Tiny checkpoints (tests/tiny_checkpoints.py: GPT-2, Llama, and a BERT masked LM saved with its tokenizer), offline."""

from __future__ import annotations

import dataclasses
import io
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from client.update import NODE_LOGGER, log_trainable_share
from tests.helpers import instructions, tiny_config
from tests.tiny_checkpoints import tiny_checkpoint, tiny_tokenizer
from uedp.config import RunConfig
from uedp.errors import ConfigError
from uedp.models import build_model
from uedp.models.causal import check_causal
from uedp.models.checkpoints import SAMPLE_TEXT, TOKENIZER_FILES, check_encodes
from uedp.models.registry import build_tokenizer
from uedp.owners import model_shape
from uedp.pipeline import ModelShape, encode_sentences, load_user_data, new_model, owner_task, prepare, run_tokenizer
from uedp.privacy.sampling import RoundKey
from uedp.tokenization import TextTokenizer, load_hf_tokenizer, tokenizer_digest

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    from transformers import BertConfig, BertForMaskedLM

    root = tmp_path_factory.mktemp("checkpoints")
    dirs = {kind: tiny_checkpoint(root / kind, kind) for kind in ("gpt2", "llama")}
    torch.manual_seed(0)
    mlm = BertForMaskedLM(BertConfig(vocab_size=300, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=64, pad_token_id=0))
    mlm.save_pretrained(root / "bert-mlm")
    tiny_tokenizer("bert").save_pretrained(root / "bert-mlm")
    dirs["bert-mlm"] = root / "bert-mlm"
    bare = root / "no-tokenizer"  # config and weights, no tokenizer files
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(dirs["gpt2"] / name, bare / name)
    dirs["no-tokenizer"] = bare
    return dirs


def _config(out: Path, path: Path, *, lora: dict | None = None, task: dict | None = None, **options: Any) -> RunConfig:
    return tiny_config(out, model={"name": "hf", "options": {"path": str(path), **options}, "lora": lora or {}},
                       task={"name": "next_word", **(task or {})}, federation={"rounds": 1, "eval_every": 1})


# -- 1. the tokenizer ---------------------------------------------------------------------------------------------

def test_a_checkpoint_without_tokenizer_files_is_refused_on_the_server_and_on_a_node(checkpoints, tmp_path):
    bare = checkpoints["no-tokenizer"]
    with pytest.raises(ConfigError) as refused:
        build_tokenizer("hf", None, options={"path": str(bare)})
    message = str(refused.value)
    assert str(bare) in message and "no tokenizer files" in message
    assert all(name in message for name in TOKENIZER_FILES)
    cfg = _config(tmp_path, bare)
    with pytest.raises(ConfigError, match="no tokenizer files"):  # the server's start (and prepare)
        run_tokenizer(cfg, None)
    own = load_hf_tokenizer(checkpoints["gpt2"])  # a node given a tokenizer checks it against the directory's own
    with pytest.raises(ConfigError, match=f"{bare}.*no tokenizer files"):
        new_model(cfg, model_shape(own, owner_task(cfg)))
    # today's silent failure, for the record: transformers builds a one-token tokenizer from such a directory
    assert load_hf_tokenizer(bare).encode(SAMPLE_TEXT) == []


def _one_token_vocabulary() -> TextTokenizer:
    """A word-level tokenizer that knows no word: every word is [UNK]."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    backend = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "[BOS]": 2, "[EOS]": 3}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return TextTokenizer(backend, source="one-token.json")


def test_a_tokenizer_that_cannot_tell_sentences_apart_is_refused(checkpoints, tmp_path):
    degenerate = _one_token_vocabulary()
    assert len(set(degenerate.encode(SAMPLE_TEXT))) == 1
    with pytest.raises(ConfigError, match=r"my source: .*encodes the sample text .* \(1 distinct ids; at least 2"):
        check_encodes(degenerate, "my source")
    check_encodes(load_hf_tokenizer(checkpoints["gpt2"]), "gpt2")  # a real one passes
    # a checkpoint whose own tokenizer files hold such a tokenizer: refused where it is read, naming the directory
    from transformers import PreTrainedTokenizerFast

    directory = Path(shutil.copytree(checkpoints["gpt2"], tmp_path / "degenerate"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (directory / name).unlink()
    PreTrainedTokenizerFast(tokenizer_object=degenerate.backend, pad_token="[PAD]", unk_token="[UNK]",
                            bos_token="[BOS]", eos_token="[EOS]").save_pretrained(directory)
    with pytest.raises(ConfigError, match=f"{directory}.*its own tokenizer.*1 distinct ids"):
        build_tokenizer("hf", None, options={"path": str(directory)})
    # the project's public tokenizer passes the same check at the server's start
    tokenizer, info = run_tokenizer(tiny_config(tmp_path / "lstm"), None)
    assert info["source"] == "public" and len(set(tokenizer.encode(SAMPLE_TEXT))) >= 2


# -- 2. a non-causal model for next_word ------------------------------------------------------------------------

def test_a_masked_lm_checkpoint_is_refused_for_next_word(checkpoints):
    mlm = checkpoints["bert-mlm"]
    tok = load_hf_tokenizer(mlm)
    with pytest.raises(ConfigError) as refused:
        build_model("hf", task="next_word", vocab_size=tok.vocab_size, pad_id=tok.pad_id, path=str(mlm))
    message = str(refused.value)
    assert str(mlm) in message and "not causal (bidirectional attention)" in message and "next_word" in message
    # the same checkpoint as a classifier is not probed (its pooler is not in a masked LM's files: allowed here)
    build_model("hf", task="classification", num_labels=2, vocab_size=tok.vocab_size, pad_id=tok.pad_id,
                path=str(mlm), allow_missing=True)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_causal_checkpoints_pass(checkpoints, kind):
    tok = load_hf_tokenizer(checkpoints[kind])
    model = build_model("hf", task="next_word", vocab_size=tok.vocab_size, pad_id=tok.pad_id,
                        path=str(checkpoints[kind]))
    assert model.training  # the probe ran in eval mode and gave the mode back


def test_the_projects_models_pass_and_the_probe_leaves_the_random_state_alone():
    for name, options in (("gpt2", {"n_layer": 1, "n_embd": 16, "n_head": 2}), ("lstm", {"emb_dim": 8,
                                                                                         "hidden_dim": 8})):
        model = build_model(name, task="next_word", vocab_size=300, pad_id=0, **options)
        state = torch.get_rng_state()
        check_causal(model, vocab_size=300, pad_id=0, where=name)
        assert torch.equal(state, torch.get_rng_state())

    class Peeking(torch.nn.Module):  # position t sees the sequence's last token: not causal
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(300, 4)

        def forward(self, batch):
            e = self.emb(batch.input_ids)
            return e + e[:, -1:]

    with pytest.raises(ConfigError, match="peeking: the model is not causal"):
        check_causal(Peeking(), vocab_size=300, pad_id=0, where="peeking")


# -- 3. allow_missing with frozen weights -------------------------------------------------------------------------

def test_allow_missing_with_lora_is_refused_at_config_time_and_at_build(checkpoints, tmp_path):
    with pytest.raises(ConfigError) as refused:
        _config(tmp_path, checkpoints["llama"], lora={"r": 2}, allow_missing=True)
    assert "model.options.allow_missing" in str(refused.value) and "model.lora.r" in str(refused.value)
    cfg = _config(tmp_path, checkpoints["llama"], allow_missing=True)  # alone: allowed (said on stderr)
    bypassed = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, lora=dataclasses.replace(
        cfg.model.lora, r=2)))  # a config built without validation meets the build's own check
    with pytest.raises(ConfigError, match=r"model.options.allow_missing = true with model.lora.r = 2"):
        new_model(bypassed, model_shape(load_hf_tokenizer(checkpoints["llama"]), owner_task(bypassed)))
    new_model(cfg, model_shape(load_hf_tokenizer(checkpoints["llama"]), owner_task(cfg)))


# -- 4. task.max_len above the model's positions -------------------------------------------------------------------

def test_max_len_above_the_models_positions_is_refused_at_build(checkpoints, tmp_path):
    tok = load_hf_tokenizer(checkpoints["gpt2"])  # 64 positions
    with pytest.raises(ConfigError, match=r"task.max_len = 65 is above the model's 64 positions.*task.max_len <= 64"):
        new_model(_config(tmp_path, checkpoints["gpt2"], task={"max_len": 65}), ModelShape(
            tok.vocab_size, tok.pad_id, None, tokenizer_digest(tok)))
    model = new_model(_config(tmp_path, checkpoints["gpt2"], task={"max_len": 64}), ModelShape(
        tok.vocab_size, tok.pad_id, None, tokenizer_digest(tok)))
    assert model.max_positions == 64
    cfg = tiny_config(tmp_path, model={"name": "gpt2", "options": {"n_layer": 1, "n_embd": 16, "n_head": 2,
                                                                    "n_positions": 8}})
    with pytest.raises(ConfigError, match="task.max_len = 16 is above the model's 8 positions"):
        new_model(cfg, ModelShape(300, 0, None))


# -- 5. truncation counts ----------------------------------------------------------------------------------------

def test_the_truncation_count_is_the_framed_length_above_max_len(checkpoints):
    tok = load_hf_tokenizer(checkpoints["gpt2"])
    texts = ["Hi", "The bus was late this morning.", "A long walk by the sea."]
    lengths = [len(tok.encode(t)) + 2 for t in texts]  # with the start and end tokens
    enc = encode_sentences(tok, texts, None, task="next_word", max_len=4)
    cut = enc.truncation()
    assert cut is not None and cut.sentences == 3 and cut.longest == max(lengths)
    assert cut.cut == sum(n > 4 for n in lengths) and enc.ids.shape[1] == 4
    assert cut.line("evaluation").startswith(f"task.max_len 4: {cut.cut / 3:.1%} of the 3 evaluation sentences")
    wide = encode_sentences(tok, texts, None, task="next_word", max_len=max(lengths)).truncation()
    assert wide is not None and wide.cut == 0


def test_the_server_says_how_many_evaluation_sentences_are_cut_and_a_node_only_in_its_own_log(tmp_path, caplog):
    from server.setup import Components, setup

    cfg = tiny_config(tmp_path, task={"max_len": 4})
    stream = io.StringIO()
    ctx, _ = setup(cfg, components=Components(), stream=stream)
    lines = [line for line in stream.getvalue().splitlines() if line.startswith("task.max_len 4:")]
    assert len(lines) == 1 and f"of the {len(ctx.test):,} evaluation sentences are cut" in lines[0]
    assert ctx.test.truncation().cut > 0 and "training sentences" not in stream.getvalue()
    assert "longest" not in lines[0]  # one sentence's length stays off the server's log
    prepare(cfg)
    data = load_user_data(cfg, 1)
    ins, _ = instructions(round=1, mechanism="uedp", q_e=0.5, q_s=0.5, k_cap=2, m_max=8, slot=3, beta=0.5, w_u=1.0,
                          private=True, seed=7, key=RoundKey(bytes(16)))
    with caplog.at_level(logging.INFO, logger=NODE_LOGGER):
        log_trainable_share(data, ins)
    node = [r.getMessage() for r in caplog.records if r.name == NODE_LOGGER]
    expected = data.encoded.truncation()
    assert len(node) == 1 and expected is not None and expected.cut > 0
    assert node[0].endswith(expected.line("training"))


def test_robertas_positions_leave_out_its_padding_offset():
    """RoBERTa numbers positions from pad_token_id + 1: of max_position_embeddings 514 with pad 1, 512 are real."""
    from transformers import GPT2Config, RobertaConfig

    from uedp.models.hf import max_positions

    assert max_positions(RobertaConfig(max_position_embeddings=514, pad_token_id=1)) == 512
    assert max_positions(GPT2Config(n_positions=64)) == 64
