"""Models: forward/backward of every family on CPU, tied weights, padding invariance, the registry's option
checks, offline hub handling, local pretrained directories, and the weight exchange format."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from uedp.data.corpus import CorpusBuilder
from uedp.errors import ConfigError, UedpError
from uedp.models import build_model, build_model_and_tokenizer, get_weights, set_weights
from uedp.models.lstm import LockedDropout
from uedp.pipeline import encode_sentences
from uedp.tasks import per_sentence_loss, weighted_loss
from uedp.tokenization import TokenizerTraining, pad_sequences
from uedp.training import batch_of

SENTENCES = [
    "Alice met Bob in Paris on 3 May.",
    "Write to carol@example.com today!",
    "The cat sat on the mat.",
    "Numbers like 12345 and 678 are fine.",
]


@pytest.fixture(scope="module")
def corpus():
    b = CorpusBuilder("models")
    for i in range(60):
        b.add(f"u{i % 6}", SENTENCES[i % 4], label=i % 3, split="train" if i < 48 else "test")
    return b.build(seed=0, label_names=["x", "y", "z"])


CASES = [
    ("lstm", "next_word", {}),
    ("lstm", "classification", {"pooling": "last"}),
    ("gpt2", "next_word", {}),
    ("bert", "classification", {}),
    ("minilm", "classification", {}),
]


@pytest.mark.parametrize(("name", "task", "options"), CASES, ids=[f"{n}-{t}" for n, t, _ in CASES])
def test_forward_backward_every_family(corpus, name: str, task: str, options: dict) -> None:
    torch.manual_seed(0)
    model, tok = build_model_and_tokenizer(
        name, task=task, corpus=corpus, tokenizer_config=TokenizerTraining(vocab_size=400), **options
    )
    assert model.task == task and model.family == name
    if name == "minilm":
        assert tok.vocab_size == 30522  # its own pretrained tokenizer, not one trained on the corpus
    batch = batch_of(encode_sentences(tok, SENTENCES[:2], [0, 2], task=task, max_len=24), torch.arange(2))
    model.train()
    losses = per_sentence_loss(model, batch)
    assert losses.shape == (2,) and torch.isfinite(losses).all() and (losses > 0).all()
    weighted_loss(losses, torch.tensor([1.0, 0.5])).backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, pname
        assert torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, pname


def test_lstm_lm_weights_are_tied() -> None:
    torch.manual_seed(0)
    tied = build_model("lstm", task="next_word", vocab_size=50, pad_id=0, emb_dim=16, hidden_dim=24)
    untied = build_model("lstm", task="next_word", vocab_size=50, pad_id=0, emb_dim=16, hidden_dim=24,
                         tie_weights=False)
    assert tied.decoder is None and untied.decoder is not None  # tied: the decoder is the embedding matrix
    assert tied.projection is not None  # hidden 24 != emb 16
    assert sum(1 for p in tied.parameters() if p.shape == (50, 16)) == 1  # one matrix, counted once
    batch = pad_sequences([[1, 2, 3, 4]], pad_id=0)  # token 7 is not in the input
    for model, should_change in ((tied, True), (untied, False)):
        model.eval()
        before = model(batch)[..., 7].clone()
        with torch.no_grad():
            model.embedding.weight[7] += 1.0
        changed = not torch.allclose(model(batch)[..., 7], before)  # a +1.0 change vs float32 noise: defaults
        assert changed == should_change, model.tie_weights


def test_gpt2_weights_are_tied() -> None:
    model = build_model("gpt2", task="next_word", vocab_size=60, pad_id=0)
    assert model.hf.lm_head.weight is model.hf.transformer.wte.weight
    # The exchange format counts the shared matrix once.
    assert len(get_weights(model)) == len(list(model.parameters()))


@pytest.mark.parametrize(
    ("name", "task", "num_labels"),
    [("lstm", "next_word", None), ("lstm", "classification", 3), ("gpt2", "next_word", None),
     ("bert", "classification", 3)],
)
def test_padding_does_not_change_logits(name: str, task: str, num_labels: int | None) -> None:
    torch.manual_seed(0)
    model = build_model(name, task=task, vocab_size=40, pad_id=0, num_labels=num_labels).eval()
    short, long = [5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15]
    alone = model(pad_sequences([short], pad_id=0))
    padded = model(pad_sequences([short, long], pad_id=0))
    # float32 kernels on another batch shape may sum in another order (~1e-7 relative): 1e-5
    if task == "next_word":
        torch.testing.assert_close(padded[0, : len(short)], alone[0], atol=1e-5, rtol=1e-5)
    else:
        torch.testing.assert_close(padded[0], alone[0], atol=1e-5, rtol=1e-5)


def test_locked_dropout_mask_is_shared_over_time() -> None:
    torch.manual_seed(0)
    drop = LockedDropout(0.5).train()
    out = drop(torch.ones(4, 10, 8))
    assert torch.equal(out, out[:, :1].expand_as(out))
    assert set(out.unique().tolist()) == {0.0, 2.0}
    assert torch.equal(drop.eval()(torch.ones(2, 3, 4)), torch.ones(2, 3, 4))


def test_registry_rejects_bad_options() -> None:
    common = {"vocab_size": 30, "pad_id": 0}
    with pytest.raises(ConfigError, match="hiden_dim"):
        build_model("lstm", task="next_word", hiden_dim=8, **common)
    with pytest.raises(ConfigError, match="pooling"):
        build_model("lstm", task="next_word", pooling="mean", **common)
    with pytest.raises(ConfigError, match="tie_weights"):
        build_model("lstm", task="classification", num_labels=2, tie_weights=True, **common)
    with pytest.raises(ConfigError, match="does not support"):
        build_model("gpt2", task="classification", num_labels=2, **common)
    with pytest.raises(ConfigError, match="num_labels"):
        build_model("bert", task="classification", **common)
    with pytest.raises(ConfigError, match="unknown model"):
        build_model("rnn", task="next_word", **common)
    with pytest.raises(ConfigError, match="unknown task"):
        build_model("lstm", task="translation", **common)
    with pytest.raises(ConfigError, match="embedding has 30522"):
        build_model("minilm", task="classification", num_labels=2, vocab_size=40000, pad_id=0)


def test_hub_names_need_network_and_are_refused_offline(monkeypatch, tmp_path) -> None:
    import huggingface_hub

    calls = []

    def fake_download(*args, **kwargs):
        calls.append(args)
        raise ConnectionError("no route to host")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UedpError, match="local path"):
        build_model("gpt2", task="next_word", vocab_size=50257, pad_id=0, pretrained="openai-community/gpt2")
    assert calls == []  # offline: the hub is not even tried
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    with pytest.raises(UedpError, match="local path"):
        build_model("bert", task="classification", num_labels=2, vocab_size=10, pad_id=0,
                    pretrained="bert-base-uncased")
    assert calls == [("bert-base-uncased",)]
    with pytest.raises(ConfigError, match="does not exist"):
        build_model("gpt2", task="next_word", vocab_size=10, pad_id=0, pretrained=str(tmp_path / "missing"))


def test_pretrained_from_local_directory(tmp_path) -> None:
    torch.manual_seed(0)
    source = build_model("gpt2", task="next_word", vocab_size=70, pad_id=0, n_layer=1, n_embd=32)
    source.hf.save_pretrained(tmp_path / "gpt2")
    loaded = build_model("gpt2", task="next_word", vocab_size=70, pad_id=0, pretrained=str(tmp_path / "gpt2"))
    for a, b in zip(get_weights(source), get_weights(loaded)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ConfigError, match="own tokenizer"):
        build_model("gpt2", task="next_word", vocab_size=71, pad_id=0, pretrained=str(tmp_path / "gpt2"))


def test_get_set_weights_round_trip_and_frozen_encoder() -> None:
    torch.manual_seed(0)
    a = build_model("lstm", task="classification", num_labels=3, vocab_size=30, pad_id=0, hidden_dim=16)
    torch.manual_seed(1)
    b = build_model("lstm", task="classification", num_labels=3, vocab_size=30, pad_id=0, hidden_dim=16)
    batch = pad_sequences([[3, 4, 5], [6, 7]], pad_id=0)
    assert not torch.allclose(a.eval()(batch), b.eval()(batch))  # other seeds: O(1) apart, far beyond defaults
    set_weights(b, get_weights(a))
    torch.testing.assert_close(a(batch), b(batch))  # the same weights, the same float32 ops: defaults suffice
    with pytest.raises(ValueError, match="arrays"):
        set_weights(b, get_weights(a)[:-1])

    frozen = build_model("bert", task="classification", num_labels=2, vocab_size=30, pad_id=0,
                         freeze_encoder=True)
    names = [n for n, p in frozen.named_parameters() if p.requires_grad]
    assert names and all(n.startswith("hf.classifier.") for n in names)
    assert len(get_weights(frozen)) == len(names)


@pytest.mark.parametrize(("name", "task"), [("lstm", "next_word"), ("lstm", "classification")])
def test_lstm_learns_a_tiny_problem(name: str, task: str) -> None:
    torch.manual_seed(0)
    model = build_model(name, task=task, vocab_size=20, pad_id=0, emb_dim=16, hidden_dim=32,
                        num_labels=2 if task == "classification" else None)
    seqs = [[1, 5, 6, 7, 8, 9, 2], [1, 10, 11, 12, 2]] * 4
    batch = pad_sequences(seqs, pad_id=0, labels=[0, 1] * 4)
    before = per_sentence_loss(model.eval(), batch).mean().item()
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    model.train()
    for _ in range(40):
        opt.zero_grad()
        per_sentence_loss(model, batch).mean().backward()
        opt.step()
    after = per_sentence_loss(model.eval(), batch).mean().item()
    assert after < 0.3 * before, (before, after)
