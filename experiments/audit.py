"""Empirical privacy audit: `python -m experiments.audit [--quick] [--out outputs/audit]`.

Trains, in process (the real server loop and client code over a LocalGrid), on the synthetic corpus
with coin-flipped canaries (`audit_synthetic`, uedp.audit.canaries), one model per variant:

- fedavg: noiseless FedAvg (shows the audit has power);
- uedp, user_dp: the mechanisms at the run defaults (calibrated to privacy.target_epsilon);
- control_a (too little noise) and control_b (per-step gradient clipping, no update clip, no server
  re-check): the broken variants of uedp.audit.controls, applied to user_dp (see docs/audit.md for why).

Then, per variant and canary frequency: exposure of every planted secret among N random candidates (the
whole rest of the space when it is that small: the quick audit's 3-digit secrets),
a threshold membership attack on member vs non-member canaries (score: the secret's rank
among its candidates, i.e. its log-likelihood given the prefix calibrated against the space; uniform
for a non-member) with the Clopper-Pearson and one-run
epsilon lower bounds, and the rank-based bound; each compared with the epsilon the variant claims for
that canary (user canaries, frequency 1: eps_user; entity canaries, frequency > 1: eps_uedp for UeDP and
group privacy f * eps_user for user-level DP). Writes `report.md`, `results.json` and `exposure.png`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import uedp.audit  # noqa: E402,F401 - registers audit_synthetic
from experiments.local_grid import set_local_task_identity  # noqa: E402
from experiments.plotting import pyplot, save  # noqa: E402
from uedp.audit.controls import AuditGrid, no_server_recheck, per_step_clip_client_update, too_little_noise  # noqa: E402
from uedp.audit.exposure import chance_p_value, exposure, rank_epsilon_lower_bound, rank_of, sentence_nll  # noqa: E402
from uedp.audit.membership import (  # noqa: E402
    cp_epsilon_lower_bound,
    median_threshold,
    one_run_epsilon_lower_bound,
    one_run_guesses,
    threshold_attack,
)
from uedp.commands.options import parse_options  # noqa: E402
from uedp.config import RunConfig  # noqa: E402
from uedp.data.loaders import materialize  # noqa: E402
from uedp.data.store import load_corpus_dir  # noqa: E402
from uedp.data.synthetic import canary_candidates  # noqa: E402
from uedp.errors import ConfigError  # noqa: E402
from uedp.models.base import set_weights  # noqa: E402
from uedp.pipeline import load_manifest, load_tokenizer, new_model, prepare  # noqa: E402
from uedp.tokenization import TokenizerConfig, tokenizer_cache_path, train_tokenizer  # noqa: E402

VARIANTS = ("fedavg", "uedp", "user_dp", "control_a", "control_b", "user_dp_beta1")
# Both audits clip below FedAvg's update norms (quick: beta 0.1; full: the default 0.2), so control (b)'s
# missing update clip matters. At such a beta the clip alone keeps even a noiseless run from memorizing
# as much, which hid control (a)'s defect (docs/audit.md, Findings 4 and 6). So control (a) runs at beta
# 1.0, where the clip rarely binds, and `user_dp_beta1` is its sound twin: the same mechanism at the same
# beta with the correct noise. Beta does not enter the claimed epsilon (the noise is z times the
# sensitivity), so each pair differs only in the defect under test.
PAIR_BETA = {"control_a": 1.0, "user_dp_beta1": 1.0}
CONFIDENCE = 0.95
CHANCE_P = 1e-3  # exposure flag: members' ranks beat chance at this p-value ...
EXPOSURE_GAP = 2.0  # ... and their mean exposure exceeds the non-members' by this many bits


def audit_config(*, quick: bool, variant: str, out_dir: Path, seed: int = 0,
                 overrides: dict[str, Any] | None = None) -> RunConfig:
    """The run configuration of one variant: the main job's defaults (full) or a small CI version, with the
    user's `overrides` ({"group.key": value} or {"group.options.key": value}) on top, so any configuration
    can be audited. The variant decides the strategy and output folder, which cannot be overridden."""
    strategy = {"fedavg": "fedavg", "uedp": "uedp"}.get(variant, "user_dp")
    if quick:
        # Power needs: the canary inside max_len (a 400-token vocabulary made it ~30 tokens, cut at 32, so
        # the secret was never trained on), a 3-digit space ranked exactly, every user every round, and
        # enough local steps for noiseless FedAvg to memorize a secret seen by 5 users. Client SGD, not Adam
        # (Adam ignores the per-step gradient scale, which made control (b) vacuous), and beta 0.1 below
        # FedAvg's update norms (median ~0.6), so control (b)'s unclipped updates really exceed beta.
        nested: dict[str, Any] = {
            "dataset": {"name": "audit_synthetic", "options": {
                "num_users": 10, "min_sentences": 20, "max_sentences": 40, "frequencies": [1, 5],
                "per_frequency": 16, "copies": 8, "space": "ddd"}},
            "tokenizer": {"vocab_size": 1000},
            "task": {"max_len": 40},
            "model": {"options": {"emb_dim": 24, "hidden_dim": 48}},
            "privacy": {"q_u": 1.0, "m_max": 40, "beta": 0.1, "delta": 1e-3,
                        "seed": seed},
            "train": {"optimizer": "sgd", "lr": 1.0, "local_epochs": 3},
            "server": {"optimizer": "sgd", "lr": 1.0, "momentum": 0.0},
            "federation": {"rounds": 30, "eval_every": 30, "checkpoint_every": 30},
        }
    else:
        # The main job's settings. At their training budget (30 rounds, ~50 of 200 users per round, one
        # local epoch) noiseless FedAvg memorizes no canary held by 8 users or fewer (docs/audit.md,
        # Finding 6), so the full audit adds canaries held by 32 users: they give it power, and they are
        # the entities UeDP protects at eps_uedp whatever their frequency, while user-level DP covers them
        # only by group privacy (32 * eps_user). 4-digit secrets: the whole space is ranked (exact).
        nested = {"dataset": {"name": "audit_synthetic", "options": {
            "num_users": 200, "frequencies": [1, 2, 4, 8, 32], "per_frequency": 16, "copies": 8,
            "space": "dddd"}},
            "task": {"max_len": 48}}
    if variant in PAIR_BETA:
        nested.setdefault("privacy", {})["beta"] = PAIR_BETA[variant]
    for key, value in (overrides or {}).items():
        _override(nested, key, value)
    nested.setdefault("strategy", {})["name"] = strategy
    nested.setdefault("federation", {})["out_dir"] = str(out_dir / variant)
    return RunConfig.from_nested(nested)


def _override(nested: dict[str, Any], key: str, value: Any) -> None:
    """Set `group.key` or `group.options.key` (dataset, model) in the nested config."""
    parts = key.split(".")
    if key in ("strategy.name", "federation.out_dir"):
        raise ConfigError(f"--set {key}: set by the audit variant (use --variants / --out)")
    if len(parts) == 2:
        nested.setdefault(parts[0], {})[parts[1]] = value
    elif len(parts) == 3 and parts[1] == "options":
        group = nested.setdefault(parts[0], {})
        group["options"] = {**group.get("options", {}), parts[2]: value}
    else:
        raise ConfigError(f"--set {key}: expected group.key or group.options.key")


def canary_free_tokenizer(cfg: RunConfig) -> None:
    """Train the run's tokenizer on the corpus WITHOUT the audit canaries and put it where the pipeline
    looks for it. A tokenizer trained on the training split (the pipeline's default, a non-private
    preprocessing step) learns merges for frequent planted secrets: the first audit runs showed exposure
    ~7 bits for frequency-4 canaries even for UeDP, from the vocabulary alone. The audit measures the
    mechanism, so its tokenizer must not depend on membership (as a public tokenizer would not)."""
    corpus_dir, corpus = materialize(cfg.dataset.name, **cfg.dataset.option_dict())
    tok_cfg = TokenizerConfig(kind=cfg.tokenizer.kind, vocab_size=cfg.tokenizer.vocab_size)
    path = tokenizer_cache_path(corpus, tok_cfg)
    if path.is_file():
        return
    planted = {c["text"] for c in corpus.meta["audit_canaries"]}
    texts = [t for t in corpus.split("train").column("text").to_pylist() if t not in planted]
    train_tokenizer(texts, tok_cfg).save(path, exclusive=True)


def train(variant: str, cfg: RunConfig, log) -> dict[str, Any]:
    """One training run; returns run_server's summary plus what the control did."""
    set_local_task_identity()
    canary_free_tokenizer(cfg)
    manifest = prepare(cfg)
    grid = AuditGrid(cfg, len(manifest.users),
                     client_fn=per_step_clip_client_update if variant == "control_b" else None)
    from server.app import run_server

    extra: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        if variant == "control_a":
            made = stack.enter_context(too_little_noise())
        if variant == "control_b":
            stack.enter_context(no_server_recheck())
        summary = run_server(grid, cfg, stream=log)
    if variant == "control_a":
        extra = {"sigma_claimed": sorted(made[0].asked), "sigma_used": sorted(made[0].drawn)}
    if grid.update_norms:
        extra["update_norm_max"] = max(grid.update_norms)
        extra["update_norm_median"] = float(np.median(grid.update_norms))
        extra["beta"] = cfg.privacy.beta
    return {**summary, **extra}


