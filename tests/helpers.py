"""Small run configurations shared by the server, client and Flower tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from uedp.config import RunConfig
from uedp.privacy.accounting import Mechanism, epsilon


def tiny_config(out_dir: Path, **groups: dict[str, Any]) -> RunConfig:
    """8 users, a 16-dim LSTM, 3 rounds: seconds per run on 2 cores."""
    nested: dict[str, dict[str, Any]] = {
        "dataset": {"options": {"num_users": 8, "min_sentences": 20, "max_sentences": 30}},
        "tokenizer": {"vocab_size": 300},
        "task": {"max_len": 16},
        "model": {"options": {"emb_dim": 16, "hidden_dim": 16}},
        "privacy": {"q_u": 0.5, "q_e": 0.5, "q_s": 0.5, "m_max": 8, "k_cap": 2, "beta": 0.5,
                    "noise_multiplier": 1.0, "target_epsilon": 0.0, "delta": 1e-3},
        "train": {"lr": 0.5, "batch_size": 8},
        "federation": {"rounds": 3, "eval_every": 3, "checkpoint_every": 1, "out_dir": str(out_dir),
                       "wait_timeout": 120.0},
    }
    for group, values in groups.items():
        nested.setdefault(group, {}).update(values)
    return RunConfig.from_nested(nested)


def _options(mechanism: Mechanism, options: dict[str, Any]) -> dict[str, Any]:
    """num_users defaults to m_max (or 1,000 without truncation): N <= m_max places can never be truncated,
    so no truncation charge (docs/proofs.md section 4) enters a test that compares with a reference."""
    options.setdefault("num_users", mechanism.m_max or 1000)
    return options


def eps_uedp(mechanism: Mechanism, *, rounds: int, **options: Any) -> float:
    """epsilon("uedp", [(mechanism, rounds)], **options): one mechanism run `rounds` times."""
    return epsilon("uedp", [(mechanism, rounds)], **_options(mechanism, options))


def eps_user(mechanism: Mechanism, *, rounds: int, **options: Any) -> float:
    return epsilon("user", [(mechanism, rounds)], **_options(mechanism, options))


def eps_undetected(mechanism: Mechanism, *, rounds: int, **options: Any) -> float:
    return epsilon("undetected", [(mechanism, rounds)], **_options(mechanism, options))


def eps_rdp_bound(mechanism: Mechanism, *, rounds: int, **options: Any) -> float:
    return epsilon("rdp_bound", [(mechanism, rounds)], **_options(mechanism, options))


def compose_run_config(overrides: list[str]) -> RunConfig:
    """The RunConfig `python -m experiments.run OVERRIDES` composes (conf/ through Hydra), out_dir "x"."""
    from hydra import compose, initialize_config_dir

    from runtime.hydra_job import to_run_config

    conf = str(Path(__file__).parents[1] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["federation.out_dir=x", *overrides])
    return to_run_config(cfg)[0]
