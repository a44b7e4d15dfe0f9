"""The run configuration of each audit variant.

`audit_config(quick=..., variant=..., out_dir=..., overrides=...)`: the main job's settings (full audit) or
a small CI version (quick), with the canary corpus `audit_synthetic` (uedp.audit.canaries) and the user's
`--set` overrides on top; the variant (uedp.audit.variants) fixes the strategy, the output folder, for
control (a) and its twin beta, and for the private_tokenizer control tokenizer.source.

The audit runs the pipeline as `make main` does, tokenizer included: the default tokenizer is trained on
a public corpus (uedp.tokenization; for audit_synthetic, the synthetic generator's other personas), so it
does not depend on which canaries were planted. (The first default tokenizer was trained on the
training split and the audit trained its own without the canaries; docs/audit.md, "The tokenizer trained on the
private split leaks".)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from uedp.audit.variants import VARIANTS
from uedp.config import RunConfig
from uedp.errors import ConfigError


def audit_config(*, quick: bool, variant: str, out_dir: Path, seed: int = 0,
                 overrides: dict[str, Any] | None = None) -> RunConfig:
    """The run configuration of one variant: the main job's defaults (full) or a small CI version, with the
    user's `overrides` ({"group.key": value} or {"group.options.key": value}) on top, so any configuration
    can be audited. The variant decides the strategy and output folder, which cannot be overridden, and a
    forced tokenizer.source (the private_tokenizer control), which `--set tokenizer.source` does not change."""
    v = VARIANTS[variant]
    if quick:
        # Power needs: the canary inside max_len (a 400-token vocabulary made it ~30 tokens, cut at 32, so
        # the secret was never trained on; uedp.audit.scoring now refuses a canary longer than max_len), a
        # 3-digit space ranked exactly, the default tokenizer (public, 2000 tokens: a canary is 16-18 tokens
        # + [BOS] [EOS]; with 1000 tokens noiseless FedAvg's frequency-5 exposure fell from 6.4 to 3.7 bits,
        # too close to the flag threshold), every user every round, and enough local steps for noiseless
        # FedAvg to memorize a secret seen by 5 users. Client SGD, not Adam (Adam ignores the per-step
        # gradient scale, which made control (b) vacuous), and beta 0.1 below FedAvg's update norms (median
        # ~0.6), so control (b)'s unclipped updates really exceed beta.
        nested: dict[str, Any] = {
            "dataset": {"name": "audit_synthetic", "options": {
                "num_users": 10, "min_sentences": 20, "max_sentences": 40, "frequencies": [1, 5],
                "per_frequency": 16, "copies": 8, "space": "ddd"}},
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
        # docs/audit.md, "The full audit: the whole default pipeline"), so the full audit adds canaries held by 32
        # users: they give it power, and they are
        # the entities UeDP protects at eps_uedp whatever their frequency, while user-level DP covers them
        # only by group privacy (32 * eps_user). 4-digit secrets: the whole space is ranked (exact). The
        # public 2000-token tokenizer makes a canary 17-19 tokens + [BOS] [EOS], inside max_len 48.
        nested = {"dataset": {"name": "audit_synthetic", "options": {
            "num_users": 200, "frequencies": [1, 2, 4, 8, 32], "per_frequency": 16, "copies": 8,
            "space": "dddd"}},
            "task": {"max_len": 48}}
    if v.beta is not None:  # control (a) and its twin (uedp.audit.variants)
        nested.setdefault("privacy", {})["beta"] = v.beta
    for key, value in (overrides or {}).items():
        _override(nested, key, value)
    nested.setdefault("strategy", {})["name"] = v.strategy
    if v.tokenizer is not None:  # the private_tokenizer control: its defect, never overridden
        nested.setdefault("tokenizer", {})["source"] = v.tokenizer
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

