"""The main job (README command 1): UeDP f_E+ calibrated to the default target epsilon, and the noiseless
FedAvg reference, on the embedded synthetic corpus, both as Ray-backed Flower simulations; then a table.

    python -m experiments.main_job [--out outputs/main] [--rounds N] [--local]

What it does, and how to read its output: studies/main_job.py.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path

from studies.main_job import run_one, table
from uedp.config import RunConfig
from uedp.privacy.mechanisms import spec_for


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="outputs/main")
    ap.add_argument("--rounds", type=int, default=None, help="override federation.rounds")
    ap.add_argument("--local", action="store_true", help="in-process loop instead of a Flower simulation")
    args = ap.parse_args(argv)
    out = Path(args.out)
    base = RunConfig()
    if args.rounds:
        base.federation.rounds = args.rounds
    t0 = time.monotonic()
    rows = []
    for label, strategy in (("UeDP f_E+", "uedp"), ("FedAvg (noiseless)", "fedavg")):
        cfg = RunConfig.from_nested(base.to_nested())
        cfg.strategy = replace(cfg.strategy, name=strategy)
        cfg.federation = replace(cfg.federation, out_dir=str(out / strategy))
        print(f"\n=== {label}: {cfg.federation.rounds} rounds, output in {cfg.federation.out_dir}", flush=True)
        s = run_one(cfg, local=args.local)
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
    print("\n" + text + note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
