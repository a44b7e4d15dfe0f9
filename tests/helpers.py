"""Small run configurations shared by the server, client and Flower tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from uedp.config import RunConfig
from uedp.privacy.accounting import Mechanism, epsilon_of, rdp_epsilon_of


def tiny_config(out_dir: Path, **groups: dict[str, Any]) -> RunConfig:
    """8 users, a 16-dim LSTM, 3 rounds: seconds per run on 2 cores."""
    nested: dict[str, dict[str, Any]] = {
        "dataset": {"options": {"num_users": 8, "min_sentences": 20, "max_sentences": 30}},
        "tokenizer": {"vocab_size": 300},
        "task": {"max_len": 16},
        "model": {"options": {"emb_dim": 16, "hidden_dim": 16}},
        "privacy": {"q_u": 0.5, "q_e": 0.5, "q_s": 0.5, "m_max": 8, "k_cap": 2, "beta": 0.5,
                    "noise_multiplier": 1.0, "target_epsilon": None, "delta": 1e-3},
        "train": {"lr": 0.5, "batch_size": 8},
        "federation": {"rounds": 3, "eval_every": 3, "checkpoint_every": 1, "out_dir": str(out_dir),
                       "wait_timeout": 120.0},
    }
    for group, values in groups.items():
        nested.setdefault(group, {}).update(values)
    return RunConfig.from_nested(nested)


def _options(mechanism: Mechanism, options: dict[str, Any]) -> dict[str, Any]:
    """num_users defaults to m_max (or 1,000 without truncation): N <= m_max places can never be truncated,
    so no truncation charge (docs/proofs.md section 4) enters a test that compares with a reference. delta
    defaults to 1e-5."""
    options.setdefault("num_users", mechanism.m_max or 1000)
    options.setdefault("delta", 1e-5)
    return options


def eps_uedp(mechanism: Mechanism, *, rounds: int, **options: Any) -> float:
    """epsilon_of([(mechanism, rounds)], "uedp", **options): one mechanism run `rounds` times."""
    return epsilon_of([(mechanism, rounds)], "uedp", **_options(mechanism, options))


def eps_user(mechanism: Mechanism, *, rounds: int, **options: Any) -> float:
    return epsilon_of([(mechanism, rounds)], "user", **_options(mechanism, options))


def eps_undetected(mechanism: Mechanism, *, rounds: int, **options: Any) -> float:
    return epsilon_of([(mechanism, rounds)], "undetected", **_options(mechanism, options))


def eps_rdp_bound(mechanism: Mechanism, *, rounds: int, **options: Any) -> float:
    return rdp_epsilon_of([(mechanism, rounds)], "uedp", **_options(mechanism, options))


def compose_run_config(overrides: list[str]) -> RunConfig:
    """The RunConfig `python -m experiments.run OVERRIDES` composes (conf/ through Hydra), out_dir "x"."""
    from hydra import compose, initialize_config_dir

    from runtime.hydra_job import to_run_config

    conf = str(Path(__file__).parents[1] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["federation.out_dir=x", *overrides])
    return to_run_config(cfg)[0]


class ZeroNoise:
    """A noise source that draws nothing (tests of the aggregation's arithmetic; never a real run)."""

    reproducible = True
    warning = "not private: no noise (a test)"
    mode = "none"

    def normal(self, shape: tuple[int, ...], std: float) -> Any:
        import numpy as np

        return np.zeros(shape, dtype=np.float64)


def dp_strategy(cfg: RunConfig, out_dir: Path, *, mechanism: str = "uedp", places: int = 8, seed: int = 3,
                z: float = 1.0, inner: Any = None, noise: Any = None, aggregator: Any = None, **privacy: Any):
    """UeDP's Flower wrapper (uedp.flower.UserEntityDP) around Flower's FedAvg for `cfg`'s privacy settings
    with `privacy` overrides, a fixed seed (reproduction: keys, cohorts and noise from `seed`) and noise
    multiplier `z` (no calibration), writing its ledger into `out_dir`."""
    import dataclasses

    from flwr.serverapp.strategy import FedAvg

    from uedp.flower.store import RunStore
    from uedp.flower.strategy import Seams, UserEntityDP
    from uedp.privacy.accountant import UeDPAccountant

    settings = dataclasses.replace(cfg.privacy, seed=seed, **privacy)
    accountant = UeDPAccountant(mechanism, settings, num_users=places, rounds=cfg.federation.rounds,
                                noise_multiplier=z)
    seams = Seams(noise=noise) if aggregator is None else Seams(noise=noise, aggregator=aggregator)
    return UserEntityDP(inner if inner is not None else FedAvg(), places=places, accountant=accountant,
                        store=RunStore(out_dir), seams=seams)


class StandInGrid:
    """A simulation's grid of `n` nodes (ids 0..n-1) whose nodes run the client mod: they answer the probe the
    wrapper sends before round 1, and nothing else (tests that build a round's replies themselves)."""

    in_process_simulation = True

    def __init__(self, n: int = 8) -> None:
        self.n = n

    def get_node_ids(self) -> range:
        return range(self.n)

    def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> list[Any]:
        return split_probes(messages)[0]


def operator_rows(out_dir: Path) -> list[dict[str, Any]]:
    """The per-round rows of a run's operator log (operator.jsonl: the counts, seconds, lateness)."""
    from uedp.flower.store import read_operator_log

    return read_operator_log(out_dir)


TRAINING_FIELDS = ("optimizer", "lr", "momentum", "local_epochs", "local_steps", "batch_size")


def instructions(**kw: Any) -> tuple[Any, Any]:
    """(RoundInstructions, LocalTraining) from one set of keyword options (those of uedp.training.LocalTraining
    go to the second): a training message's "uedp" and "config" records."""
    from uedp.config import ClientTrainConfig
    from uedp.protocol import RoundInstructions
    from uedp.training import LocalTraining

    training = dict(optimizer="sgd", lr=0.5, momentum=0.0, local_epochs=1, local_steps=None, batch_size=8)
    training.update({k: kw.pop(k) for k in list(kw) if k in TRAINING_FIELDS})
    return RoundInstructions(**kw), LocalTraining.from_config(ClientTrainConfig(**training))


def train_message(arrays: list[Any], ins: Any, training: Any, *, node: int = 1) -> Any:
    """A training message as the wrapper sends it (global arrays, the app's config, the round's instructions)."""
    from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

    return Message(RecordDict({"arrays": ArrayRecord(arrays), "config": ConfigRecord(training.to_record()),
                               "uedp": ins.to_record()}), dst_node_id=node, message_type="train")


def split_probes(messages: Any) -> tuple[list[Any], list[Any]]:
    """(the client mod's answers to the probes among `messages`, the other messages): for the tests' stand-in
    grids, whose nodes run the client mod (uedp.protocol: the probe before the first private round)."""
    from uedp.protocol import is_probe, probe_answer

    messages = list(messages)
    return [probe_answer(m) for m in messages if is_probe(m)], [m for m in messages if not is_probe(m)]


def assert_each_fault_fired_once(counts: Any, attempts: list[dict[str, Any]], why: Any = None) -> None:
    """A run given one fault of each kind (studies.fault_schedule.FAULT_KINDS): `counts` (kind -> faults fired) says
    each fired once, and the run took three attempts, ended by the SuperLink kill, by the ServerApp kill, and by nothing
    (it finished). `why` goes into the first assertion's message."""
    from studies.fault_schedule import FAULT_KINDS, SERVER_FAULT_KINDS

    assert {k: counts[k] for k in FAULT_KINDS} == dict.fromkeys(FAULT_KINDS, 1), why
    assert [a["ended_by"] for a in attempts] == [*SERVER_FAULT_KINDS, None], attempts
