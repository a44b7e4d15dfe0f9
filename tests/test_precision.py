"""Mixed precision (model option `dtype`, uedp.models.precision) and gradient checkpointing: what is stored in which
dtype, that training and evaluation run under autocast, that what is exchanged stays float32, float16's loss
scaling, and that gradient checkpointing changes no gradient."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.tiny_checkpoints import tiny_checkpoint
from uedp.config import ClientTrainConfig, LoraConfig
from uedp.errors import ConfigError
from uedp.models.base import NEXT_WORD, UedpModel, get_weights, set_weights, trainable_parameters
from uedp.models.hf import build_bert, build_gpt2, build_hf
from uedp.models.lora import with_lora
from uedp.models.precision import LossScaler, autocast, parse_dtype, prepare
from uedp.pipeline import EncodedSentences
from uedp.tasks import evaluate, per_sentence_loss
from uedp.tokenization import Batch
from uedp.training import LocalTraining, batch_of, local_train


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("gpt2"), "gpt2")


@pytest.fixture(scope="module")
def gpt2_bf16_dir(tmp_path_factory):
    """A tiny gpt2 checkpoint saved in bfloat16 (its config.json records the dtype)."""
    from transformers import GPT2LMHeadModel

    directory = tiny_checkpoint(tmp_path_factory.mktemp("gpt2bf16"), "gpt2")
    GPT2LMHeadModel.from_pretrained(directory).to(torch.bfloat16).save_pretrained(directory)
    return directory


def _data(vocab: int, n: int = 12, length: int = 10, seed: int = 0) -> EncodedSentences:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (n, length), generator=gen)
    lengths = torch.randint(3, length + 1, (n,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    return EncodedSentences(ids * mask, mask, None)


def _training(**kw) -> LocalTraining:
    base = {"optimizer": "sgd", "lr": 0.5, "momentum": 0.0, "local_epochs": 1, "local_steps": 3, "batch_size": 4}
    return LocalTraining.from_config(ClientTrainConfig(**{**base, **kw}))


def test_the_dtype_option_is_checked_and_float32_is_the_default(gpt2_dir):
    with pytest.raises(ConfigError, match="model.options.dtype .* must be one of float32, bfloat16, float16"):
        parse_dtype("fp8", family="gpt2")
    with pytest.raises(ConfigError, match="model.options.dtype"):
        build_gpt2(vocab_size=300, pad_id=0, pretrained=str(gpt2_dir), dtype="half")
    from uedp.config import MODEL_DTYPES, RunConfig
    from uedp.models.precision import DTYPES

    assert tuple(DTYPES) == MODEL_DTYPES
    with pytest.raises(ConfigError, match="model.options.dtype must be one of"):  # before a run starts
        RunConfig.from_flat({"model.name": "gpt2", "model.options": '{"dtype": "fp8"}'})
    model = build_gpt2(vocab_size=300, pad_id=0, pretrained=str(gpt2_dir))
    assert model.compute_dtype == torch.float32 and model.release_dtype == "float32"
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_release_dtype_is_the_option_else_the_checkpoints_own(gpt2_dir, gpt2_bf16_dir):
    assert json.loads((gpt2_bf16_dir / "config.json").read_text()).get("dtype") == "bfloat16"
    own = build_hf(task=NEXT_WORD, vocab_size=300, pad_id=0, path=str(gpt2_bf16_dir))
    assert own.release_dtype == "bfloat16" and own.compute_dtype == torch.float32  # computes in float32 by default
    assert all(p.dtype == torch.float32 for p in own.parameters())
    chosen = build_hf(task=NEXT_WORD, vocab_size=300, pad_id=0, path=str(gpt2_bf16_dir), dtype="float16")
    assert chosen.release_dtype == "float16"
    assert build_gpt2(vocab_size=300, pad_id=0, pretrained=str(gpt2_dir), dtype="bfloat16").release_dtype == "bfloat16"
    assert build_gpt2(vocab_size=50, pad_id=0, n_layer=1, n_embd=16, n_head=2).release_dtype == "float32"


def test_bf16_on_cpu_trains_a_tiny_gpt2_and_exchanges_float32(gpt2_dir):
    model = build_gpt2(vocab_size=300, pad_id=0, pretrained=str(gpt2_dir), dtype="bfloat16")
    assert model.compute_dtype == torch.bfloat16
    data = _data(300)
    rows = torch.arange(len(data))
    before = get_weights(model)
    seen: list[torch.dtype] = []
    hook = model.hf.transformer.h[0].attn.c_attn.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    loss, steps = local_train(model, data, rows, torch.ones(len(data)), _training(),
                              generator=torch.Generator().manual_seed(0))
    hook.remove()
    assert steps == 3 and np.isfinite(loss)
    assert seen and all(d == torch.bfloat16 for d in seen)  # the forward ran under bf16 autocast
    assert all(p.dtype == torch.float32 for p in model.parameters())  # all trainable: float32 master weights
    after = get_weights(model)
    assert all(w.dtype == np.float32 for w in after)
    assert any(not np.array_equal(a, b) for a, b in zip(before, after))  # it trained
    seen.clear()
    hook = model.hf.transformer.h[0].attn.c_attn.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    result = evaluate(model, [batch_of(data, rows)])
    hook.remove()
    assert seen == [torch.bfloat16] and np.isfinite(result["perplexity"])  # evaluation under autocast too


def test_bf16_with_lora_stores_the_frozen_base_in_bf16_and_adapters_in_float32(gpt2_dir, gpt2_bf16_dir):
    for directory, loaded in ((gpt2_dir, torch.float32), (gpt2_bf16_dir, torch.bfloat16)):
        model = build_gpt2(vocab_size=300, pad_id=0, pretrained=str(directory), dtype="bfloat16")
        # loaded in bf16 only when the checkpoint holds bf16 (no trained weight starts rounded)
        assert {p.dtype for p in model.parameters()} == {loaded}
        model = with_lora(model, LoraConfig(r=2))
        prepare(model)
        frozen = [p for p in model.parameters() if not p.requires_grad]
        trained = [p for _, p in trainable_parameters(model)]
        assert frozen and trained
        assert all(p.dtype == torch.bfloat16 for p in frozen)
        assert all(p.dtype == torch.float32 for p in trained)
        data = _data(300)
        local_train(model, data, torch.arange(len(data)), torch.ones(len(data)), _training(),
                    generator=torch.Generator().manual_seed(0))
        assert all(p.dtype == torch.bfloat16 for p in frozen)
        weights = get_weights(model)
        assert all(w.dtype == np.float32 for w in weights) and len(weights) == len(trained)
        set_weights(model, weights)
        assert all(p.dtype == torch.float32 for _, p in trainable_parameters(model))


def test_a_frozen_bert_encoder_is_stored_in_the_dtype():
    model = build_bert(vocab_size=60, pad_id=0, num_labels=3, num_hidden_layers=1, hidden_size=16,
                       num_attention_heads=2, intermediate_size=32, freeze_encoder=True, dtype="bfloat16")
    prepare(model)
    assert all(p.dtype == torch.bfloat16 for p in model.hf.bert.parameters())
    assert all(p.dtype == torch.float32 for p in model.hf.classifier.parameters())
    batch = Batch(torch.randint(1, 60, (3, 5)), torch.ones(3, 5, dtype=torch.long), torch.tensor([0, 1, 2]),
                  torch.arange(3))
    loss = per_sentence_loss(model, batch)
    assert loss.dtype == torch.float32 and torch.isfinite(loss).all()
    loss.sum().backward()
    assert model.hf.classifier.weight.grad is not None


def test_float32_is_no_autocast_at_all():
    model = build_gpt2(vocab_size=50, pad_id=0, n_layer=1, n_embd=16, n_head=2)
    with autocast(model):
        assert not torch.is_autocast_enabled("cpu")


class _Fp16LM(UedpModel):
    """A next-word model computing in float16 (autocast on cpu) whose first backward gives inf gradients."""

    family = "fp16-test"

    def __init__(self, vocab: int) -> None:
        super().__init__(task=NEXT_WORD, pad_id=0)
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(vocab, 8)
        self.out = torch.nn.Linear(8, vocab)
        self.compute_dtype = torch.float16
        self.poison = 1  # backward passes left whose gradients are made inf
        self.out.weight.register_hook(self._poison)

    def _poison(self, grad: torch.Tensor) -> torch.Tensor:
        if self.poison > 0:
            self.poison -= 1
            return grad * float("inf")
        return grad

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.out(self.emb(batch.input_ids))


def test_float16_loss_scaling_skips_a_step_with_inf_gradients():
    data = _data(20)
    rows, w = torch.arange(len(data)), torch.ones(len(data))
    model = _Fp16LM(20)
    start = [p.detach().clone() for p in model.parameters()]
    outputs: list[torch.dtype] = []
    model.out.register_forward_hook(lambda m, i, o: outputs.append(o.dtype))
    _, steps = local_train(model, data, rows, w, _training(local_steps=1), generator=torch.Generator().manual_seed(0))
    assert steps == 1 and outputs == [torch.float16]
    assert all(torch.equal(a, b) for a, b in zip(start, model.parameters()))  # the inf step was skipped
    model.poison = 1
    local_train(model, data, rows, w, _training(local_steps=2), generator=torch.Generator().manual_seed(0))
    assert any(not torch.equal(a, b) for a, b in zip(start, model.parameters()))  # the second step was taken
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_loss_scaler_backs_off_and_grows():
    scaler = LossScaler(init_scale=8.0, growth_interval=2)
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.tensor([8.0, 16.0, float("inf")])
    assert scaler.unscale([p]) is False
    scaler.update(False)
    assert scaler.scale == 4.0 and scaler.skipped == 1
    p.grad = torch.tensor([4.0, 8.0, 12.0])
    assert scaler.unscale([p]) is True
    torch.testing.assert_close(p.grad, torch.tensor([1.0, 2.0, 3.0]))
    scaler.update(True)
    assert scaler.scale == 4.0
    scaler.update(True)
    assert scaler.scale == 8.0  # two good steps in a row: grown
    assert scaler.scaled(torch.tensor(2.0)).item() == 16.0


def _grads(model: UedpModel, batch: Batch) -> list[torch.Tensor]:
    model.train()
    model.zero_grad()
    per_sentence_loss(model, batch).mean().backward()
    return [p.grad.clone() for p in model.parameters()]


def test_gradient_checkpointing_gives_the_same_gradients():
    def build(gc: bool) -> UedpModel:
        torch.manual_seed(3)
        return build_gpt2(vocab_size=80, pad_id=0, n_layer=2, n_embd=16, n_head=2, dropout=0.0,
                          gradient_checkpointing=gc)

    plain, checkpointed = build(False), build(True)
    flag = "is_activation_checkpointing" if hasattr(plain.hf, "is_activation_checkpointing") else \
        "is_gradient_checkpointing"
    assert getattr(checkpointed.hf, flag) and not getattr(plain.hf, flag)
    calls: list[int] = []  # the recomputation: the first attention runs again in the backward when checkpointed
    for model in (plain, checkpointed):
        model.hf.transformer.h[0].attn.register_forward_hook(lambda m, i, o, calls=calls: calls.append(1))
    data = _data(80)
    batch = batch_of(data, torch.arange(len(data)))
    want = _grads(plain, batch)
    assert len(calls) == 1
    got = _grads(checkpointed, batch)
    assert len(calls) == 3
    for a, b in zip(want, got):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_gradient_checkpointing_is_checked():
    with pytest.raises(ConfigError, match="gradient_checkpointing .* must be true or false"):
        build_gpt2(vocab_size=50, pad_id=0, n_layer=1, n_embd=16, n_head=2, gradient_checkpointing="yes")
    from uedp.models.registry import build_model

    with pytest.raises(ConfigError, match="gradient_checkpointing"):
        build_model("lstm", task=NEXT_WORD, vocab_size=50, pad_id=0, gradient_checkpointing=True)
