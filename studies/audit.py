"""Empirical privacy audit: `python -m experiments.audit [--quick] [--out outputs/audit]`.

`python -m experiments.audit mechanism ...` runs the crafted-update audit of the mechanism instead
(studies/audit_mechanism.py).

Trains one model per variant (uedp.audit.variants) in process, with the real server loop and client code
over a LocalGrid, on the synthetic corpus with coin-flipped canaries (`audit_synthetic`,
uedp.audit.canaries). A broken control is the same run with one component swapped
(uedp.audit.controls): a noise source drawing too little noise (control a), or a client that clips each
step's gradient instead of its update plus a server aggregation without the norm re-check (control b).
Then each model is scored on the canaries (uedp.audit.scoring), the groups analysed and the variants
judged (uedp.audit.verdicts), and report.md, results.json and exposure.png are written (uedp.audit.report).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

import uedp.audit  # noqa: E402,F401 - registers audit_synthetic
from client.update import ClientRound  # noqa: E402
from runtime.local_grid import LocalGrid, set_local_task_identity  # noqa: E402
from server.app import run_server  # noqa: E402
from server.setup import Components  # noqa: E402
from uedp.audit.config import audit_config  # noqa: E402
from uedp.audit.controls import (  # noqa: E402
    PER_STEP_CLIPPING_WARNING,
    ReducedNoise,
    UnclippedUpdate,
    clip_each_step,
    unchecked_aggregate,
)
from uedp.audit.report import plot, write_report  # noqa: E402
from uedp.audit.scoring import score  # noqa: E402
from uedp.audit.variants import PER_STEP_CLIPPING, TOO_LITTLE_NOISE, VARIANTS, Variant  # noqa: E402
from uedp.audit.verdicts import GroupResult, analyse, verdicts  # noqa: E402
from uedp.commands.options import parse_options  # noqa: E402
from uedp.config import RunConfig  # noqa: E402
from uedp.data.store import load_corpus_dir  # noqa: E402
from uedp.errors import ConfigError  # noqa: E402
from uedp.flower.mod import UeDPMod, uedp_mod  # noqa: E402
from uedp.pipeline import final_model, load_manifest, prepare  # noqa: E402
from uedp.privacy.noise import GaussianNoise  # noqa: E402


def train(variant: Variant, cfg: RunConfig, log: TextIO) -> dict[str, Any]:
    """One training run; returns run_server's summary plus what the control did."""
    set_local_task_identity()
    manifest = prepare(cfg)  # the pipeline as is: the private_tokenizer control differs only by its config
    seed = cfg.privacy.seed
    components, client_fn, mod, extra = Components(), ClientRound(), uedp_mod, {}
    if variant.defect == TOO_LITTLE_NOISE:
        noise = ReducedNoise(GaussianNoise(seed=seed))
        components = Components(noise=noise, broken=noise.warning)
    elif variant.defect == PER_STEP_CLIPPING:
        bound = UnclippedUpdate()
        components = Components(aggregator=unchecked_aggregate, broken=PER_STEP_CLIPPING_WARNING)
        client_fn, mod = ClientRound(gradient_hook=clip_each_step), UeDPMod(bound=bound)
    summary = run_server(LocalGrid(cfg, len(manifest.users), client_fn=client_fn, mod=mod), cfg,
                         components=components, stream=log)
    if variant.defect == TOO_LITTLE_NOISE:
        extra = {"sigma_claimed": sorted(noise.asked), "sigma_used": sorted(noise.drawn)}
    elif variant.defect == PER_STEP_CLIPPING:
        extra = {"update_norm_max": max(bound.norms), "update_norm_median": float(np.median(bound.norms)),
                 "beta": cfg.privacy.beta}
    return {**summary, **extra}


def set_verdicts(results: dict[str, Any]) -> None:
    """Each finished run's `reference` and `flagged`, from the groups (uedp.audit.verdicts)."""
    finished = [name for name, run in results["runs"].items() if "status" not in run]
    groups = [GroupResult.from_dict(g) for g in results["groups"]]
    for name, verdict in verdicts(finished, groups).items():
        results["runs"][name].update(reference=verdict.reference, flagged=verdict.flagged)


