"""Checkpoints: the global arrays, the server optimizer's state, the round and a copy of the privacy ledger,
written atomically (checkpoint.pt in the run's folder).

Order at the end of a round (docs/mechanism.md step 9): the ledger file is written first, the checkpoint second,
so no model is ever saved that the ledger does not account for. On resume (uedp.flower.resume), rounds that
the ledger recorded after the last checkpoint (their models were lost in a crash, but nodes may have seen
them) stay charged, and numbering continues after the ledger's last round: no round is counted twice and no
spent budget is forgotten.

File format (a torch.save'd dict): "round", "arrays" (the global arrays after that round, by their
ArrayRecord keys, as numpy arrays), "optimizer_state" (the server optimizer's: uedp.flower.optimizer),
"ledger" (the ledger's document after that round), "extra" (z and the ledger's head). A checkpoint of the
earlier format, which held a torch "model_state", is refused with what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from uedp.errors import ConfigError
from uedp.files import atomic_path

CHECKPOINT = "checkpoint.pt"


@dataclass
class RunCheckpoint:
    """A run's resumable state after a round (file format: module docstring); not a model's base checkpoint
    (uedp.models.checkpoints.BaseCheckpoint)."""

    round: int
    arrays: dict[str, np.ndarray]
    optimizer_state: dict[str, Any]
    ledger: dict[str, Any]
    extra: dict[str, Any]


def save_checkpoint(out_dir: Path, ckpt: RunCheckpoint) -> Path:
    path = out_dir / CHECKPOINT
    with atomic_path(path) as tmp:
        torch.save({"round": ckpt.round, "arrays": ckpt.arrays, "optimizer_state": ckpt.optimizer_state,
                    "ledger": ckpt.ledger, "extra": ckpt.extra}, tmp)
    return path


def load_checkpoint(out_dir: Path) -> RunCheckpoint | None:
    path = out_dir / CHECKPOINT
    if not path.is_file():
        return None
    raw = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(raw, dict) or "arrays" not in raw:
        what = ("a checkpoint of an earlier format (a torch model_state)" if isinstance(raw, dict)
                and "model_state" in raw else "not a checkpoint")
        raise ConfigError(f"{path}: {what}; its ledger.json still holds every charged round: start a new run in an "
                          "empty federation.out_dir to train on")
    return RunCheckpoint(raw["round"], dict(raw["arrays"]), raw["optimizer_state"], raw["ledger"], raw["extra"])