def candidates_for(canary: dict, num_candidates: int, *, seed: int) -> list[str]:
    """`num_candidates` random secrets of the canary's space other than its own; the WHOLE rest of the
    space (exact exposure) when the space has at most num_candidates + 1 values."""
    space, secret = canary["space"], canary["secret"]
    k = space.count("d")
    if 10**k - 1 <= num_candidates:
        pieces = space.split("d")
        out = []
        for value in range(10**k):
            digits = f"{value:0{k}d}"
            text = "".join(p + d for p, d in zip(pieces, digits)) + pieces[-1]
            if text != secret:
                out.append(text)
        return out
    return canary_candidates(space, num_candidates, seed, exclude={secret})


def score(cfg: RunConfig, canaries: list[dict], *, num_candidates: int) -> list[dict]:
    """Per canary: rank and exposure of its secret (the prefix is shared, so ranking whole-sentence NLLs
    ranks the secret's log-likelihood given the prefix), and its mean token loss (kept for reference)."""
    manifest = load_manifest(cfg)
    tokenizer = load_tokenizer(manifest.tokenizer)
    model = new_model(cfg, manifest)
    set_weights(model, torch.load(Path(cfg.federation.out_dir) / "model.pt", weights_only=False)["weights"])
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    rows = []
    for i, c in enumerate(canaries):
        cands = candidates_for(c, num_candidates, seed=1000 + i)
        texts = [c["text"]] + [c["prefix"] + s + "." for s in cands]
        nll = sentence_nll(model, tokenizer, texts, max_len=64)
        ids = tokenizer.encode(c["text"])
        if len(ids) + 2 > cfg.task.max_len:  # [BOS] ... [EOS]: a cut canary's secret is never trained on
            raise ValueError(f"canary {c['id']} is {len(ids) + 2} tokens > task.max_len={cfg.task.max_len}: "
                             "raise max_len or tokenizer.vocab_size, or the audit measures nothing")
        rank = rank_of(float(nll[0]), nll[1:])
        if len(cands) != num_candidates:
            raise ValueError(f"canary {c['id']}: {len(cands)} candidates, {num_candidates} asked")
        rows.append({"id": c["id"], "frequency": c["frequency"], "member": c["member"],
                     "loss": float(nll[0]) / (len(ids) + 1), "rank": rank,
                     "exposure": exposure(rank, num_candidates)})
    return rows


