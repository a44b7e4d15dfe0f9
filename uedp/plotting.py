"""Matplotlib for the commands and reports: the headless backend, and one way to write a figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display), imported only when a command plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path, *, title: str | None = None) -> None:
    """Optional title, tight layout, PNG at 120 dpi, figure closed."""
    if title is not None:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot().close(fig)
