"""The run configuration of each audit variant, and the canary-free tokenizer its runs use.

`audit_config(quick=..., variant=..., out_dir=..., overrides=...)`: the main job's settings (full audit) or
a small CI version (quick), with the canary corpus `audit_synthetic` (uedp.audit.canaries) and the user's
`--set` overrides on top; the variant (uedp.audit.variants) fixes the strategy, the output folder and, for
control (a) and its twin, beta.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from uedp.audit.variants import VARIANTS
from uedp.config import RunConfig
from uedp.data.loaders import materialize
from uedp.errors import ConfigError
from uedp.tokenization import TokenizerConfig, tokenizer_cache_path, train_tokenizer


def audit_config(*, quick: bool, variant: str, out_dir: Path, seed: int = 0,
                 overrides: dict[str, Any] | None = None) -> RunConfig:
    """The run configuration of one variant: the main job's defaults (full) or a small CI version, with the
    user's `overrides` ({"group.key": value} or {"group.options.key": value}) on top, so any configuration
    can be audited. The variant decides the strategy and output folder, which cannot be overridden."""
    v = VARIANTS[variant]
    if quick:
        # Power needs: the canary inside max_len (a 400-token vocabulary made it ~30 tokens, cut at 32, so
        # the secret was never trained on), a 3-digit space ranked exactly, every user every round, and
        # enough local steps for noiseless FedAvg to memorize a secret seen by 5 users. Client SGD, not Adam
        # (Adam ignores the per-step gradient scale, which made control (b) vacuous), and beta 0.1 below
        # FedAvg's update norms (median ~0.6), so control (b)'s unclipped updates really exceed beta.
        nested: dict[str, Any] = {
            "dataset": {"name": "audit_synthetic", "options": {
                "num_users": 10, "min_sentences": 20, "max_sentences": 40, "frequencies": [1, 5],
                "per_frequency": 16, "copies": 8, "space": "ddd"}},
            "tokenizer": {"vocab_size": 1000},
            "task": {"max_len": 40},
            "model": {"options": {"emb_dim": 24, "hidden_dim": 48}},
            "privacy": {"q_u": 1.0, "m_max": 40, "beta": 0.1, "delta": 1e-3,
                        "seed": seed},
            "train": {"optimizer": "sgd", "lr": 1.0, "local_epochs": 3},
            "server": {"optimizer": "sgd", "lr": 1.0, "momentum": 0.0},
            "federation": {"rounds": 30, "eval_every": 30, "checkpoint_every": 30},
        }
    else:
        # The main job's settings. At their training budget (30 rounds, ~50 of 200 users per round, one
        # local epoch) noiseless FedAvg memorizes no canary held by 8 users or fewer (docs/audit.md,
        # Finding 6), so the full audit adds canaries held by 32 users: they give it power, and they are
        # the entities UeDP protects at eps_uedp whatever their frequency, while user-level DP covers them
        # only by group privacy (32 * eps_user). 4-digit secrets: the whole space is ranked (exact).
        nested = {"dataset": {"name": "audit_synthetic", "options": {
            "num_users": 200, "frequencies": [1, 2, 4, 8, 32], "per_frequency": 16, "copies": 8,
            "space": "dddd"}},
            "task": {"max_len": 48}}
    if v.beta is not None:  # control (a) and its twin (uedp.audit.variants)
        nested.setdefault("privacy", {})["beta"] = v.beta
    for key, value in (overrides or {}).items():
        _override(nested, key, value)
    nested.setdefault("strategy", {})["name"] = v.strategy
    nested.setdefault("federation", {})["out_dir"] = str(out_dir / variant)
    return RunConfig.from_nested(nested)


def _override(nested: dict[str, Any], key: str, value: Any) -> None:
    """Set `group.key` or `group.options.key` (dataset, model) in the nested config."""
    parts = key.split(".")
    if key in ("strategy.name", "federation.out_dir"):
        raise ConfigError(f"--set {key}: set by the audit variant (use --variants / --out)")
    if len(parts) == 2:
        nested.setdefault(parts[0], {})[parts[1]] = value
    elif len(parts) == 3 and parts[1] == "options":
        group = nested.setdefault(parts[0], {})
        group["options"] = {**group.get("options", {}), parts[2]: value}
    else:
        raise ConfigError(f"--set {key}: expected group.key or group.options.key")


def canary_free_tokenizer(cfg: RunConfig) -> None:
    """Train the run's tokenizer on the corpus WITHOUT the audit canaries and put it where the pipeline
    looks for it. A tokenizer trained on the training split (the pipeline's default, a non-private
    preprocessing step) learns merges for frequent planted secrets: the first audit runs showed exposure
    ~7 bits for frequency-4 canaries even for UeDP, from the vocabulary alone. The audit measures the
    mechanism, so its tokenizer must not depend on membership (as a public tokenizer would not)."""
    corpus_dir, corpus = materialize(cfg.dataset.name, **cfg.dataset.option_dict())
    tok_cfg = TokenizerConfig(kind=cfg.tokenizer.kind, vocab_size=cfg.tokenizer.vocab_size)
    path = tokenizer_cache_path(corpus, tok_cfg)
    if path.is_file():
        return
    planted = {c["text"] for c in corpus.meta["audit_canaries"]}
    texts = [t for t in corpus.split("train").column("text").to_pylist() if t not in planted]
    train_tokenizer(texts, tok_cfg).save(path, exclusive=True)
