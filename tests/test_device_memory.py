"""A GPU's memory and a run's device, on the CPU: the simulation's GPU share sized by a model's memory
(uedp.devices.actors_per_gpu, runtime.simulate.gpu_share, federation.client_gpus), the one device copy that
evaluation refreshes in place (uedp.devices.evaluation_model), public pretraining on federation.device
(uedp.pretraining), and experiments/device_check.py's transformer jobs and table, rehearsed with `--device cpu`
at a tiny size (the GPU run itself is not run by CI)."""

from __future__ import annotations

import copy
import io
import json
import math
import os
import shlex
import subprocess
import sys

import pytest
import torch

from runtime.simulate import gpu_share, optimizer_states, run_model_size
from studies.device_check import (
    EPSILONS,
    TransformerResult,
    round_seconds,
    transformer_config,
    transformer_jobs,
    transformer_table,
)
from tests.helpers import tiny_config
from uedp.config import RunConfig
from uedp.devices import (
    ACTIVATION_BYTES,
    CUDA_CONTEXT_BYTES,
    USABLE_SHARE,
    actors_per_gpu,
    client_gpu_bytes,
    evaluation_model,
    model_memory,
)
from uedp.errors import ConfigError
from uedp.pipeline import EncodedSentences
from uedp.training import evaluate_encoded

GIB, MIB = 2**30, 2**20
OVERHEAD = ACTIVATION_BYTES + CUDA_CONTEXT_BYTES  # 1,012 MiB a client beyond its tensors


# --- actors per GPU, with numbers ---------------------------------------------------------------------------


def test_a_clients_need_is_weights_gradients_optimizer_states_and_an_allowance():
    assert OVERHEAD == 1012 * MIB
    # 1B float32 parameters, all trained with Adam: 4 GB weights + 4 GB gradients + 8 GB Adam states
    assert client_gpu_bytes(4 * 10**9, 4 * 10**9, optimizer_states=2) == 16 * 10**9 + OVERHEAD
    assert client_gpu_bytes(4 * 10**9, 4 * 10**9, optimizer_states=0) == 8 * 10**9 + OVERHEAD  # plain SGD
    # LoRA on a bfloat16 base of 1B parameters: 2 GB of frozen weights, 8 MiB of float32 adapters
    assert client_gpu_bytes(2 * 10**9 + 8 * MIB, 8 * MIB) == 2 * 10**9 + 32 * MIB + OVERHEAD
    with pytest.raises(ValueError):
        client_gpu_bytes(-1, 0)


def test_actors_per_gpu_is_what_fits_in_the_usable_memory_capped_by_the_cpus():
    h100 = 80 * GIB
    usable = int(h100 * USABLE_SHARE)
    assert usable == 77_309_411_328
    # the default LSTM (~1M parameters, 4 MiB): 1,028 MiB each, 71 would fit; the 16 CPUs run 16
    assert actors_per_gpu(4 * MIB, 4 * MIB, h100, 16) == 16
    assert actors_per_gpu(4 * MIB, 4 * MIB, h100, 1000) == usable // (16 * MIB + OVERHEAD) == 71
    # 1B float32 parameters, full fine-tuning with Adam: 17.06 GB each, 4 on an 80 GiB GPU (not 16)
    assert actors_per_gpu(4 * 10**9, 4 * 10**9, h100, 16) == 4
    assert actors_per_gpu(4 * 10**9, 4 * 10**9, h100, 16, optimizer_states=0) == 8  # SGD: 9.06 GB
    # the same model under LoRA in bfloat16: 3.07 GB each, 25 fit, the CPUs bound it
    assert actors_per_gpu(2 * 10**9, 8 * MIB, h100, 16) == 16
    assert actors_per_gpu(2 * 10**9, 8 * MIB, h100, 64) == 25
    # 7B float32 with Adam on a 24 GiB GPU: not even one
    assert actors_per_gpu(28 * 10**9, 28 * 10**9, 24 * GIB, 16) == 0
    with pytest.raises(ValueError, match="gpu_bytes"):
        actors_per_gpu(1, 1, 0, 16)
    with pytest.raises(ValueError, match="cpus"):
        actors_per_gpu(1, 1, GIB, 0)


