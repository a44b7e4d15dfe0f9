"""Crafted-update audit of the mechanism (issue 16): `python -m experiments.audit mechanism [options]`.

For each setting, the sound mechanisms (user_dp: eps_user; uedp: eps_uedp, eps_user, eps_undetected) and
the four broken controls are audited with crafted clients (uedp.audit.mechanism): the realizable worst case
is derived, its law is checked against the server's real round (path A, `--real-trials` runs per world)
and the epsilon lower bound is computed from `--trials` vectorized runs per world (path B, the same noise
source). Writes audit_mechanism.json, audit_mechanism.md and audit_mechanism.png under --out.

    python -m experiments.audit mechanism --out docs/figures --seed 0
    python -m experiments.audit mechanism --settings main --trials 20000 --set privacy.q_u=0.3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import chisquare, ks_2samp

from uedp.audit.mechanism import (
    CONTROLS,
    AuditedMechanism,
    AuditSetting,
    Law,
    Scenario,
    audit,
    control_mechanism,
    mixture_epsilon,
    realizable_law,
    run_real,
    run_vectorized,
    score,
    sound_mixture_at,
)
from uedp.privacy.noise import FIXED_SEED_WARNING, GaussianNoise, NoiseSource

SETTINGS = {
    "main": AuditSetting(name="main"),  # the main job's: uedp.config.PrivacyConfig defaults, 200 users, 30 rounds
    # truncation in every round: 200 of 400 users drawn on average, 150 kept (P(drawn < 150) = 2e-7 per round)
    "full_cohort": AuditSetting(name="full_cohort", num_users=400, q_u=0.5, m_max=150),
    # a full cohort where the entity term dominates: 100 of 2000 drawn, 50 kept, q_e 0.5, claim 4
    "entity_heavy": AuditSetting(name="entity_heavy", num_users=2000, q_u=0.05, m_max=50, q_e=0.5,
                                 target_epsilon=4.0),
}
# Each control: (method, adjacency, setting, claimed epsilon). Picked so that the true epsilon against the
# realizable worst case is clearly above the claim (computed first, printed in the report).
CONTROL_ROWS = {
    "noise_halved": ("user_dp", "user", "main", 2.0),
    "accountant_half_q_u": ("user_dp", "user", "main", 2.0),
    "entity_k_beta": ("uedp", "uedp", "entity_heavy", 2.0),
    "no_user_term": ("uedp", "uedp", "full_cohort", 2.0),
}
SOUND_ROWS = (("user_dp", "user"), ("uedp", "uedp"), ("uedp", "user"), ("uedp", "undetected"))


def design_for(method: str, setting: AuditSetting) -> str:
    """The full design (base -b) where the cohort is full with overwhelming probability, else zero."""
    if method != "uedp":
        return "zero"
    full = realizable_law(Scenario(setting, "uedp", "user", "full"))
    return "full" if full.nonfull < 1e-6 else "zero"


def apply_overrides(setting: AuditSetting, overrides: list[str]) -> AuditSetting:
    """--set KEY=VALUE (KEY: an AuditSetting field, optionally prefixed: privacy.q_u, federation.rounds)."""
    names = {f.name: f.type for f in dataclasses.fields(AuditSetting)}
    changes: dict[str, Any] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        name = key.rsplit(".", 1)[-1]
        if not sep or name not in names or name == "name":
            raise ValueError(f"--set {item!r}: expected KEY=VALUE with KEY one of {sorted(set(names) - {'name'})}")
        changes[name] = int(value) if name in ("num_users", "m_max", "k_cap", "rounds") else float(value)
    return dataclasses.replace(setting, **changes)


def _chi_square(observed: np.ndarray, law: dict[int, float]) -> dict[str, Any]:
    """Pearson chi-square of the realized shifts against the law (bins with expected count < 5 merged)."""
    values = np.rint(observed).astype(int).ravel()
    n = values.size
    support = sorted(law)
    outside = int(np.sum(~np.isin(values, support)))
    obs, exp = [], []
    acc_o = acc_e = 0.0
    for v in support:
        acc_o += float(np.sum(values == v))
        acc_e += law[v] * n
        if acc_e >= 5.0:
            obs.append(acc_o)
            exp.append(acc_e)
            acc_o = acc_e = 0.0
    if exp:
        obs[-1] += acc_o
        exp[-1] += acc_e
    if len(exp) < 2:
        return {"p": 1.0, "bins": len(exp), "outside_support": outside, "rounds": n}
    exp_arr = np.array(exp) * (sum(obs) / sum(exp))
    return {"p": float(chisquare(obs, exp_arr).pvalue), "bins": len(exp), "outside_support": outside, "rounds": n}


def validate_real_path(mech: AuditedMechanism, law: Law, trials: int, rng: random.Random,
                       np_rng: np.random.Generator) -> dict[str, Any]:
    """Path A against the law and against path B: realized shifts (chi-square per world, the maximum
    against the accounted sensitivity), and the scores of the real runs against vectorized ones (KS)."""
    out: dict[str, Any] = {"trials": trials}
    t0 = time.monotonic()
    for world in (0, 1):
        real = run_real(mech, world, trials, rng)
        y_b, _ = run_vectorized(mech, law, world, max(10 * trials, 2000), np_rng)
        s_a, s_b = score(mech, law, real.y), score(mech, law, y_b)
        out[f"world{world}"] = {
            "chi_square": _chi_square(real.shift, law.world1 if world else law.world0),
            "max_shift": float(real.shift.max()), "min_shift": float(real.shift.min()),
            "frequencies": {str(int(v)): int(np.sum(np.rint(real.shift) == v)) for v in np.unique(real.shift)},
            "score_mean_real": float(s_a.mean()), "score_mean_vectorized": float(s_b.mean()),
            "ks_p": float(ks_2samp(s_a, s_b).pvalue), "recheck": real.statuses,
        }
    out["seconds"] = time.monotonic() - t0
    return out


def audit_row(sc: Scenario, control: str | None, *, trials: int, real_trials: int, noise: NoiseSource,
              rng: random.Random, np_rng: np.random.Generator) -> dict[str, Any]:
    t0 = time.monotonic()
    s = sc.setting
    mech = control_mechanism(sc, control, noise)
    law = realizable_law(sc)
    true_eps = mixture_epsilon(law.mixture(mech.actual_sigma / s.unit), s.rounds, s.delta)
    accounted_true = mixture_epsilon(sound_mixture_at(sc, mech.actual_sigma), s.rounds, s.delta)
    lb, stats = audit(mech, law, trials=trials, rng=np_rng)
    sound = sound_mixture_at(sc, mech.sigma)
    row: dict[str, Any] = {
        "setting": s.name, "method": sc.method, "adjacency": sc.adjacency, "design": sc.design,
        "control": control or "sound", "warning": mech.warning, "z": mech.z, "sigma_reported": mech.sigma,
        "sigma_drawn": mech.actual_sigma, "Z": mech.Z, "unit": s.unit,
        "claimed_epsilon": mech.claimed_epsilon,
        "claimed_shifts": list(mech.claimed.sensitivities), "claimed_probs": list(mech.claimed.probs),
        "sound_accounted_shifts": list(sound.sensitivities), "sound_accounted_probs": list(sound.probs),
        "accounted_max_shift": max(sound.sensitivities),
        "realizable_shifts": list(law.shifts), "realizable_probs": list(law.probs),
        "realizable_max_shift": max(law.shifts), "nonfull_probability": law.nonfull,
        "true_epsilon_realizable": true_eps, "true_epsilon_accounted": accounted_true,
        "trials_per_world": trials, "lower_bound": lb.to_dict(), **stats,
        "ratio_lb_claim": lb.eps_lb / mech.claimed_epsilon,
        "ratio_lb_true": lb.eps_lb / true_eps if true_eps > 0 else math.nan,
        "setting_params": dataclasses.asdict(s),
    }
    if real_trials and control is None:
        row["real_path"] = validate_real_path(mech, law, real_trials, rng, np_rng)
    row["seconds"] = time.monotonic() - t0
    return row


def rows_to_run(settings: list[AuditSetting], controls: list[str],
                lookup: dict[str, AuditSetting] | None = None) -> list[tuple[Scenario, str | None]]:
    """The sound rows of `settings`, then each control (at its setting from `lookup`, default SETTINGS, with
    the claim of CONTROL_ROWS) and the sound twin of each control (the same setting and claim)."""
    out: list[tuple[Scenario, str | None]] = []
    by_name = {**(lookup or SETTINGS), **{s.name: s for s in settings}}
    for s in settings:
        for method, adjacency in SOUND_ROWS:
            out.append((Scenario(s, method, adjacency, design_for(method, s)), None))
    twins: list[tuple[Scenario, str | None]] = []
    for control in controls:
        method, adjacency, name, claim = CONTROL_ROWS[control]
        base = by_name[name]
        s = dataclasses.replace(base, name=f"{name}@{claim:g}", target_epsilon=claim)
        sc = Scenario(s, method, adjacency, design_for(method, s))
        out.append((sc, control))
        if (sc, None) not in twins:
            twins.append((sc, None))  # the sound mechanism at the control's setting and claim
    return out + twins


def write_report(out: Path, results: dict[str, Any]) -> None:
    lines = [
        "# Crafted-update audit of the mechanism (issue 16)", "",
        f"Command: `{results['command']}`; {results['seconds']:.0f} s. Trials per world: "
        f"{results['trials']:,} (vectorized path), {results['real_trials']} (real path, sound rows). "
        f"Confidence {results['confidence']:.0%} (Clopper-Pearson, one-sided 97.5% on each rate); "
        "threshold chosen on the even trials, bound on the odd ones.",
    ]
    if results.get("warning"):
        lines += ["", f"**{results['warning']}** (seeded for reproduction; an audit, not a private run)."]
    lines += ["", "| setting | mechanism | adjacency | design | control | claimed eps "
              "| true eps, realizable worst case | true eps, sound accountant | lower bound (95%) "
              "| LB / claim | LB / true | TPR / FPR (eval) "
              "| realizable shifts (b) : probs | accounted shifts (b) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        lb = r["lower_bound"]
        shifts = ", ".join(f"{s:g}:{p:.3g}" for s, p in zip(r["realizable_shifts"], r["realizable_probs"]))
        acc = ", ".join(f"{s:g}" for s in r["sound_accounted_shifts"])
        lines.append(
            f"| {r['setting']} | {r['method']} | {r['adjacency']} | {r['design']} | {r['control']} "
            f"| {r['claimed_epsilon']:.2f} | {r['true_epsilon_realizable']:.2f} | {r['true_epsilon_accounted']:.2f} "
            f"| {lb['eps_lb']:.2f} | {r['ratio_lb_claim']:.2f} | {r['ratio_lb_true']:.2f} "
            f"| {lb['tpr']:.2e} / {lb['fpr']:.2e} | {shifts} | {acc} |")
    lines += ["", "Real path (server round with crafted clients) against the exact law and the vectorized path:", "",
              "| setting | mechanism | adjacency | rounds | max realized shift (b) | accounted max (b) "
              "| chi-square p (w0 / w1) | KS p scores real vs vectorized (w0 / w1) | re-check |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        a = r.get("real_path")
        if not a:
            continue
        w0, w1 = a["world0"], a["world1"]
        lines.append(
            f"| {r['setting']} | {r['method']} | {r['adjacency']} | {w1['chi_square']['rounds']} "
            f"| {w1['max_shift']:g} | {r['accounted_max_shift']:g} "
            f"| {w0['chi_square']['p']:.2f} / {w1['chi_square']['p']:.2f} | {w0['ks_p']:.2f} / {w1['ks_p']:.2f} "
            f"| {w1['recheck']} |")
    (out / "audit_mechanism.md").write_text("\n".join(lines) + "\n")


def plot(out: Path, results: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5.5))
    top = max(max(r["claimed_epsilon"], r["true_epsilon_realizable"]) for r in results["rows"]) * 1.1
    ax.plot([0, top], [0, top], "k-", lw=0.8, label="lower bound = claim")
    ax.plot([0, top], [0, top / 2], "k:", lw=0.8, label="lower bound = claim / 2")
    for r in results["rows"]:
        sound = r["control"] == "sound"
        color = "tab:blue" if sound else "tab:red"
        marker = {"user": "o", "uedp": "s", "undetected": "^"}[r["adjacency"]]
        ax.scatter(r["claimed_epsilon"], r["lower_bound"]["eps_lb"], color=color, marker=marker, zorder=3)
        ax.scatter(r["claimed_epsilon"], r["true_epsilon_realizable"], facecolors="none", edgecolors=color,
                   marker=marker, zorder=3)
        ax.plot([r["claimed_epsilon"]] * 2, [r["lower_bound"]["eps_lb"], r["true_epsilon_realizable"]], color=color,
                lw=0.5, alpha=0.5)
        label = r["control"] if not sound else f"{r['setting']} {r['method']} {r['adjacency']}"
        ax.annotate(label, (r["claimed_epsilon"], r["lower_bound"]["eps_lb"]), fontsize=6, xytext=(3, -3),
                    textcoords="offset points")
    ax.set_xlabel("claimed epsilon (the run's accountant)")
    ax.set_ylabel("epsilon: lower bound (filled), true of realizable worst case (hollow)")
    ax.set_title("Crafted-update audit: sound (blue) and broken controls (red)\n"
                 "o eps_user, square eps_uedp, triangle eps_undetected", fontsize=9)
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(out / "audit_mechanism.png", dpi=130)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.audit mechanism", description=__doc__.split("\n")[0])
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of {', '.join(SETTINGS)}")
    parser.add_argument("--controls", default=",".join(CONTROLS), help="comma-separated controls, or 'none'")
    parser.add_argument("--trials", type=int, default=1_000_000, help="vectorized runs per world")
    parser.add_argument("--real-trials", type=int, default=40, help="real-path runs per world (sound rows)")
    parser.add_argument("--out", type=Path, default=Path("outputs/audit_mechanism"))
    parser.add_argument("--seed", type=int, default=None, help="fixed seed (reproduction; default: CSPRNG)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting parameter in every setting (privacy.q_u=0.3, rounds=10, ...)")
    args = parser.parse_args(argv)
    names = [n for n in args.settings.split(",") if n]
    controls = [] if args.controls == "none" else [c for c in args.controls.split(",") if c]
    if bad := [n for n in names if n not in SETTINGS] + [c for c in controls if c not in CONTROLS]:
        parser.error(f"unknown setting(s) or control(s): {bad}")
    try:
        lookup = {n: apply_overrides(s, args.overrides) for n, s in SETTINGS.items()}  # also the controls'
        settings = [lookup[n] for n in names]
    except ValueError as exc:
        parser.error(str(exc))
    command = "python -m experiments.audit mechanism " + " ".join(sys.argv[2:] if argv is None else argv)
    noise = GaussianNoise(seed=args.seed)
    rng = random.Random(args.seed) if args.seed is not None else random.SystemRandom()
    np_rng = np.random.default_rng(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    results: dict[str, Any] = {"command": command.strip(), "trials": args.trials, "real_trials": args.real_trials,
                               "confidence": 0.95, "seed": args.seed,
                               "warning": FIXED_SEED_WARNING if args.seed is not None else None, "rows": []}
    for sc, control in rows_to_run(settings, controls, lookup):
        row = audit_row(sc, control, trials=args.trials, real_trials=args.real_trials, noise=noise, rng=rng,
                        np_rng=np_rng)
        results["rows"].append(row)
        lb = row["lower_bound"]
        print(f"{sc.label} [{row['control']}, {sc.design}]: claim {row['claimed_epsilon']:.2f}, true (realizable) "
              f"{row['true_epsilon_realizable']:.2f}, LB {lb['eps_lb']:.2f} (TPR {lb['tpr']:.2e}, FPR {lb['fpr']:.2e})"
              f" ({row['seconds']:.0f} s)", file=sys.stderr, flush=True)
        results["seconds"] = time.monotonic() - t0
        (args.out / "audit_mechanism.json").write_text(json.dumps(results, indent=1, default=str))
    results["seconds"] = time.monotonic() - t0
    (args.out / "audit_mechanism.json").write_text(json.dumps(results, indent=1, default=str))
    write_report(args.out, results)
    plot(args.out, results)
    print((args.out / "audit_mechanism.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
