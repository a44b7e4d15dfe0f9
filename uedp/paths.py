"""Where cached artefacts (materialized corpora, entity annotations, tokenizers) live."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """`$UEDP_CACHE_DIR` if set, else `~/.cache/uedp`. Created on first use."""
    root = Path(os.environ.get("UEDP_CACHE_DIR") or Path.home() / ".cache" / "uedp")
    root.mkdir(parents=True, exist_ok=True)
    return root
