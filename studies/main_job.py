"""The main job (README command 1): UeDP f_E+ calibrated to the default target epsilon, and the noiseless
FedAvg reference, on the embedded synthetic corpus, both as Ray-backed Flower simulations; then a table.

    python -m experiments.main_job [--out outputs/main] [--rounds N] [--local]

`--local` runs the same server loop and client code in this process without Flower (runtime/
local_grid.py), for quick checks. The defaults are RunConfig's (uedp/config.py); README.md justifies them.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path

from uedp import markdown
from uedp.config import RunConfig
from uedp.privacy.mechanisms import spec_for


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


def main_job(out: Path, *, rounds: int | None = None, local: bool = False) -> str:
    """UeDP f_E+ and noiseless FedAvg on RunConfig's defaults (`rounds`: federation.rounds instead), each in
    OUT/STRATEGY, then the table with the untrained model's row and a note (noise multiplier, tokenizer, any
    warning); writes OUT/results.md and OUT/results.json and returns the table and note."""
    base = RunConfig()
    if rounds:
        base.federation.rounds = rounds
    t0 = time.monotonic()
    rows = []
    for label, strategy in (("UeDP f_E+", "uedp"), ("FedAvg (noiseless)", "fedavg")):
        cfg = RunConfig.from_nested(base.to_nested())
        cfg.strategy = replace(cfg.strategy, name=strategy)
        cfg.federation = replace(cfg.federation, out_dir=str(out / strategy))
        print(f"\n=== {label}: {cfg.federation.rounds} rounds, output in {cfg.federation.out_dir}", flush=True)
        s = run_one(cfg, local=local)
        private = spec_for(cfg.strategy.name, cfg.strategy.estimator).private  # fedavg: every epsilon inf
        rows.append({"label": label, "rounds": s["rounds"], "delta": s["delta"],
                     "eps_uedp": s["eps_uedp"] if private else math.inf,
                     "eps_user": s["eps_user"] if private else math.inf,
                     "eps_undetected": s["eps_undetected"] if private else math.inf,
                     "perplexity": s["final"]["perplexity"], "initial": s["initial"]["perplexity"],
                     "z": s["noise_multiplier"], "warning": s.get("warning"), "tokenizer": s.get("tokenizer")})
    rows.append({"label": "untrained model", "rounds": 0, "delta": rows[0]["delta"], "eps_uedp": 0.0,
                 "eps_user": 0.0, "eps_undetected": 0.0, "perplexity": rows[0]["initial"]})
    text = table(rows)
    note = (f"\nUeDP noise multiplier z = {rows[0]['z']:.4f} (calibrated to target epsilon "
            f"{base.privacy.target_epsilon} over {base.federation.rounds} rounds); total {time.monotonic() - t0:.0f} s")
    if rows[0].get("tokenizer"):
        tok = rows[0]["tokenizer"]
        note += f"\ntokenizer: {tok['source']}, trained on {tok['corpus']} ({tok['vocab_size']} tokens)"
    if rows[0].get("warning"):
        note += f"\nWARNING: {rows[0]['warning']}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(text + "\n" + note + "\n")
    (out / "results.json").write_text(json.dumps(rows, indent=1, default=str))
    return text + note
