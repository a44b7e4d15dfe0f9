"""What limits each method, per population (docs/results.md section 7): how much of a sampled client's text it
uses per round, how large the noise is against one clipped update, and what it reaches WITHOUT noise.

    python -m experiments.limits [--populations 200 1000 5000] [--users 400] [--keys 20]
                                 [--noise-free 5000] [--runs outputs/figures] [--out docs/figures]

Sentences used (for each population N, the population figure's settings: studies/figure_settings.py
`population_setting`): user-level DP and FedAvg train on every sentence of a sampled user. UeDP (k_cap 1)
trains on a sentence only if each of its entities is sampled (q_e) AND permitted in the user's slot (one of
m_max), or, for a sentence with no detected entity, if it is sampled as an extended entity (q_s). The
fractions are measured with the clients' own selection code (uedp.privacy.selection.select_sentences) on
`--users` users of the prepared corpus, `--keys` fresh random round keys each and a uniformly random slot.
This is an operator diagnostic over the corpus: it reads the private corpus and is not part of any release.

Noise against clip: per method, sqrt(d) * sigma / Z / beta (d parameters, sigma the per-coordinate noise
std on the sum, Z the denominator: the population figure's finished jobs' summary.json, mean over
replicates): the norm of the noise in the released mean update, in units of one clipped update's norm.

Noise-free (`--noise-free N ...`): user-level DP and UeDP at population N with the SAME clipping, selection,
sampling and z, but the noise std multiplied by 1e-6 (uedp.audit.controls.ScaledNoise: the audit's broken
control, so these runs are labelled NOT private): what each method reaches with clipping and selection
alone. The gap from there to the private run is what the noise costs; the gap from noiseless FedAvg to there
is what clipping (and, for UeDP, selection) costs. Jobs go to RUNS/limits/ (finished ones are skipped).
Writes OUT/limits.md and .json.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import torch

from studies.figure_jobs import job_id
from studies.figure_settings import COHORT, population_setting
from uedp.commands.options import parse_options
from uedp.config import RunConfig
from uedp.markdown import table
from uedp.pipeline import load_user_data, prepare
from uedp.privacy.sampling import new_round_key
from uedp.privacy.selection import SelectionParams, select_sentences
from uedp.summary import RUN, has_summary, read_summary


def population_config(n: int) -> RunConfig:
    """The RunConfig of the population figure's UeDP job at population n."""
    flat = parse_options([o for o in population_setting(n) if not o.startswith("dataset.options.")])
    flat["dataset.options"] = json.dumps({"num_users": n})
    return RunConfig.from_flat(flat)


def measure(cfg: RunConfig, *, users: int, keys: int, seed: int = 0) -> dict[str, float]:
    """Mean over users and keys of the fraction of a user's training sentences UeDP selects, split by kind."""
    manifest = prepare(cfg)
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(manifest.users), size=min(users, len(manifest.users)), replace=False)
    p = cfg.privacy
    used, used_free, used_ent, free_share, sizes = [], [], [], [], []
    for pid in picked.tolist():
        data = load_user_data(cfg, pid)
        has = np.array([bool(e) for e in data.entities])
        n = len(has)
        if not n:
            continue
        sizes.append(n)
        free_share.append(1.0 - has.mean())
        for _ in range(keys):
            params = SelectionParams(q_e=p.q_e, q_s=p.q_s, k_cap=p.k_cap, m_max=p.m_max,
                                     slot=int(rng.integers(p.m_max)))
            mask = select_sentences(new_round_key(), user=data.user, sids=data.stable_ids.tolist(),
                                    entities=data.entities, params=params).mask
            used.append(mask.mean())
            used_free.append(mask[~has].sum() / n)
            used_ent.append(mask[has].sum() / n)
    return {"users_measured": len(sizes), "sentences_per_user": statistics.fmean(sizes),
            "entity_free_share": statistics.fmean(free_share), "uedp_used": statistics.fmean(used),
            "uedp_used_entity_free": statistics.fmean(used_free), "uedp_used_entity": statistics.fmean(used_ent)}