def run_audit(*, quick: bool, out: Path, variants: tuple[str, ...] = tuple(VARIANTS),
              num_candidates: int | None = None, overrides: dict[str, Any] | None = None,
              command: str = "") -> dict:
    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    n = num_candidates or (999 if quick else 9999)  # the whole 3- or 4-digit space: exact exposure
    results: dict[str, Any] = {"quick": quick, "num_candidates": n, "overrides": overrides or {},
                               "command": command, "runs": {}, "groups": [], "canaries": {}}
    with open(out / "training.log", "w") as log:
        for variant in variants:
            cfg = audit_config(quick=quick, variant=variant, out_dir=out, overrides=overrides)
            try:
                summary = train(VARIANTS[variant], cfg, log)
            except Exception as exc:  # one broken variant must not lose the others' results
                results["runs"][variant] = {"status": f"FAILED: {type(exc).__name__}: {exc}"}
                print(f"{variant}: FAILED ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)
                (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
                continue
            canaries = load_corpus_dir(load_manifest(cfg).corpus_dir).meta["audit_canaries"]
            rows = score(*final_model(cfg), canaries, num_candidates=n, max_len=cfg.task.max_len)
            groups = analyse(variant, summary, rows, num_candidates=n, delta=cfg.privacy.delta)
            results["runs"][variant] = summary
            results["groups"] += [g.to_dict() for g in groups]
            results["canaries"][variant] = rows  # per canary: frequency, member, rank, exposure
            results["delta"] = cfg.privacy.delta
            set_verdicts(results)
            print(f"{variant}: flagged={summary['flagged']} (so far) sigma={summary['sigma']:.4g} "
                  f"({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
            for g in groups:
                print(f"  f={g.frequency}: exposure {g.exposure_mean:.2f} (non-members "
                      f"{g.exposure_nonmember_mean:.2f}) chance p {g.chance_p:.1e} lower bounds "
                      f"{g.eps_lb_cp:.2f}/{g.eps_lb_one_run:.2f}/{g.eps_lb_rank:.2f} claimed "
                      f"{g.claimed_eps:.2f}", file=sys.stderr, flush=True)
            (out / "results.json").write_text(json.dumps(results, indent=1, default=str))  # partial results
    set_verdicts(results)  # a control's twin may have run after it
    results["seconds"] = time.monotonic() - t0
    results["broken_std_rule"] = "min(sigma**2, sigma/100)"
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    return results


def check_request(*, quick: bool, variants: tuple[str, ...], out: Path, settings: list[str]) -> dict[str, Any]:
    """The audit's overrides from `KEY=VALUE` settings, checked against every variant's configuration before
    any training: an unknown variant, key or value raises ConfigError (nothing is written)."""
    if bad := [v for v in variants if v not in VARIANTS]:
        raise ConfigError(f"unknown variant(s) {bad}; choose from {', '.join(VARIANTS)}")
    overrides = parse_options(settings)
    for variant in variants:
        audit_config(quick=quick, variant=variant, out_dir=out, overrides=overrides)
    return overrides


def reanalyse(out: Path) -> dict[str, Any]:
    """The verdicts of a finished audit, re-derived from its results.json alone (no training), saved back."""
    results = json.loads((out / "results.json").read_text())
    results["groups"] = [GroupResult.from_dict(g).to_dict() for g in results["groups"]]  # re-derived
    set_verdicts(results)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    return results


def report(out: Path, results: dict[str, Any], command: str) -> None:
    """report.md and exposure.png of an audit's results."""
    write_report(out, results, command)
    plot(out, results)


def audit(*, quick: bool, out: Path, variants: tuple[str, ...], num_candidates: int | None,
          overrides: dict[str, Any], command: str, again: bool = False) -> str:
    """The audit (`run_audit`), or with `again` the verdicts of the finished one in `out` (`reanalyse`, no
    training), then its report.md and exposure.png; returns report.md."""
    if again:
        results = reanalyse(out)
        command = results.get("command", command)
    else:
        results = run_audit(quick=quick, out=out, variants=variants, num_candidates=num_candidates,
                            overrides=overrides, command=command)
    report(out, results, command)
    return (out / "report.md").read_text()