def claimed(variant: str, summary: dict, freq: int) -> float:
    """The epsilon the variant claims for a canary living in `freq` users (one entity)."""
    if variant == "fedavg":
        return math.inf
    if variant == "uedp":
        return summary["eps_user"] if freq == 1 else summary["eps_uedp"]
    return freq * summary["eps_user"]  # user-level DP: group privacy over the freq users


def analyse(variant: str, summary: dict, rows: list[dict], *, num_candidates: int, delta: float) -> list[dict]:
    out = []
    for freq in sorted({r["frequency"] for r in rows}):
        group = [r for r in rows if r["frequency"] == freq]
        members = [r for r in group if r["member"]]
        loss = [r["rank"] for r in group]  # membership score: the secret's rank (uniform for non-members)
        is_in = [r["member"] for r in group]
        conf = threshold_attack(loss, is_in, median_threshold(loss))
        r, v = one_run_guesses(loss, is_in, k=max(1, len(group) // 4))
        rank_lb = max(rank_epsilon_lower_bound(m["rank"], num_candidates, delta=delta, alpha=1 - CONFIDENCE,
                                               tests=len(members)) for m in members)
        lbs = {"eps_lb_cp": cp_epsilon_lower_bound(conf, delta=delta, confidence=CONFIDENCE),
               "eps_lb_one_run": one_run_epsilon_lower_bound(r, v, confidence=CONFIDENCE),
               "eps_lb_rank": rank_lb}
        claim = claimed(variant, summary, freq)
        out.append({
            "variant": variant, "frequency": freq, "kind": "user" if freq == 1 else "entity",
            "members": len(members), "non_members": len(group) - len(members),
            "exposure_mean": float(np.mean([m["exposure"] for m in members])),
            "exposure_median": float(np.median([m["exposure"] for m in members])),
            "exposure_nonmember_mean": float(np.mean([g["exposure"] for g in group if not g["member"]])),
            "chance_p": chance_p_value([m["rank"] for m in members], num_candidates),
            "tpr": conf.tpr, "fpr": conf.fpr, "one_run": f"{v}/{r}", **lbs,
            "claimed_eps": claim, "violation": max(lbs.values()) > claim,
        })
        classify(out[-1])
    return out


def leaks(g: dict) -> bool:
    """Exposure far above chance: the members' ranks beat chance (p < CHANCE_P) by a wide margin."""
    return g["chance_p"] < CHANCE_P and g["exposure_mean"] - g["exposure_nonmember_mean"] > EXPOSURE_GAP


def classify(g: dict) -> None:
    """Mark a group's leak, and whether its claim is user-level DP's group privacy (freq * eps_user)."""
    g["group_privacy"] = g["variant"] not in ("fedavg", "uedp") and g["frequency"] > 1
    g["leak"] = leaks(g)


def reference_of(variant: str) -> str | None:
    """The sound twin of a broken control: the same configuration without the defect."""
    if variant == "control_a":
        return "user_dp_beta1"  # both at beta 1.0 (PAIR_BETA)
    return "user_dp" if variant == "control_b" else None


def flagged(groups: list[dict], reference: list[dict] | None = None) -> bool:
    """A variant is flagged if a lower bound exceeds its claim, or if a canary group leaks (exposure far
    above chance) where the variant's claim should prevent it. A leak counts when the group's claim is one
    the mechanism states directly (eps_user for user canaries, eps_uedp for UeDP's entity canaries; FedAvg,
    which claims nothing, is flagged by any leak: that shows the audit's power). User-level DP covers an
    entity held by f users only by group privacy (f * eps_user, vacuous for large f), so there a leak is
    what the guarantee allows, and it counts only if the variant's sound `reference` (a control's twin, run
    in the same audit) does not leak on the same canaries. Exposure can never prove a violation at eps of
    8 or more (under eps-DP the mean exposure may reach (eps + 1) / ln 2 bits), so the exposure rule is a
    comparison with what the sound mechanism shows, not a proof; the lower bounds are the proof."""
    ref = None if reference is None else {g["frequency"]: leaks(g) for g in reference}
    for g in groups:
        if g["violation"]:
            return True
        if leaks(g) and (not g.get("group_privacy") or (ref is not None and not ref.get(g["frequency"], False))):
            return True
    return False


def verdicts(results: dict) -> None:
    """Set each finished run's `flagged` (and the reference it was compared with) from the groups."""
    by_variant: dict[str, list[dict]] = {}
    for g in results["groups"]:
        by_variant.setdefault(g["variant"], []).append(g)
    for name, run in results["runs"].items():
        if "status" in run:
            continue
        ref = reference_of(name)
        reference = None
        if ref is not None:  # a control: compared with its twin, or with chance if the twin was not run
            reference = by_variant.get(ref, [])
            ref = ref if ref in by_variant else f"chance ({ref} not run)"
        run["reference"] = ref
        run["flagged"] = flagged(by_variant.get(name, []), reference)


def _fmt(x: float) -> str:
    return "inf" if x == math.inf else f"{x:.2f}"


def _group_flag(g: dict) -> str:
    if g["violation"]:
        return "VIOLATION"
    if g.get("leak"):
        return "leak (group privacy only)" if g.get("group_privacy") else "leak"
    return ""


def write_report(out: Path, results: dict, command: str) -> None:
    lines = [f"# Privacy audit ({'quick' if results['quick'] else 'full'})", "",
             f"Command: `{command}`; {results['num_candidates']} candidates per secret; confidence "
             f"{CONFIDENCE}; delta {results.get('delta')}; total {results['seconds']:.0f} s.", "",
             "| variant | freq | kind | in/out | exposure mean (median) | non-member exposure | chance p | "
             "TPR/FPR | one-run | eps_lb CP | eps_lb one-run | eps_lb rank | claimed eps | flag |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for g in results["groups"]:
        lines.append(
            f"| {g['variant']} | {g['frequency']} | {g['kind']} | {g['members']}/{g['non_members']} | "
            f"{g['exposure_mean']:.2f} ({g['exposure_median']:.2f}) | {g['exposure_nonmember_mean']:.2f} | "
            f"{g['chance_p']:.1e} | {g['tpr']:.2f}/{g['fpr']:.2f} | {g['one_run']} | {_fmt(g['eps_lb_cp'])} | "
            f"{_fmt(g['eps_lb_one_run'])} | {_fmt(g['eps_lb_rank'])} | {_fmt(g['claimed_eps'])} | "
            f"{_group_flag(g)} |")
    lines += ["", "flag: VIOLATION = a lower bound above the claim; leak = exposure far above chance (p < "
              f"{CHANCE_P:g}, members > non-members + {EXPOSURE_GAP:g} bits); \"group privacy only\" = a user-level "
              "DP claim of f * eps_user, which allows the leak. A variant is flagged by a violation, or by a leak "
              "its claim should prevent (for a control: one its sound reference does not show); see `flagged`.",
              "", "| variant | flagged | reference | sigma | eps_uedp | eps_user | test perplexity | "
              "control details | seconds |", "|---|---|---|---|---|---|---|---|---|"]
    for name, run in results["runs"].items():
        if "status" in run:
            lines.append(f"| {name} | {run['status']} | | | | | | | |")
            continue
        details = {k: run[k] for k in ("sigma_claimed", "sigma_used", "update_norm_max", "update_norm_median",
                                       "beta") if k in run}
        lines.append(f"| {name} | {run['flagged']} | {run.get('reference') or ''} | {run['sigma']:.4g} | "
                     f"{_fmt(run['eps_uedp'])} | "
                     f"{_fmt(run['eps_user'])} | {run['final'].get('perplexity', float('nan')):.1f} | "
                     f"{json.dumps(details)} | {run['seconds']} |")
    (out / "report.md").write_text("\n".join(lines) + "\n")


def plot(out: Path, results: dict) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in results["runs"]:
        gs = [g for g in results["groups"] if g["variant"] == name]
        ax.plot([g["frequency"] for g in gs], [g["exposure_mean"] for g in gs], marker="o", label=name)
    n = results["num_candidates"]
    ax.axhline(1 / math.log(2), color="grey", ls="--", label="chance (1.44 bits)")
    ax.axhline(math.log2(n + 1), color="grey", ls=":", label=f"max (log2 {n + 1})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("canary frequency (users holding it)")
    ax.set_ylabel("mean exposure of planted secrets (bits)")
    ax.legend(fontsize=8)
    save(fig, out / "exposure.png")


def run_audit(*, quick: bool, out: Path, variants: tuple[str, ...] = VARIANTS,
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
                summary = train(variant, cfg, log)
            except Exception as exc:  # one broken variant must not lose the others' results
                results["runs"][variant] = {"status": f"FAILED: {type(exc).__name__}: {exc}"}
                print(f"{variant}: FAILED ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)
                (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
                continue
            canaries = load_corpus_dir(load_manifest(cfg).corpus_dir).meta["audit_canaries"]
            rows = score(cfg, canaries, num_candidates=n)
            groups = analyse(variant, summary, rows, num_candidates=n, delta=cfg.privacy.delta)
            results["runs"][variant] = summary
            results["groups"] += groups
            results["canaries"][variant] = rows  # per canary: frequency, member, rank, exposure
            results["delta"] = cfg.privacy.delta
            verdicts(results)
            print(f"{variant}: flagged={summary['flagged']} (so far) sigma={summary['sigma']:.4g} "
                  f"({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
            for g in groups:
                print(f"  f={g['frequency']}: exposure {g['exposure_mean']:.2f} (non-members "
                      f"{g['exposure_nonmember_mean']:.2f}) chance p {g['chance_p']:.1e} lower bounds "
                      f"{g['eps_lb_cp']:.2f}/{g['eps_lb_one_run']:.2f}/{g['eps_lb_rank']:.2f} claimed "
                      f"{_fmt(g['claimed_eps'])}", file=sys.stderr, flush=True)
            (out / "results.json").write_text(json.dumps(results, indent=1, default=str))  # partial results
    verdicts(results)  # a control's twin may have run after it
    results["seconds"] = time.monotonic() - t0
    results["broken_std_rule"] = "min(sigma**2, sigma/100)"
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.audit", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small CI version (10 users, tiny model)")
    parser.add_argument("--out", type=Path, default=Path("outputs/audit"))
    parser.add_argument("--candidates", type=int, default=None, help="candidates per secret")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--reanalyse", action="store_true",
                        help="recompute the verdicts, report and plot of the audit in --out (no training)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="audit another configuration: group.key=value or group.options.key=value "
                             "(e.g. privacy.q_u=0.5, dataset.options.copies=16); repeatable")
    args = parser.parse_args(argv)
    variants = tuple(v for v in args.variants.split(",") if v)
    if bad := [v for v in variants if v not in VARIANTS]:
        parser.error(f"unknown variant(s) {bad}; choose from {', '.join(VARIANTS)}")
    try:
        overrides = parse_options(args.overrides)
        for variant in variants:
            audit_config(quick=args.quick, variant=variant, out_dir=args.out, overrides=overrides)
    except ConfigError as exc:  # a bad key or value fails before any training
        parser.error(str(exc))
    command = "python -m experiments.audit " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.reanalyse:  # the verdicts and report of a finished audit, from its results.json
        results = json.loads((args.out / "results.json").read_text())
        for g in results["groups"]:
            classify(g)
        verdicts(results)
        command = results.get("command", command)
        (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    else:
        results = run_audit(quick=args.quick, out=args.out, variants=variants, num_candidates=args.candidates,
                            overrides=overrides, command=command.strip())
    write_report(args.out, results, command.strip())
    plot(args.out, results)
    print((args.out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
