"""Hydra entry point: one job per configuration, any override, `-m` for sweeps.

    python -m experiments.run                                   # defaults: RunConfig's (uedp/config.py)
    python -m experiments.run strategy=user_dp privacy.target_epsilon=4 federation.rounds=10
    python -m experiments.run -m strategy=uedp,user_dp privacy.target_epsilon=2,8 runner=local

What it does, and how to read its output: runtime/hydra_job.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from runtime.hydra_job import objective, run_job


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
    """One job; returns its final test metric to a sweeper (runtime.hydra_job.objective: +inf if it failed)."""
    summary = run_job(cfg)
    if summary is None and HydraConfig.get().mode is not RunMode.MULTIRUN:  # a sweep goes on; one job exits
        error = json.loads((Path(str(OmegaConf.select(cfg, "federation.out_dir") or ".")) / "error.json").read_text())
        raise SystemExit(2 if error.get("bad_input") else 1)
    return objective(summary)


if __name__ == "__main__":
    main()
