"""The main job (README command 1): UeDP f_E+ calibrated to the default target epsilon, and the noiseless
FedAvg reference, on the embedded synthetic corpus, both as Ray-backed Flower simulations; then a table.

    python -m experiments.main_job [--out outputs/main] [--rounds N] [--local]

`--local` runs the same server loop and client code in this process without Flower (experiments/
local_grid.py), for quick checks. The defaults are RunConfig's (uedp/config.py); README.md justifies them.
"""

from __future__ import annotations

import math

from uedp import markdown
from uedp.config import RunConfig


def run_one(cfg: RunConfig, *, local: bool) -> dict:
    if local:
        from runtime.local_grid import run_local

        return run_local(cfg)
    from runtime.simulate import simulate

    return simulate(cfg)


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "-"
    return "inf" if math.isinf(x) else f"{x:.{digits}f}"


def table(rows: list[dict]) -> str:
    return markdown.table(
        ["method", "rounds", "eps_uedp", "eps_user", "eps_undetected", "delta", "test perplexity"],
        ([r["label"], r["rounds"], _fmt(r.get("eps_uedp")), _fmt(r.get("eps_user")), _fmt(r.get("eps_undetected")),
          f"{r['delta']:g}", f"{r['perplexity']:.1f}"] for r in rows),
        fmt=str,
    )