def test_model_memory_counts_every_tensor_at_its_dtype_and_the_trainable_ones():
    model = torch.nn.Sequential(torch.nn.Linear(10, 5), torch.nn.Linear(5, 3).to(torch.bfloat16))
    model.register_buffer("steps", torch.zeros(4, dtype=torch.int64))
    model[1].weight.requires_grad_(False)
    assert model_memory(model) == (55 * 4 + 18 * 2 + 4 * 8, 55 * 4 + 3 * 2)


def test_optimizer_states_follow_the_local_optimizer():
    assert optimizer_states(RunConfig()) == 0  # sgd without momentum
    assert optimizer_states(RunConfig.from_flat({"train.momentum": 0.9})) == 1
    assert optimizer_states(RunConfig.from_flat({"train.optimizer": "adam"})) == 2
    assert optimizer_states(RunConfig.from_flat({"train.optimizer": "adamw"})) == 2


def test_a_bad_client_gpus_is_refused_when_the_config_is_read():
    for bad in (-0.5, 1.5, float("nan")):
        with pytest.raises(ConfigError, match="federation.client_gpus"):
            RunConfig.from_flat({"federation.client_gpus": bad})


# --- the simulation's share -----------------------------------------------------------------------------------


@pytest.fixture
def one_gpu(monkeypatch):
    """A 16-core machine whose torch sees one GPU of 24 GiB."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: type("P", (), {"total_memory": 24 * GIB})())
    monkeypatch.setattr("runtime.simulate.os.cpu_count", lambda: 16)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def test_the_share_is_sized_by_the_models_memory(one_gpu):
    cuda = RunConfig.from_flat({"federation.device": "cuda", "train.optimizer": "adam"})
    # 1B float32 parameters with Adam: 17.06 GB each; 24 GiB x 0.9 = 23.2 GB: one client on the GPU
    share, line = gpu_share(cuda, model_size=(4 * 10**9, 4 * 10**9))
    assert share == 1.0 and "1 client(s) per GPU" in line and "WARNING" not in line
    # 250M float32 parameters with Adam: 5.01 GB each, 4 fit
    share, line = gpu_share(cuda, model_size=(10**9, 10**9))
    assert share == 0.25 and "4 client(s) per GPU on 1 GPU(s)" in line and "24.0 GiB" in line
    # 3 fit: Ray's share is rounded down to 1e-4, so that 3 shares fit in one GPU
    need = int(24 * GIB * USABLE_SHARE) // 3 - OVERHEAD
    share, _ = gpu_share(cuda, model_size=(need // 4, need // 4))
    assert share == 0.3333 and 3 * share <= 1
    # a small model: the CPUs bound it (16 at once; 4 with 4 CPUs a client)
    assert gpu_share(cuda, model_size=(4 * MIB, 4 * MIB))[0] == 1 / 16
    assert gpu_share(cuda, client_cpus=4, model_size=(4 * MIB, 4 * MIB))[0] == 0.25


def test_a_model_that_does_not_fit_gets_a_whole_gpu_and_a_warning(one_gpu):
    share, line = gpu_share(RunConfig.from_flat({"federation.device": "cuda"}), model_size=(28 * 10**9, 28 * 10**9))
    assert share == 1.0 and "WARNING" in line and "may not fit" in line and "model.lora" in line


def test_federation_client_gpus_overrides_the_estimate(one_gpu):
    cfg = RunConfig.from_flat({"federation.device": "cuda", "federation.client_gpus": 0.5})
    assert cfg.federation.client_gpus == 0.5 and RunConfig().federation.client_gpus == "auto"
    assert gpu_share(cfg) == (0.5, "GPU share: 0.5 GPU per client (federation.client_gpus)")  # no model built
    assert gpu_share(cfg, client_gpus=0.2)[0] == 0.2  # simulate(..., client_gpus=) before the config
    # "auto" (0 its run-config spelling): sized by memory (plain SGD: 2 GB + the allowance, 7 fit; the share
    # rounded down to 1e-4)
    assert gpu_share(cfg, client_gpus="auto", model_size=(10**9, 10**9))[0] == 0.1428
    assert gpu_share(cfg, client_gpus=0, model_size=(10**9, 10**9))[0] == 0.1428
    assert gpu_share(RunConfig.from_flat({"federation.client_gpus": 2}))[0] == 2.0  # whole GPUs
    for bad in (-1, 1.5):
        with pytest.raises(ConfigError, match=r'federation\.client_gpus must be "auto" \(sized by the model'):
            gpu_share(RunConfig.from_flat({"federation.client_gpus": bad}))
    for bad in (-0.5, math.inf, math.nan):
        with pytest.raises(ConfigError, match=r"^client_gpus must be"):
            gpu_share(cfg, client_gpus=bad)


def test_the_run_model_is_sized_from_the_prepared_run(tmp_path, one_torch_thread):
    from uedp.pipeline import load_manifest, new_model

    cfg = tiny_config(tmp_path)
    total, trainable = run_model_size(cfg)
    parameters = sum(p.numel() for p in new_model(cfg, load_manifest(cfg)).parameters())
    assert total == trainable == 4 * parameters > 0  # float32, every weight trained, no buffer


# --- evaluation on a device: one copy, refreshed in place -----------------------------------------------------


def _lstm_and_data():
    from uedp.models.lstm import LSTMLanguageModel

    torch.manual_seed(0)
    model = LSTMLanguageModel(vocab_size=40, pad_id=0, emb_dim=8, hidden_dim=8, num_layers=1)
    ids = torch.randint(1, 40, (12, 9))
    mask = torch.ones_like(ids)
    mask[::3, 6:] = 0
    return model, EncodedSentences(ids * mask, mask, None)


def test_the_device_copy_is_made_once_and_refreshed_in_place(monkeypatch):
    model, data = _lstm_and_data()
    assert evaluation_model(model, "cpu") is model  # the CPU: the model itself, no copy
    calls = []
    real = copy.deepcopy
    monkeypatch.setattr(copy, "deepcopy", lambda obj, *a: calls.append(type(obj).__name__) or real(obj, *a))
    first = evaluation_model(model, "cpu", always_copy=True)
    assert calls == ["LSTMLanguageModel"] and first is not model
    assert evaluate_encoded(first, data) == evaluate_encoded(model, data)
    with torch.no_grad():  # the server's update, in place
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    second = evaluation_model(model, "cpu", always_copy=True)
    assert calls == ["LSTMLanguageModel"] and second is first  # no second deep copy
    assert evaluate_encoded(second, data) == evaluate_encoded(model, data)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), second.state_dict().values()))
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(model.parameters(), second.parameters()))


def test_a_copy_whose_frozen_weights_mixed_precision_cast_is_still_refreshed_in_place(monkeypatch):
    """Mixed precision casts the copy's frozen weights to bfloat16 at its first forward (the server's model, never
    run, keeps float32 ones): the next evaluation copies into it, cast, instead of a deep copy per evaluation."""
    model, _ = _lstm_and_data()
    kept = evaluation_model(model, "cpu", always_copy=True)
    with torch.no_grad():
        kept.embedding.weight.data = kept.embedding.weight.data.to(torch.bfloat16)  # what prepare does
        model.embedding.weight.add_(0.5)
    calls = []
    real = copy.deepcopy
    monkeypatch.setattr(copy, "deepcopy", lambda obj, *a: calls.append(type(obj).__name__) or real(obj, *a))
    assert evaluation_model(model, "cpu", always_copy=True) is kept and calls == []
    assert kept.embedding.weight.dtype == torch.bfloat16
    assert torch.equal(kept.embedding.weight, model.embedding.weight.to(torch.bfloat16))


def test_another_model_or_a_changed_one_gets_its_own_copy(monkeypatch):
    model, data = _lstm_and_data()
    other, _ = _lstm_and_data()
    kept = evaluation_model(model, "cpu", always_copy=True)
    assert evaluation_model(other, "cpu", always_copy=True) is not kept
    assert evaluation_model(model, "cpu", always_copy=True) is kept
    model.extra = torch.nn.Linear(8, 40)  # another state dict: a fresh copy, not a failed in-place one
    fresh = evaluation_model(model, "cpu", always_copy=True)
    assert fresh is not kept and torch.equal(fresh.extra.weight, model.extra.weight)


def test_a_tied_transformer_stays_tied_through_the_refresh():
    from transformers import GPT2Config, GPT2LMHeadModel

    from uedp.models.hf import HFCausalLM

    torch.manual_seed(0)
    model = HFCausalLM(GPT2LMHeadModel(GPT2Config(vocab_size=40, n_positions=16, n_embd=8, n_layer=1, n_head=2)),
                       pad_id=0)
    _, data = _lstm_and_data()
    kept = evaluation_model(model, "cpu", always_copy=True)
    with torch.no_grad():
        model.hf.transformer.wte.weight.mul_(1.5)
    again = evaluation_model(model, "cpu", always_copy=True)
    assert again is kept and again.hf.lm_head.weight.data_ptr() == again.hf.transformer.wte.weight.data_ptr()
    assert torch.equal(again.hf.lm_head.weight, model.hf.lm_head.weight)
    assert evaluate_encoded(again, data) == evaluate_encoded(model, data)


# --- public pretraining on the run's device -------------------------------------------------------------------


def test_pretraining_moves_the_model_to_the_runs_device_and_returns_it_on_the_cpu(tmp_path, monkeypatch,
                                                                                    one_torch_thread):
    import uedp.pretraining as pretraining
    from uedp.models.build import ModelSpec
    from uedp.pipeline import pretrain_run

    asked, moves = [], []
    real_resolve, real_build = pretraining.resolve_device, ModelSpec.build

    def resolve(choice):
        asked.append(choice)
        return real_resolve(choice)

    def build(*args, **kwargs):
        model = real_build(*args, **kwargs)
        real_to, real_cpu = model.to, model.cpu
        model.to = lambda device: moves.append(("to", str(device))) or real_to(device)
        model.cpu = lambda: moves.append(("cpu",)) or real_cpu()
        return model

    monkeypatch.setattr(pretraining, "resolve_device", resolve)
    monkeypatch.setattr(ModelSpec, "build", build)
    texts, _ = pretraining.public_text("synthetic", public_users=10)
    out = io.StringIO()
    run = pretrain_run(tiny_config(tmp_path, federation={"device": "cpu"}))
    model, _, history = pretraining.pretrain(run, texts, epochs=1, lr=3e-3, batch_size=32, stream=out)
    assert asked == ["cpu"] and moves == [("to", "cpu"), ("cpu",)]
    assert "(on cpu)" in out.getvalue() and len(history) == 2
    assert all(p.device.type == "cpu" for p in model.parameters())


# --- experiments/device_check.py's transformer jobs -----------------------------------------------------------


def test_the_transformer_jobs_are_lora_and_full_fine_tuning_in_each_dtype(tmp_path):
    jobs = transformer_jobs(("bfloat16", "float32"))
    assert [j.name for j in jobs] == ["gpt2 LoRA r=8 bfloat16", "gpt2 full bfloat16", "gpt2 LoRA r=8 float32",
                                      "gpt2 full float32"]
    with pytest.raises(ValueError, match="dtypes"):
        transformer_jobs(("float64",))
    cfg = transformer_config(tmp_path / "j", jobs[0], device="cpu", size="tiny")
    options = cfg.model.option_dict()
    assert cfg.model.name == "gpt2" and cfg.model.lora.r == 8 and options["dtype"] == "bfloat16"
    assert options["dropout"] == 0.0 and cfg.train.optimizer == "adam" and cfg.federation.device == "cpu"
    assert "dtype" not in transformer_config(tmp_path / "k", jobs[3], device="cpu", size="tiny").model.option_dict()


def test_the_table_and_round_seconds(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"round": 1, "seconds": 0.5}\n{"round": 2, "seconds": 1.5}\n')
    assert round_seconds(tmp_path) == [0.5, 1.5] and round_seconds(tmp_path / "none") == []
    ok = TransformerResult("gpt2 LoRA r=8 bfloat16", "cuda", "bfloat16", 8, 3, 0.25, 300 * MIB, 12_288,
                           {"eps_uedp": 2.0, "eps_user": 0.5, "eps_undetected": 1.0}, 310.4)
    failed = TransformerResult("gpt2 full bfloat16", "cuda", "bfloat16", 0, 3, None, 80 * GIB, None, {}, None,
                               "OutOfMemoryError: CUDA out of memory")
    text = transformer_table([ok, failed])
    lines = text.splitlines()
    assert lines[0].startswith("| job | device | rounds | seconds per round | peak GPU MiB | noised dimension |")
    assert lines[2] == "| gpt2 LoRA r=8 bfloat16 | cuda | 3 | 0.250 | 300 | 12,288 | 2 | 0.5 | 1 | 310.4 | ok |"
    assert lines[3].endswith("| 3 | - | 81,920 | - | - | - | - | - | OutOfMemoryError: CUDA out of memory |")


def _cited_rehearsals() -> list[list[str]]:
    """The device_check commands the docs cite with --device cpu (their words, placeholders as the docs give)."""
    from tests.test_doc_commands import CITED

    return [list(c.words) for c in CITED if c.program == "experiments.device_check" and "cpu" in c.words]


def test_the_docs_cite_the_cpu_rehearsal_and_it_runs(tmp_path, one_torch_thread):
    """Every cited `experiments.device_check --device cpu ...` runs here (a tiny GPT-2): exit 0, the table on
    stdout, and the JSON file with each job's epsilons as its summary.json has them."""
    cited = _cited_rehearsals()
    assert cited, "docs/running.md cites the CPU rehearsal of experiments.device_check"
    for words in cited:
        assert "--size" in words and words[words.index("--size") + 1] == "tiny", shlex.join(words)
        done = subprocess.run([sys.executable, "-m", "experiments.device_check", *words, "--out",
                               str(tmp_path / "check"), "--users", "4"], capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"}, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        text = done.stdout
        assert "| gpt2 LoRA r=8 bfloat16 | cpu | 1 |" in text and "| gpt2 full bfloat16 | cpu | 1 |" in text
        record = json.loads((tmp_path / "check" / "device_check.json").read_text())
        assert record["comparison"] is None and record["device"] == "cpu"
        jobs = record["transformers"]
        assert [j["job"] for j in jobs] == ["gpt2 LoRA r=8 bfloat16", "gpt2 full bfloat16"]
        for job in jobs:
            summary = json.loads((tmp_path / "check" / "transformers" / f"gpt2-{'lora8' if job['lora_r'] else 'full'}"
                                  "-bfloat16" / "summary.json").read_text())
            assert job["error"] is None and job["peak_gpu_bytes"] is None and job["seconds_per_round"] > 0
            assert job["epsilons"] == {k: summary[k] for k in EPSILONS}
            assert job["noised_dimension"] == summary["noised_dimension"]
        assert jobs[0]["noised_dimension"] < jobs[1]["noised_dimension"]  # the adapters only
