"""The frontier (docs/results.md section 9): at which number of other holders K* user-level DP, calibrated so
that one user AND an entity with K other holders stays at epsilon 8, becomes worse than UeDP, with an
interval, on the whole-text and the non-entity-token metric, at two populations with the same cohort.

    python -m experiments.frontier [--reps 3] [--runs outputs/figures] [--out docs/figures] [--resamples 2000]

Reads the finished jobs of the figures `frontier-5000` and `frontier-20000` (studies/figure_settings.py; run them
with `python -m experiments.figures frontier-5000 frontier-20000 --reps 3`: jobs are resumable, and this
command reads whatever has finished). For each population and metric:
- per arm and K: the mean over replicates and n;
- K*: the first K (in increasing order) at which user-level DP's mean is worse than UeDP's, linearly
  interpolated between it and the K before (the crossing of the two mean curves); None when user-level DP
  never loses in the measured K (then K* > the largest K), or is worse already at K = 0;
- the interval: a percentile bootstrap (`resamples` draws) that resamples, independently, the replicates of
  UeDP and of user-level DP at every measured K (a setting with one replicate is held fixed: its spread is
  not measured), and recomputes K* on each draw; the 2.5% and 97.5% quantiles. With 3 replicates a setting,
  this interval is the spread of the replicates the data carry, not a coverage guarantee; the table says how
  many replicates each setting had.
- K* / N: the share of the population.
The non-entity-token metric is summary.json `final_tokens.other_tokens` (perplexity on the tokens outside any
protected entity span of the central test sentences; uedp.entity_tokens); the other tokens are also split by
sentence (in entity-free sentences, and in sentences that hold an entity: a model that never trains on those
loses their context too). These come from the job's model.pt, computed once by the same function
(studies.entity_perplexity.token_split) and kept in the job's directory as tokens.json. Per arm (replicate 0)
the table also gives the share of its excess NLL over FedAvg's (replicate 0, the same test tokens) that falls
on entity tokens (uedp.entity_tokens.excess_share), cached there too.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from studies.figure_jobs import jobs
from studies.figure_settings import FIGURES, FRONTIER_K
from uedp.markdown import table
from uedp.summary import has_summary, read_summary

if TYPE_CHECKING:
    from uedp.entity_tokens import TokenSplit

METRICS: dict[str, Callable[[dict[str, Any]], float | None]] = {
    "whole text": lambda s: s["final"].get(s["metric"]),
    "non-entity tokens": lambda s: (s.get("tokens") or {}).get("other_tokens"),
    "entity tokens": lambda s: (s.get("tokens") or {}).get("entity_tokens"),
    "other tokens, entity-free sentences": lambda s: (s.get("tokens") or {}).get("other_tokens_free_sentences"),
    "other tokens, entity sentences": lambda s: (s.get("tokens") or {}).get("other_tokens_entity_sentences"),
}
TOKENS_FILE = "tokens.json"  # a job's final_tokens (and excess share) computed after the run (module docstring)


def _arm(setting: tuple[str, ...]) -> tuple[str, int | None]:
    opts = dict(o.split("=", 1) for o in setting)
    strategy = opts.get("strategy", "uedp")
    k = opts.get("privacy.target_holders")
    return strategy, (int(k) if k is not None else (0 if strategy == "user_dp" else None))


def read_values(n: int, reps: int, runs: Path) -> dict[str, dict[tuple[str, int | None], list[float]]]:
    """{metric: {(strategy, K): [value per finished replicate]}} of the frontier figure at population n."""
    fig = FIGURES[f"frontier-{n}"]
    out: dict[str, dict[tuple[str, int | None], list[float]]] = {m: {} for m in METRICS}
    for job in jobs(fig, reps, ()):
        path = runs / "jobs" / job["id"]
        if not has_summary(path):
            continue
        summary = {**read_summary(path)}
        if summary.get("metric") == "perplexity":
            summary["tokens"] = _tokens(path)
        for name, get in METRICS.items():
            value = get(summary)
            if value is not None:
                out[name].setdefault(_arm(job["setting"]), []).append(float(value))
    return out


def _tokens(path: Path, *, split_of: Callable[[], TokenSplit] | None = None,
            reference: Callable[[], TokenSplit] | None = None) -> dict[str, Any]:
    """The job's final_tokens and their split by sentence (TokenSplit.context), and with `reference` (FedAvg's
    split, built on demand) its excess_share: from its tokens.json, or computed from ONE pass of its model.pt
    (`split_of`, default studies.entity_perplexity.token_split of the job) and kept there."""
    cache = path / TOKENS_FILE
    record = json.loads(cache.read_text()) if cache.is_file() else {}
    need_share = reference is not None and "excess_share" not in record
    if need_share or "other_tokens_free_sentences" not in record:
        from studies.entity_perplexity import token_split

        split = split_of() if split_of is not None else token_split(path)
        record = {**record, **split.record(), **split.context()}
        if need_share:
            from uedp.entity_tokens import excess_share

            assert reference is not None
            record["excess_share"] = excess_share(split.nll, reference().nll, split.entity)
        cache.write_text(json.dumps(record))
    return record


def excess_shares(n: int, runs: Path) -> dict[tuple[str, int | None], float | None]:
    """{arm: the share of its excess NLL over FedAvg's on entity tokens}, replicate 0 of each finished arm,
    cached in each job's tokens.json (key excess_share) with the rest of `_tokens`: each job's model is read
    and evaluated once, FedAvg's included (its split serves as its own record and as the reference)."""
    from studies.entity_perplexity import token_split

    fig = FIGURES[f"frontier-{n}"]
    first = {_arm(j["setting"]): runs / "jobs" / j["id"] for j in jobs(fig, 1, ())}
    ref_path = first.get(("fedavg", None))
    if ref_path is None or not has_summary(ref_path):
        return {}
    reference = functools.cache(lambda: token_split(ref_path))
    _tokens(ref_path, split_of=reference)
    return {arm: _tokens(path, reference=reference)["excess_share"] for arm, path in first.items()
            if arm[0] != "fedavg" and has_summary(path)}


def crossover(uedp: float, user: list[tuple[int, float]]) -> float | None:
    """K* of one set of means: user-level DP's (K, mean) in increasing K against UeDP's mean (lower is
    better). The first K whose mean is above UeDP's, interpolated linearly with the K before it; None when none
    is, or when user-level DP is already worse at the smallest K."""
    for i, (k, v) in enumerate(user):
        if v > uedp:
            if i == 0:
                return None
            k0, v0 = user[i - 1]
            return k0 + (uedp - v0) * (k - k0) / (v - v0)
    return None


def frontier(values: dict[tuple[str, int | None], list[float]], ks: tuple[int, ...], *, resamples: int,
             seed: int = 0) -> dict[str, Any]:
    """K* and its bootstrap interval (module docstring) from {(strategy, K): replicate values}."""
    uedp = values.get(("uedp", None), [])
    user = [(k, values[("user_dp", k)]) for k in sorted(ks) if values.get(("user_dp", k))]
    if not uedp or len(user) < 2:
        return {"k_star": None, "interval": None, "draws": 0, "note": "not enough finished jobs"}
    point = crossover(float(np.mean(uedp)), [(k, float(np.mean(v))) for k, v in user])
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        u = float(np.mean(rng.choice(uedp, len(uedp))))
        draws.append(crossover(u, [(k, float(np.mean(rng.choice(v, len(v))))) for k, v in user]))
    finite = [d for d in draws if d is not None]
    interval = (float(np.quantile(finite, 0.025)), float(np.quantile(finite, 0.975))) if finite else None
    return {"k_star": point, "interval": interval, "draws": len(finite), "resamples": resamples,
            "undecided": resamples - len(finite)}


def report(reps: int, runs: Path, resamples: int, excess: bool = True) -> tuple[str, dict[str, Any]]:
    """The markdown tables and the JSON record of both populations."""
    record: dict[str, Any] = {}
    parts = []
    for n, ks in FRONTIER_K.items():
        shares = excess_shares(n, runs) if excess else {}  # first: it evaluates each model once, for both
        per_metric = read_values(n, reps, runs)
        rows = []
        for name, values in per_metric.items():
            result = frontier(values, ks, resamples=resamples)
            record[f"{n}/{name}"] = {"values": {f"{s}/{k}": v for (s, k), v in values.items()}, **result}
            arms = [("fedavg", None), ("uedp", None), *(("user_dp", k) for k in sorted(ks))]
            cells = [_cell(values.get(a, [])) for a in arms]
            k_star, iv = result["k_star"], result["interval"]
            rows.append([name, *cells, _num(k_star), "-" if iv is None else f"{_num(iv[0])} to {_num(iv[1])}",
                         "-" if k_star is None else f"{100 * k_star / n:.2f}%"])
        record[f"{n}/excess_share"] = {f"{s}/{k}": v for (s, k), v in shares.items()}
        if shares:
            rows.append(["share of excess NLL over FedAvg on entity tokens (rep 0)", "-",
                         *(_share(shares.get(a)) for a in arms[1:]), "", "", ""])
        head = ["metric", "FedAvg", "UeDP", *(f"user-level DP K={k}" for k in sorted(ks)), "K*", "95% bootstrap",
                "K*/N"]
        parts.append(f"### {n:,} users (q_u {100 / n:g}, cohort 100)\n\n" + table(head, rows))
    return "\n\n".join(parts), record


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    mean = float(np.mean(values))
    sd = f" ± {float(np.std(values, ddof=1)):.3g}" if len(values) > 1 else ""
    return f"{mean:.4g}{sd} (n={len(values)})" if math.isfinite(mean) else f"diverged (n={len(values)})"


def _share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def write(reps: int, runs: Path, out: Path, resamples: int, excess: bool = True) -> str:
    text, record = report(reps, runs, resamples, excess)
    out.mkdir(parents=True, exist_ok=True)
    (out / "frontier.md").write_text("# The frontier: K* at two populations\n\n" + text + "\n")
    (out / "frontier.json").write_text(json.dumps(record, indent=1) + "\n")
    return text
