"""A figure's jobs: each one call of the Hydra entry point, `python -m experiments.run runner=local KEY=VALUE ...
replicate=R hydra.run.dir=RUNS/jobs/JOB` (`command`), its id a function of its overrides less those that restate
a default (`job_id`: a job shared by several figures runs once), run a few at a time and skipped once finished
(`run_jobs`), then read back from its summary.json (`collect`).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from functools import cache
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import OverrideType
from hydra.errors import OverrideParseException
from omegaconf import OmegaConf

from studies.figure_settings import Figure
from uedp.commands.options import split_option
from uedp.config import RunConfig
from uedp.errors import ConfigError
from uedp.hydra_schema import default_choices
from uedp.summary import RUN, has_summary, read_summary

ROOT = Path(__file__).resolve().parents[1]


@cache
def _entry_point_defaults() -> tuple[dict[str, str], dict[str, Any]]:
    """(default option of each config group, RunConfig's default of each key) as the Hydra entry point uses
    them: keys that conf/config.yaml sets for the entry point itself (federation.out_dir) are left out."""
    own = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "config.yaml"))
    assert isinstance(own, dict)
    own_keys = {f"{g}.{k}" for g, node in own.items() if g not in ("defaults", "hydra") and isinstance(node, dict)
                for k in node}
    return default_choices(), {k: v for k, v in RunConfig().to_flat().items() if k not in own_keys}


def restates_default(override: str, overrides: tuple[str, ...] = ()) -> bool:
    """Whether the Hydra override `override` sets what the job would get without it: a config group's default
    option (strategy=uedp), or RunConfig's default value of a key (privacy.target_epsilon=8, privacy.q_s=0.2)
    whose group keeps its default option in `overrides` (the job's overrides: a preset such as
    strategy=uedp_naive or task=classification has values of its own)."""
    choices, values = _entry_point_defaults()
    try:
        parsed = OverridesParser.create().parse_override(override)
    except OverrideParseException:
        return False
    if parsed.type is not OverrideType.CHANGE or parsed.package is not None or parsed.is_sweep_override():
        return False
    key = parsed.key_or_group
    if key in choices:
        return parsed.value() == choices[key]
    group = key.split(".", 1)[0]
    chosen = [v for k, v in map(split_option, overrides) if k == group]
    if key not in values or (group in choices and chosen and chosen[-1] != choices[group]):
        return False
    try:  # RunConfig's coercion: 8 is 8.0 for a float key, 1 is not true
        return RunConfig.from_flat({key: parsed.value()}).to_flat()[key] == values[key]
    except ConfigError:
        return False


def job_id(overrides: tuple[str, ...], rep: int) -> str:
    """Overrides that restate a default are dropped, so a setting shared by several figures (UeDP, all
    categories, eps 8, q_s 0.2, k_cap 1, q_e 0.2) runs once and every figure reads the same job."""
    kept = tuple(o for o in overrides if not restates_default(o, overrides))
    digest = hashlib.blake2b(" ".join(sorted(kept)).encode(), digest_size=4).hexdigest()
    slug = "_".join(split_option(o)[1] for o in kept).replace("/", "-")[:60] or "default"
    return f"{slug}-{digest}-r{rep}"


def jobs(fig: Figure, reps: int, extra: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every job of the figure, replicate 0 of every setting first (in the figure's order: its run and cut
    order), then the further replicates of the settings `fig.replicated` names (all, if None)."""
    return [{"id": job_id((*fig.base, *s, *extra), r), "setting": s, "rep": r,
             "overrides": [*fig.base, *s, *extra, f"replicate={r}"]}
            for r in range(reps) for s in fig.settings
            if r == 0 or fig.replicated is None or s in fig.replicated]


def command(job: dict[str, Any], run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "experiments.run", "runner=local", *job["overrides"],
            f"hydra.run.dir={run_dir / job['id']}"]


def run_jobs(fig: Figure, todo: list[dict[str, Any]], run_dir: Path, workers: int) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir.parent / f"{fig.name}.jobs.txt").write_text("".join(" ".join(command(j, run_dir)[1:]) + "\n"
                                                             for j in todo))
    pending = [j for j in todo if not has_summary(run_dir / j["id"])]
    print(f"{fig.name}: {len(todo)} jobs, {len(todo) - len(pending)} already done, {len(pending)} to run "
          f"({workers} at a time)", flush=True)
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"), "OMP_NUM_THREADS": "1"}

    def one(job: dict[str, Any]) -> tuple[dict[str, Any], float, int]:
        out = run_dir / job["id"]
        out.mkdir(parents=True, exist_ok=True)
        (out / "error.json").unlink(missing_ok=True)
        t0 = time.perf_counter()
        with (out / "job.log").open("w") as log:
            rc = subprocess.run(command(job, run_dir), cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT).returncode
        return job, time.perf_counter() - t0, rc

    def report(job: dict[str, Any], secs: float, rc: int) -> None:
        nonlocal done
        done += 1
        row = read_job(run_dir / job["id"])
        result = (f"{row['metric']}={row['value']:.4g} eps_uedp={row['eps_uedp']:.3g} eps_user={row['eps_user']:.3g}"
                  if "value" in row else f"FAILED ({row.get('status', f'rc {rc}')})")
        print(f"[{fig.name} {done}/{len(pending)}] {' '.join(job['setting'])} rep={job['rep']}: {result} "
              f"({secs:.0f} s)", flush=True)

    done = 0
    if pending:  # the first job alone fills the shared caches (corpus, annotations, tokenizer)
        report(*one(pending[0]))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for fut in as_completed([pool.submit(one, j) for j in pending[1:]]):
            report(*fut.result())


def read_job(path: Path) -> dict[str, Any]:
    error = path / "error.json"
    if has_summary(path):
        s = read_summary(path, require=RUN)
        return {"strategy": s["strategy"], "estimator": s.get("estimator"), "rounds": s["rounds"],
                "z": s["noise_multiplier"], "eps_uedp": s["eps_uedp"], "eps_user": s["eps_user"],
                "eps_undetected": s["eps_undetected"], "metric": s["metric"], "value": s["final"][s["metric"]],
                "initial": s["initial"][s["metric"]], "seconds": s.get("seconds"),
                **({"eps_holders": s["holders"]["epsilon"]} if s.get("holders") else {})}
    if error.is_file():
        return {"status": "FAILED: " + json.loads(error.read_text())["error"]}
    return {"status": "not run"}


def collect(fig: Figure, todo: list[dict[str, Any]], run_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for j in todo:
        rows.append({"setting": " ".join(j["setting"]), "rep": j["rep"], **read_job(run_dir / j["id"])})
    return rows
