"""Hydra entry point: one job per configuration, any override, `-m` for sweeps.

    python -m experiments.run                                   # defaults: RunConfig's (uedp/config.py)
    python -m experiments.run strategy=user_dp privacy.target_epsilon=4 federation.rounds=10
    python -m experiments.run -m strategy=uedp,user_dp privacy.target_epsilon=2,8 runner=local

Each job writes config.json, metrics.csv/jsonl, ledger.json, summary.json, model.pt into its Hydra output
directory (federation.out_dir defaults to it). A job that fails writes error.json there, reports the job
and the error, and the sweep goes on with the other jobs; a single job that fails exits with status 2 for
bad input or configuration (a UedpError, e.g. a refused resume), 1 otherwise.

The defaults come from RunConfig: uedp/hydra_schema.py registers them in Hydra's ConfigStore (`register()`,
called on import, before Hydra composes); conf/ holds only presets and the entry point's own settings.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import traceback
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from uedp import hydra_schema
from uedp.checks import integer
from uedp.config import RunConfig
from uedp.errors import ConfigError, UedpError

hydra_schema.register()

RUNNERS = ("simulation", "local")


def to_run_config(cfg: DictConfig) -> tuple[RunConfig, str]:
    missing = sorted(k for k in OmegaConf.missing_keys(cfg) if not k.startswith("hydra."))
    if missing:  # e.g. dataset=jsonl without dataset.options.path
        raise ConfigError(f"missing value for {', '.join(missing)}: set it on the command line "
                          f"({missing[0]}=...)")
    data: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    data.pop("hydra", None)
    runner = data.pop("runner", "simulation")
    replicate = data.pop("replicate", 0)  # a label only (see conf/config.yaml)
    integer("replicate", replicate, minimum=0, note="(a label)")
    if runner not in RUNNERS:
        raise ConfigError(f"runner must be one of {', '.join(RUNNERS)}, got {runner!r}")
    for group in ("dataset", "model"):  # a preset's options are what it lists, never the default component's
        if isinstance(data.get(group), dict):
            data[group].setdefault("options", {})
    run_cfg = RunConfig.from_nested(data)  # types and values checked, each naming its key
    if replicate and run_cfg.privacy.seed is not None:
        raise ConfigError(f"replicate={replicate} with a fixed privacy.seed would repeat replicate 0 exactly; "
                          "leave privacy.seed unset (null) for independent replicates")
    return run_cfg, runner


def objective(summary: dict[str, Any] | None) -> float:
    """What a job returns to Hydra's sweeper (an Optuna search minimizes it): the run's final test metric
    (the task's headline metric, lower is better: perplexity, error rate); a run stopped by its privacy budget
    is a finished run with its metric; a failed job returns +inf, which ranks below every finished one.
    Tune on a tuning population (another seed or held-out users), never on the private one: the search's
    choices depend on the data it evaluates, outside the accounting."""
    if summary is None:
        return math.inf
    return float(summary["final"][summary["metric"]])


def run_job(cfg: DictConfig) -> dict[str, Any] | None:
    out = Path(str(OmegaConf.select(cfg, "federation.out_dir") or "."))
    out.mkdir(parents=True, exist_ok=True)
    # Flower's state database runs alembic, which logs each plugin it sets up at INFO, Hydra's root level
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        run_cfg, runner = to_run_config(cfg)
        if runner == "local":
            from runtime.local_grid import run_local

            summary = run_local(run_cfg)
        else:
            from runtime.simulate import simulate

            summary = simulate(run_cfg)
    except Exception as exc:  # one failed job must not stop a sweep
        (out / "error.json").write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}",
                                                    "bad_input": isinstance(exc, UedpError),
                                                    "traceback": traceback.format_exc()}, indent=1))
        print(f"JOB FAILED in {out}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return None
    print(f"job done in {out}: {summary['strategy']} rounds={summary['rounds']} eps_uedp={summary['eps_uedp']:.4g} "
          f"eps_user={summary['eps_user']:.4g} {summary['metric']}={summary['final'][summary['metric']]:.4g}",
          flush=True)
    return summary
