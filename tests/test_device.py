"""federation.device (uedp.devices): its values and refusals (cuda:N included), what auto resolves to, the
simulation's GPU share (its sizing by memory: tests/test_device_memory.py), the same weights with device=cpu
as by default, and experiments/device_check.py's refusal without CUDA. On CPU only, quickly: the GPU side is
experiments/device_check.py's (not run by CI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from runtime.local_grid import run_local
from runtime.simulate import backend_config
from studies.device_check import FINAL_RTOL, DeviceRun, compare, device_check, report
from tests.helpers import tiny_config
from uedp.config import RunConfig
from uedp.devices import CUDA_INSTALL, resolve_device
from uedp.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_cuda(monkeypatch):
    """A machine whose torch is a CPU build."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)


GIB = 2**30
SMALL_MODEL = (4 * 2**20, 4 * 2**20)  # (model bytes, trainable bytes): ~1M float32 parameters, all trained


@pytest.fixture
def gpus(monkeypatch):
    """A 16-core machine whose torch sees 2 GPUs of 80 GiB (nothing is put on them here)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: type("Props", (), {"total_memory": 80 * GIB})())
    monkeypatch.setattr("runtime.simulate.os.cpu_count", lambda: 16)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


@pytest.mark.parametrize("value", ["gpu", "CUDA", "", "cuda:", "cuda:-1", "cuda:01", "cuda:x", "cuda:1.0", "cuda 0"])
def test_a_bad_value_is_refused_naming_the_option(value):
    with pytest.raises(ConfigError, match=r"federation\.device must be one of auto, cpu, cuda, or cuda:N"):
        RunConfig.from_flat({"federation.device": value})
    with pytest.raises(ConfigError, match=r"federation\.device must be one of"):
        RunConfig.from_run_config({"uedp.federation.device": value})


def test_cuda_n_names_a_gpu_this_process_sees(gpus):
    assert RunConfig.from_flat({"federation.device": "cuda:1"}).federation.device == "cuda:1"
    assert resolve_device("cuda:1") == torch.device("cuda", 1) and resolve_device("cuda:0").index == 0
    with pytest.raises(ConfigError, match=r"federation\.device = cuda:2, but this process sees 2 GPU\(s\), cuda:0 "
                                          r"to cuda:1 \(CUDA_VISIBLE_DEVICES"):
        RunConfig.from_flat({"federation.device": "cuda:2"})


def test_cuda_n_without_cuda_is_refused_saying_how_to_install_it(no_cuda):
    with pytest.raises(ConfigError, match=r"federation\.device = cuda:0, but the installed torch .* has no CUDA"):
        RunConfig.from_flat({"federation.device": "cuda:0"})


def test_a_simulation_takes_cuda_0_and_refuses_another_index(gpus):
    """Each actor sees its own GPU as cuda:0 (Ray sets CUDA_VISIBLE_DEVICES): cuda:N > 0 is refused, saying how."""
    zero = backend_config(RunConfig.from_flat({"federation.device": "cuda:0"}), model_size=SMALL_MODEL)
    assert zero["client_resources"]["num_gpus"] == 1 / 8
    with pytest.raises(ConfigError, match=r"federation\.device = cuda:1: a Ray simulation .* CUDA_VISIBLE_DEVICES=1 "
                                          r"and federation\.device=cuda"):
        backend_config(RunConfig.from_flat({"federation.device": "cuda:1"}), model_size=SMALL_MODEL)


def test_cuda_without_cuda_is_refused_saying_how_to_install_it(no_cuda, monkeypatch):
    with pytest.raises(ConfigError) as refused:
        RunConfig.from_flat({"federation.device": "cuda"})
    text = str(refused.value)
    assert "federation.device = cuda" in text and "has no CUDA" in text and CUDA_INSTALL in text
    monkeypatch.setattr(torch.version, "cuda", "12.4")  # a CUDA build on a machine without a visible GPU
    with pytest.raises(ConfigError, match="built with CUDA 12.4.*sees no GPU"):
        RunConfig.from_flat({"federation.device": "cuda"})


def test_auto_is_the_default_and_resolves_to_the_gpu_only_where_there_is_one(no_cuda, monkeypatch):
    assert RunConfig().federation.device == "auto"
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")


def test_auto_is_cpu_on_this_machine():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert resolve_device(RunConfig().federation.device).type == "cpu"


def test_the_simulation_asks_for_a_gpu_share_only_for_cuda(gpus):
    """A small model on 80 GiB GPUs: the CPUs bound the clients per GPU (tests/test_device_memory.py: memory)."""
    cpu = backend_config(RunConfig.from_flat({"federation.device": "cpu"}))
    assert cpu["client_resources"] == {"num_cpus": 1} and "num_gpus" not in cpu["init_args"]
    for device in ("cuda", "auto"):  # auto: this (patched) machine has GPUs
        cfg = RunConfig.from_flat({"federation.device": device})
        backend = backend_config(cfg, model_size=SMALL_MODEL)
        assert backend["client_resources"] == {"num_cpus": 1, "num_gpus": 2 / 16}  # 16 clients at once, 2 GPUs
        assert backend["init_args"]["num_gpus"] == 2
        assert backend_config(cfg, client_cpus=4, model_size=SMALL_MODEL)["client_resources"]["num_gpus"] == 0.5
        assert backend_config(cfg, client_gpus=0.25)["client_resources"]["num_gpus"] == 0.25
        with pytest.raises(ConfigError, match="client_gpus"):
            backend_config(cfg, client_gpus=-1)
    joined = backend_config(RunConfig.from_flat({"federation.device": "cuda", "federation.ray_address": "h:1"}),
                            model_size=SMALL_MODEL)
    assert joined["init_args"] == {"address": "h:1"} and joined["client_resources"]["num_gpus"] == 2 / 16


def test_the_simulation_asks_for_cpus_only_without_a_gpu(no_cuda, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    backend = backend_config(RunConfig(), client_cpus=2)
    assert backend["client_resources"] == {"num_cpus": 2} and "num_gpus" not in backend["init_args"]


def test_device_cpu_gives_the_default_runs_weights(tmp_path, one_torch_thread):
    """The in-process grid (the real ClientApp handlers and server): device=cpu is the default here, bit for
    bit, and the summary says where the server evaluated."""
    if torch.cuda.is_available():
        pytest.skip("auto is cuda on this machine")
    runs = {}  # noiseless: no accounting to wait for (where training runs is no part of the mechanism)
    for name, federation in (("default", {}), ("cpu", {"device": "cpu"})):
        summary = run_local(tiny_config(tmp_path / name, privacy={"seed": 0}, strategy={"name": "fedavg"},
                                        federation={"rounds": 2, "eval_every": 2, **federation}))
        assert summary["device"] == "cpu"
        runs[name] = (summary, torch.load(tmp_path / name / "model.pt", weights_only=False)["weights"])
    (s_default, w_default), (s_cpu, w_cpu) = runs["default"], runs["cpu"]
    assert len(w_default) == len(w_cpu) and all((a == b).all() for a, b in zip(w_default, w_cpu))
    assert s_default["final"] == s_cpu["final"]


def test_device_check_refuses_without_cuda(no_cuda, tmp_path):
    status, text = device_check(tmp_path / "check")
    assert status == 2 and "needs a GPU" in text and CUDA_INSTALL in text and "Nothing was run" in text
    assert not (tmp_path / "check").exists()


def test_the_device_check_command_exits_non_zero_without_cuda(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the check itself would run (experiments/device_check.py)")
    proc = subprocess.run([sys.executable, "-m", "experiments.device_check", "--out", str(tmp_path / "check")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "has no CUDA" in proc.stderr and CUDA_INSTALL in proc.stderr and proc.stdout == ""


def test_the_device_checks_verdicts():
    """compare() and report() on made-up runs (the GPU run itself is not run by CI)."""
    def run(device, final_ppl, *, ledger=({"round": 1, "z": 1.0},), tokens=90):
        metrics = {"loss": 5.0, "perplexity": 150.0, "tokens": 90, "sentences": 12}
        summary = {"metric": "perplexity", "device": device, "initial": metrics, "eps_uedp": 3.0, "eps_user": 2.0,
                   "eps_undetected": 2.5, "final": {**metrics, "perplexity": final_ppl, "tokens": tokens}}
        return DeviceRun(device, 2.0, summary, [dict(r) for r in ledger])

    cpu = run("cpu", 120.0)
    ok = compare(cpu, run("cuda", 120.0 * (1 + FINAL_RTOL / 2)))
    # the relative difference is taken to the larger value: (r / 2) / (1 + r / 2), 0.5% below r / 2, so rel 1e-2
    assert ok["ledger_equal"] and ok["metrics_ok"] and ok["worst_final"] == pytest.approx(FINAL_RTOL / 2, rel=1e-2)
    assert "identical (1 rounds)" in report(cpu, run("cuda", 120.0), ok) and "within tolerance" in report(cpu, cpu, ok)
    assert not compare(cpu, run("cuda", 120.0 * (1 + 2 * FINAL_RTOL)))["metrics_ok"]
    assert not compare(cpu, run("cuda", 120.0, tokens=91))["metrics_ok"]  # counts must be equal
    differ = compare(cpu, run("cuda", 120.0, ledger=({"round": 1, "z": 1.5},)))
    assert not differ["ledger_equal"] and "DIFFERENT" in report(cpu, cpu, differ)
