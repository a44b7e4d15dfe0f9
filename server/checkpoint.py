"""Checkpoints: model, server optimizer, round and a copy of the privacy ledger, written atomically.

Order at the end of a round (contract step 9): the ledger file is written first, the checkpoint second,
so no model is ever saved that the ledger does not account for. On resume, rounds that the ledger
recorded after the last checkpoint (their models were lost in a crash, but clients may have seen them)
stay charged, and numbering continues after the ledger's last round: no round is counted twice and no
spent budget is forgotten.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from uedp.files import atomic_path

CHECKPOINT = "checkpoint.pt"


@dataclass
class Checkpoint:
    round: int
    model_state: dict[str, torch.Tensor]
    optimizer_state: dict[str, Any]
    ledger: dict[str, Any]
    extra: dict[str, Any]


def save_checkpoint(out_dir: Path, ckpt: Checkpoint) -> Path:
    path = out_dir / CHECKPOINT
    with atomic_path(path) as tmp:
        torch.save(
            {
                "round": ckpt.round,
                "model_state": ckpt.model_state,
                "optimizer_state": ckpt.optimizer_state,
                "ledger": ckpt.ledger,
                "extra": ckpt.extra,
            },
            tmp,
        )
    return path


def load_checkpoint(out_dir: Path) -> Checkpoint | None:
    path = out_dir / CHECKPOINT
    if not path.is_file():
        return None
    raw = torch.load(path, map_location="cpu", weights_only=False)
    return Checkpoint(raw["round"], raw["model_state"], raw["optimizer_state"], raw["ledger"], raw["extra"])
