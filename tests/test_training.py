"""The client's local optimizer makes the same steps as torch.optim's (AdamW's decay toward the round's start
included), without importing torch._dynamo; gradient accumulation; the training settings and their record; the
learning-rate schedule the server applies per round, resumes included."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
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
    with pytest.raises(ConfigError, match="sgd, adam, adamw"):
        LocalOptimizer([], name="rmsprop", lr=0.1, momentum=0.0)


def test_a_local_step_does_not_import_torch_dynamo():
    """What makes a fresh ClientApp process 1.7 s slower: torch.optim imports torch._dynamo on construction."""
    code = ("import sys, torch; from uedp.training import LocalOptimizer; m = torch.nn.Linear(3, 2); "
            "o = LocalOptimizer(list(m.parameters()), name='adam', lr=0.1, momentum=0.0); "
            "m(torch.ones(1, 3)).sum().backward(); o.step(); print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# -- AdamW: decoupled decay toward the round's start -----------------------------------------------------------
def test_adamw_decays_toward_the_rounds_start_as_torch_adamw_on_the_offset():
    """Ours on p with start p0 = torch's AdamW on q = p - p0 (same gradients): decay pulls toward p0, not 0."""
    lr, wd = 0.01, 0.5
    ours = _model(0)
    start = [p.detach().clone() + 0.3 for p in ours.parameters()]  # the round's start, away from p
    opt = LocalOptimizer(list(ours.parameters()), name="adamw", lr=lr, momentum=0.0, weight_decay=wd, start=start)
    q = [torch.nn.Parameter(p.detach() - s) for p, s in zip(ours.parameters(), start)]
    ref = torch.optim.AdamW(q, lr=lr, weight_decay=wd)
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        x, y = torch.randn(8, 5, generator=gen), torch.randn(8, 3, generator=gen)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ours(x), y).backward()
        ref.zero_grad()
        for a, b in zip(q, ours.parameters()):
            a.grad = b.grad.clone()
        opt.step()
        ref.step()
    for p, s, a in zip(ours.parameters(), start, q):
        torch.testing.assert_close(p - s, a.detach(), rtol=1e-5, atol=1e-6)


def test_weight_decay_alone_moves_toward_the_start_by_hand():
    """A zero gradient: Adam's update is 0, and p1 = p - lr * wd * (p - p_start), for adamw and sgd alike."""
    for name in ("adamw", "sgd"):
        p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
        start = [torch.tensor([0.0, 1.0, 0.5])]
        opt = LocalOptimizer([p], name=name, lr=0.1, momentum=0.0, weight_decay=2.0, start=start)
        p.grad = torch.zeros(3)
        opt.step()
        torch.testing.assert_close(p.detach(), torch.tensor([1.0 - 0.2 * 1.0, -2.0 - 0.2 * -3.0, 0.5]))
    with pytest.raises(ConfigError, match="adamw"):
        LocalOptimizer([p], name="adam", lr=0.1, momentum=0.0, weight_decay=0.1)


# -- local_train: gradient accumulation, the training settings ---------------------------------------------------
def _lm(seed: int):
    from uedp.models.base import NEXT_WORD, UedpModel

    class LM(UedpModel):
        family = "test-lm"

        def __init__(self) -> None:
            super().__init__(task=NEXT_WORD, pad_id=0)
            torch.manual_seed(seed)
            self.emb = torch.nn.Embedding(30, 8)
            self.out = torch.nn.Linear(8, 30)

        def forward(self, batch):
            return self.out(torch.tanh(self.emb(batch.input_ids)))

    return LM()


def _sentences(n: int = 16, length: int = 8):
    from uedp.pipeline import EncodedSentences

    gen = torch.Generator().manual_seed(4)
    ids = torch.randint(1, 30, (n, length), generator=gen)
    mask = torch.ones(n, length, dtype=torch.long)  # one length: the mean of minibatch means is the big batch's
    return EncodedSentences(ids, mask, None)


def _cfg(**kw):
    from uedp.config import ClientTrainConfig
    from uedp.training import LocalTraining

    base = {"optimizer": "sgd", "lr": 0.5, "momentum": 0.0, "local_epochs": 1, "local_steps": 1, "batch_size": 8}
    return LocalTraining.from_config(ClientTrainConfig(**{**base, **kw}))


