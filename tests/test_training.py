"""The client's local optimizer makes the same steps as torch.optim's, without importing torch._dynamo."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from uedp.errors import ConfigError
from uedp.training import LocalOptimizer


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))


@pytest.mark.parametrize("name, lr, momentum", [("sgd", 0.3, 0.0), ("sgd", 0.1, 0.9), ("adam", 0.01, 0.0)])
def test_same_steps_as_torch_optim(name, lr, momentum):
    ours, ref = _model(0), _model(0)
    opt = LocalOptimizer(list(ours.parameters()), name=name, lr=lr, momentum=momentum)
    ref_opt = (torch.optim.SGD(ref.parameters(), lr=lr, momentum=momentum) if name == "sgd"
               else torch.optim.Adam(ref.parameters(), lr=lr))
    gen = torch.Generator().manual_seed(1)
    for _ in range(6):
        x, y = torch.randn(8, 5, generator=gen), torch.randn(8, 3, generator=gen)
        for model, o in ((ours, opt), (ref, ref_opt)):
            o.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            o.step()
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert any(not torch.equal(a, b) for a, b in zip(ours.parameters(), _model(0).parameters()))  # it moved


def test_unknown_optimizer_is_refused():
    with pytest.raises(ConfigError, match="sgd or adam"):
        LocalOptimizer([], name="rmsprop", lr=0.1, momentum=0.0)


def test_a_local_step_does_not_import_torch_dynamo():
    """What makes a fresh ClientApp process 1.7 s slower: torch.optim imports torch._dynamo on construction."""
    code = ("import sys, torch; from uedp.training import LocalOptimizer; m = torch.nn.Linear(3, 2); "
            "o = LocalOptimizer(list(m.parameters()), name='adam', lr=0.1, momentum=0.0); "
            "m(torch.ones(1, 3)).sum().backward(); o.step(); print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