def noise_to_clip(runs: Path, n: int, strategy: str) -> float | None:
    """sqrt(d) * sigma / Z / beta of the population figure's finished jobs (mean over replicates), or None."""
    setting = (*population_setting(n), f"strategy={strategy}")
    values = []
    for rep in range(10):
        path = runs / "jobs" / job_id(setting, rep)
        if not has_summary(path):
            continue
        s = read_summary(path, require=RUN)
        cfg = json.loads((path / "config.json").read_text())
        d = sum(w.size for w in torch.load(path / "model.pt", weights_only=False)["weights"])
        values.append(math.sqrt(d) * s["sigma"] / s["Z"] / cfg["privacy"]["beta"])
    return statistics.fmean(values) if values else None


NOISE_FREE_FACTOR = 1e-6


def noise_free(runs: Path, n: int, strategy: str) -> float:
    """Final perplexity of `strategy` at population n with its noise scaled by NOISE_FREE_FACTOR (not private)."""
    from runtime.local_grid import run_local
    from server.setup import Components
    from uedp.audit.controls import ScaledNoise
    from uedp.privacy.noise import GaussianNoise

    out = runs / "limits" / f"{n}-{strategy}-noise-free"
    if has_summary(out):
        return read_summary(out)["final"]["perplexity"]
    base = population_config(n)
    cfg = RunConfig.from_flat({**base.to_flat(), "strategy.name": strategy, "federation.out_dir": str(out)})
    noise = ScaledNoise(GaussianNoise(), NOISE_FREE_FACTOR)
    summary = run_local(cfg, components=Components(
        noise=noise, broken=f"diagnostic: noise std x {NOISE_FREE_FACTOR:g} (experiments.limits, not private)"))
    return summary["final"]["perplexity"]


def limits(populations: list[int], *, users: int, keys: int, noise_free_at: list[int], runs: Path, out: Path
           ) -> str:
    """Per population: the measured use of a client's text, the noise against one clipped update of the
    figures' jobs in `runs`, and (at each population of `noise_free_at`, a full run each) the perplexity
    without noise; writes OUT/limits.json and OUT/limits.md and returns the table."""
    results = []
    for n in populations:
        cfg = population_config(n)
        r: dict[str, float | None] = {"N": n, "q_u": cfg.privacy.q_u, **measure(cfg, users=users, keys=keys)}
        for m in ("user_dp", "uedp"):
            r[f"noise_to_clip_{m}"] = noise_to_clip(runs, n, m)
            r[f"noise_free_{m}"] = noise_free(runs, n, m) if n in noise_free_at else None
        results.append(r)
        print(json.dumps(r), flush=True)
    text = limits_table(results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "limits.json").write_text(json.dumps(results, indent=1))
    (out / "limits.md").write_text(text + "\n")
    return text


def limits_table(results: list[dict]) -> str:
    """The limits table (docs/results.md section 7): a row per population."""

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    rows = [[f"{r['N']:,}", f"{r['q_u']:g}", f"{r['sentences_per_user']:.1f}", f"{r['entity_free_share']:.1%}",
             "100%", f"{r['uedp_used']:.1%}", f"{r['uedp_used_entity_free']:.1%} + {r['uedp_used_entity']:.2%}",
             f"{COHORT * r['sentences_per_user']:.0f} / {COHORT * r['sentences_per_user'] * r['uedp_used']:.0f}",
             fmt(r["noise_to_clip_user_dp"]), fmt(r["noise_to_clip_uedp"]), fmt(r["noise_free_user_dp"]),
             fmt(r["noise_free_uedp"])] for r in results]
    return table(["N", "q_u", "train sentences per user", "entity-free share", "FedAvg / user-level DP use",
                  "UeDP uses", "UeDP: entity-free + entity sentences", "sentences per round (user DP / UeDP)",
                  "noise / clip, user-level DP", "noise / clip, UeDP",
                  "perplexity without noise, user-level DP", "same, UeDP"], rows, fmt=str)