@pytest.mark.parametrize("k", [2, 4])
def test_grad_accum_k_on_batch_b_equals_one_step_on_batch_k_times_b(k):
    from uedp.models.base import get_weights
    from uedp.training import local_train

    data = _sentences()
    rows, w = torch.arange(len(data)), torch.ones(len(data))
    runs = {}
    for accum, batch in ((k, 16 // k), (1, 16)):
        model = _lm(0)
        loss, steps = local_train(model, data, rows, w, _cfg(grad_accum=accum, batch_size=batch, local_steps=1),
                                  generator=torch.Generator().manual_seed(7))
        assert steps == 1
        runs[accum] = get_weights(model)
    start = get_weights(_lm(0))
    assert any(not np.array_equal(a, b) for a, b in zip(runs[1], start))
    for a, b in zip(runs[k], runs[1]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_local_steps_count_optimizer_steps_and_a_partial_group_is_a_mean():
    from uedp.training import local_train

    data = _sentences()
    rows, w = torch.arange(len(data)), torch.ones(len(data))
    seen = []
    _, steps = local_train(_lm(0), data, rows, w, _cfg(grad_accum=2, batch_size=4, local_steps=3),
                           generator=torch.Generator().manual_seed(7), before_step=lambda ps: seen.append(1))
    assert steps == 3 and len(seen) == 3
    # epochs: 16 sentences in minibatches of 4 = 4 minibatches, grad_accum 3: steps of 3 and of 1 minibatch
    _, steps = local_train(_lm(0), data, rows, w, _cfg(grad_accum=3, batch_size=4, local_steps=None),
                           generator=torch.Generator().manual_seed(7))
    assert steps == 2


def test_local_training_takes_its_defaults_from_the_config_and_travels_in_the_record():
    from uedp.config import ClientTrainConfig
    from uedp.training import LocalTraining

    defaults = ClientTrainConfig()
    t = LocalTraining.from_config(ClientTrainConfig(lr=0.3))
    assert (t.grad_accum, t.weight_decay) == (defaults.grad_accum, defaults.weight_decay)
    assert not hasattr(t, "lr_schedule")  # the server's: applied to lr before the record is sent
    assert LocalTraining.from_config(ClientTrainConfig(grad_accum=3)).grad_accum == 3
    t = _cfg(optimizer="adamw", weight_decay=0.1, grad_accum=3)
    assert LocalTraining.from_record({**t.to_record(), "server-round": 2, "lr_rounds": 9}) == t
    with pytest.raises(ValueError, match="lacks grad_accum"):
        LocalTraining.from_record({k: v for k, v in t.to_record().items() if k != "grad_accum"})
    with pytest.raises(TypeError):
        LocalTraining(optimizer="sgd", lr=0.1)  # no defaults of its own
    with pytest.raises(ConfigError):
        _cfg(grad_accum=0)
    with pytest.raises(ConfigError, match="adamw"):
        _cfg(optimizer="adam", weight_decay=0.1)


def test_the_training_options_are_validated_in_the_config():
    from uedp.config import RunConfig

    assert RunConfig.from_flat({"train.optimizer": "adamw", "train.weight_decay": 0.1}).train.optimizer == "adamw"
    for flat, match in (({"train.grad_accum": 0}, "train.grad_accum must be an integer >= 1"),
                        ({"train.weight_decay": -1.0}, "train.weight_decay must be >= 0"),
                        ({"train.optimizer": "adam", "train.weight_decay": 0.1}, "with adam choose adamw"),
                        ({"train.lr_schedule": "step"}, "train.lr_schedule must be one of"),
                        ({"train.warmup_rounds": -1}, "train.warmup_rounds must be"),
                        ({"server.optimizer": "adamw"}, "server.optimizer must be one of sgd, adam")):
        with pytest.raises(ConfigError, match=match):
            RunConfig.from_flat(flat)


# -- the learning-rate schedule over rounds ------------------------------------------------------------------
def test_the_scheduled_lr_is_the_formula():
    import math

    from uedp.config import ClientTrainConfig

    lr, rounds = 0.8, 10
    f = ClientTrainConfig.scheduled_lr
    assert [f(lr, "constant", 0, t, rounds) for t in (1, 5, 10)] == [lr] * 3
    for t in range(1, rounds + 1):
        p = (t - 2 - 1) / (rounds - 2)
        want_cos = lr * t / 2 if t <= 2 else lr * (1 + math.cos(math.pi * p)) / 2
        want_lin = lr * t / 2 if t <= 2 else lr * (1 - p)
        assert f(lr, "cosine", 2, t, rounds) == pytest.approx(want_cos, rel=1e-12)
        assert f(lr, "linear", 2, t, rounds) == pytest.approx(want_lin, rel=1e-12)
    assert f(lr, "cosine", 0, 1, rounds) == lr and f(lr, "linear", 0, rounds, rounds) > 0
    assert f(lr, "linear", 0, rounds + 5, rounds) == f(lr, "linear", 0, rounds, rounds)  # past the plan: the last
    cfg = ClientTrainConfig(lr=lr, lr_schedule="cosine", warmup_rounds=2)
    record = {"lr": lr, "batch_size": 4, **cfg.schedule_record(rounds)}
    assert ClientTrainConfig.for_round(record, 4)["lr"] == f(lr, "cosine", 2, 4, rounds)
    assert ClientTrainConfig.for_round({"lr": lr}, 4) == {"lr": lr}  # constant: the record as it is
    constant = {"lr": lr, "lr_schedule": "constant", "warmup_rounds": 0}
    assert ClientTrainConfig.for_round(constant, 4) == constant
    assert ClientTrainConfig().schedule_record(rounds) == {}
    with pytest.raises(ValueError, match="lacks lr_rounds"):
        ClientTrainConfig.for_round({"lr": lr, "lr_schedule": "linear", "warmup_rounds": 0}, 2)


def test_a_resumed_run_sends_each_round_the_same_lr(tmp_path):
    """The strategy sets each round's lr from the ledger's round number: rounds 3 and 4 of a run resumed after
    round 2 carry the lr of rounds 3 and 4 of a run of 4, which is the formula's."""
    from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

    from runtime.local_grid import set_local_task_identity
    from tests.helpers import split_probes, tiny_config
    from uedp.config import ClientTrainConfig
    from uedp.flower.store import RunStore
    from uedp.flower.strategy import UserEntityDP
    from uedp.privacy.accountant import UeDPAccountant
    from uedp.protocol import CONFIG_RECORD

    cfg = tiny_config(tmp_path, privacy={"seed": 2, "q_u": 1.0})
    set_local_task_identity()
    start = ArrayRecord([np.zeros(4, np.float32)])
    train = ClientTrainConfig(lr=0.4, lr_schedule="cosine", warmup_rounds=1)
    record = ConfigRecord({"lr": 0.4, **train.schedule_record(4)})

    class Constant:
        in_process_simulation = True

        def __init__(self) -> None:
            self.lrs: dict[int, set[float]] = {}

        def get_node_ids(self):
            return range(8)

        def send_and_receive(self, messages, *, timeout=None):
            answers, messages = split_probes(messages)
            for m in messages:
                self.lrs.setdefault(int(m.metadata.group_id), set()).add(m.content[CONFIG_RECORD]["lr"])
            return answers + [Message(RecordDict({"update": ArrayRecord([np.array([1.0, 0, 0, 0], np.float32)])}),
                                      reply_to=m) for m in messages]

    def dp(out, rounds: int, resume: bool) -> UserEntityDP:
        accountant = UeDPAccountant("user_dp", cfg.privacy, num_users=8, rounds=rounds, noise_multiplier=1.0)
        return UserEntityDP(_FedAvg(), places=8, accountant=accountant,
                            store=RunStore(out, checkpoint_every=1, resume=resume))

    whole, grid = dp(tmp_path / "whole", 4, False), Constant()
    whole.start(grid, whole.initial_arrays(start), whole.rounds_left, train_config=record)
    want = {t: {ClientTrainConfig.scheduled_lr(0.4, "cosine", 1, t, 4)} for t in range(1, 5)}
    assert grid.lrs == want and len({next(iter(v)) for v in want.values()}) == 3  # rounds 1 and 2: lr
    first, second_grid = dp(tmp_path / "split", 2, False), Constant()
    first.start(Constant(), first.initial_arrays(start), first.rounds_left, train_config=record)
    second = dp(tmp_path / "split", 4, True)
    second.start(second_grid, second.initial_arrays(start), second.rounds_left, train_config=record)
    assert second_grid.lrs == {3: want[3], 4: want[4]}


def _FedAvg():
    from flwr.serverapp.strategy import FedAvg

    return FedAvg()
