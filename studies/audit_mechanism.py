"""Crafted-update audit of the mechanism (under the proved accounting of docs/proofs.md): `python -m experiments.audit
mechanism [options]`.

For each setting, the sound mechanisms (user_dp: eps_user; uedp: eps_uedp, eps_user, eps_undetected with the
"zero" and the "flip" design) and the broken controls are audited with crafted clients
(uedp.audit.mechanism): both worlds have the same N + 1 places (model (i): the canary's place is empty in
world 0), the exact law of the noiseless sum in both worlds is derived, checked against the server's real
round (path A, `--real-trials` runs per world), and the epsilon lower bound is computed from `--trials`
vectorized runs per world (path B, the same noise source). Writes audit_mechanism.json, audit_mechanism.md
and audit_mechanism.png under --out.

    python -m experiments.audit mechanism --out docs/figures --seed 0
    python -m experiments.audit mechanism --settings main --trials 20000 --set privacy.q_u=0.3 --set m_max=100
"""

from __future__ import annotations

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

from uedp.audit.law import Law, realizable_law
from uedp.audit.mechanism import (
    CONTROLS,
    PROBES,
    AuditedMechanism,
    audit,
    calibrated_z,
    control_mechanism,
    entity_free_undetected,
    run_real,
    run_vectorized,
    score,
    sound_epsilon_at,
)
from uedp.audit.scenario import AuditSetting, Scenario
from uedp.config import FederationConfig, PrivacyConfig
from uedp.errors import ConfigError
from uedp.privacy.accounting import mechanism as make_mechanism
from uedp.privacy.accounting import safe_m_max, truncation_delta
from uedp.privacy.mechanisms import audited_spec
from uedp.privacy.noise import FIXED_SEED_WARNING, GaussianNoise, NoiseSource

# The main job's privacy defaults for 200 users and the canary's place (201 places). m_max is explicit: the value
# the main job's privacy.m_max = "auto" (automatic) resolves to for 201 places (safe_m_max: 89).
MAIN = AuditSetting(name="main", m_max=safe_m_max(201, PrivacyConfig.q_u, FederationConfig.rounds, PrivacyConfig.delta))
SETTINGS = {
    "main": MAIN,
    "main_qs1": dataclasses.replace(MAIN, name="main_qs1", q_s=1.0),  # the candidate new default q_s = 1
    # every place drawn every round and truncation never acts (50 places, m_max 50): design "full" has a
    # constant world-0 sum, and the user term b and the entity flip 2b are realized as the accountant charges
    "entity_exact": AuditSetting(name="entity_exact", num_users=49, q_u=1.0, m_max=50, q_e=0.5, target_epsilon=4.0),
    # the same with the entity cap k_cap = 4 (s_e = 8b; used by a control only)
    "entity_exact_k4": AuditSetting(name="entity_exact_k4", num_users=49, q_u=1.0, m_max=50, q_e=0.5, k_cap=4,
                                    target_epsilon=4.0),
}
DEFAULT_SETTINGS = ("main", "main_qs1", "entity_exact")
# The first crafted-update audit's settings (m_max below the cohort) truncate in every round: their truncation charge
# is >= delta, so the accountant refuses
# them (infinite epsilon); the report shows the refusal instead of auditing them.
REFUSED = {
    "full_cohort": AuditSetting(name="full_cohort", num_users=400, q_u=0.5, m_max=150),
    "entity_heavy": AuditSetting(name="entity_heavy", num_users=2000, q_u=0.05, m_max=50, q_e=0.5,
                                 target_epsilon=4.0),
}
CONTROL_CLAIM = 2.0
# Each control row: (control, method, adjacency, setting). Claim CONTROL_CLAIM, calibrated by the control's own
# (possibly broken) accountant on that adjacency's epsilon only (privacy.target_on); its sound twin is the sound
# mechanism at the same setting, target_on and claim. Settings picked after computing the true epsilon.
CONTROL_ROWS = (
    ("noise_halved", "user_dp", "user", "main"),
    ("accountant_half_q_u", "user_dp", "user", "main"),
    ("entity_k_beta", "uedp", "uedp", "entity_exact"),
    ("entity_k_beta", "uedp", "uedp", "entity_exact_k4"),
    ("no_user_term", "uedp", "uedp", "entity_exact"),
    ("undetected_double_count", "uedp", "undetected", "main_qs1"),
    ("undetected_unproved_p", "uedp", "undetected", "main_qs1"),  # a probe: the unproved rule, see PROBES
)
# (method, adjacency, design; None = design_for)
SOUND_ROWS = (("user_dp", "user", None), ("uedp", "uedp", None), ("uedp", "user", None),
              ("uedp", "undetected", "zero"), ("uedp", "undetected", "flip"))


def design_for(method: str, adjacency: str, setting: AuditSetting) -> str:
    """undetected: flip; a keyed mechanism (uedp): full where it keeps the world-0 sum a constant (every
    place kept every round), else zero; an unkeyed one (user_dp): zero."""
    if adjacency == "undetected":
        return "flip"
    if not audited_spec(method).keyed:
        return "zero"
    return "full" if realizable_law(Scenario(setting, method, "user", "full")).point0 else "zero"


def apply_overrides(setting: AuditSetting, overrides: list[str]) -> AuditSetting:
    """--set KEY=VALUE (KEY: an AuditSetting field, optionally prefixed: privacy.q_u, federation.rounds)."""
    names = {f.name: f.type for f in dataclasses.fields(AuditSetting)}
    changes: dict[str, Any] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        name = key.rsplit(".", 1)[-1]
        if not sep or name not in names or name == "name":
            raise ValueError(f"--set {item!r}: expected KEY=VALUE with KEY one of {sorted(set(names) - {'name'})}")
        if name == "target_on":
            changes[name] = value
        else:
            changes[name] = int(value) if name in ("num_users", "m_max", "k_cap", "rounds") else float(value)
    return dataclasses.replace(setting, **changes)


def _chi_square(observed: np.ndarray, law: dict[int, float]) -> dict[str, Any]:
    """Pearson chi-square of the realized sums against the law (bins with expected count < 5 merged)."""
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
    """Path A against the law and against path B: realized sums (chi-square per world, their range), and the
    scores of the real runs against vectorized ones (KS)."""
    out: dict[str, Any] = {"trials": trials}
    t0 = time.monotonic()
    for world in (0, 1):
        real = run_real(mech, world, trials, rng, offset=law.offset)
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


def _law_text(dist: dict[int, float]) -> str:
    return ", ".join(f"{v:g}:{p:.3g}" for v, p in sorted(dist.items()) if p >= 5e-4) or "-"


def audit_row(sc: Scenario, control: str | None, *, trials: int, real_trials: int, noise: NoiseSource,
              rng: random.Random, np_rng: np.random.Generator) -> dict[str, Any]:
    t0 = time.monotonic()
    s = sc.setting
    mech = control_mechanism(sc, control, noise)
    law = realizable_law(sc)
    true_eps = law.true_epsilon(mech.actual_sigma / s.unit, s.rounds, s.delta)
    sound_z = mech.z if control is None else None  # the sound run's own z: the accountant's caches hit
    sound_eps, sound_bound, sound_pair = sound_epsilon_at(sc, mech.actual_sigma, sound_z)
    lb, stats = audit(mech, law, trials=trials, rng=np_rng)
    row: dict[str, Any] = {
        "setting": s.name, "method": sc.method, "adjacency": sc.adjacency, "design": sc.design,
        "control": control or "sound", "probe": control in PROBES, "warning": mech.warning, "z": mech.z,
        "sigma_reported": mech.sigma, "sigma_drawn": mech.actual_sigma, "Z": mech.denominator, "unit": s.unit,
        "places": s.places, "claimed_epsilon": mech.claimed_epsilon, "claimed_rule": mech.claimed_bound,
        "delta_trunc": mech.delta_trunc,
        "claimed_max_shift": mech.claimed.max_shift if mech.claimed is not None else math.nan,
        "accounted_max_shift": sound_pair.max_shift if sound_pair is not None else math.nan,
        "world0": {str(k): v for k, v in law.world0.items()}, "world1": {str(k): v for k, v in law.world1.items()},
        "world0_text": _law_text(law.world0), "world1_text": _law_text(law.world1), "offset": law.offset,
        "realizable_max_difference": law.max_difference, "world0_point": law.point0,
        "true_epsilon_realizable": true_eps, "true_epsilon_accounted": sound_eps, "sound_rule_at_drawn": sound_bound,
        "trials_per_world": trials, "lower_bound": lb.to_dict(), **stats,
        "ratio_lb_claim": lb.eps_lb / mech.claimed_epsilon,
        "ratio_lb_true": lb.eps_lb / true_eps if true_eps > 0 else math.nan,
        "setting_params": dataclasses.asdict(s),
    }
    if sc.adjacency == "undetected":  # the kind of sentence the crafted holder realizes (entity-free)
        row["entity_free_epsilon"], row["entity_free_rule"] = entity_free_undetected(sc, mech.sigma)
    if real_trials and control is None:
        row["real_path"] = validate_real_path(mech, law, real_trials, rng, np_rng)
    row["seconds"] = time.monotonic() - t0
    return row


def refusals() -> list[dict[str, Any]]:
    """The first crafted-update audit's truncating settings under the proved accountant: their truncation charge and the
    calibration's refusal (N + 1 places, as the audit counts them)."""
    out = []
    for name, s in REFUSED.items():
        m = make_mechanism("uedp", z=1.0, q_u=s.q_u, q_e=s.q_e, q_s=s.q_s, m_max=s.m_max, k_cap=s.k_cap)
        entry: dict[str, Any] = {"setting": name, "places": s.places, "q_u": s.q_u, "m_max": s.m_max,
                                 "rounds": s.rounds, "delta": s.delta,
                                 "delta_trunc": truncation_delta([(m, s.rounds)], s.places),
                                 "safe_m_max": safe_m_max(s.places, s.q_u, s.rounds, s.delta)}
        try:
            calibrated_z(Scenario(s, "uedp", "uedp"))
            entry["refused"] = None
        except ConfigError as exc:
            entry["refused"] = str(exc)
        out.append(entry)
    return out


def rows_to_run(settings: list[AuditSetting], controls: list[str],
                lookup: dict[str, AuditSetting] | None = None) -> list[tuple[Scenario, str | None]]:
    """The sound rows of `settings`, then each row of CONTROL_ROWS whose control is in `controls` (at its
    setting from `lookup`, default SETTINGS, claim CONTROL_CLAIM, target_on its adjacency), then the sound
    twin of each (the same setting, target_on and claim)."""
    out: list[tuple[Scenario, str | None]] = []
    by_name = {**(lookup or SETTINGS), **{s.name: s for s in settings}}
    for s in settings:
        for method, adjacency, design in SOUND_ROWS:
            out.append((Scenario(s, method, adjacency, design or design_for(method, adjacency, s)), None))
    twins: list[tuple[Scenario, str | None]] = []
    for control, method, adjacency, name in CONTROL_ROWS:
        if control not in controls:
            continue
        s = dataclasses.replace(by_name[name], name=f"{name}@{CONTROL_CLAIM:g}", target_epsilon=CONTROL_CLAIM,
                                target_on=adjacency)
        sc = Scenario(s, method, adjacency, design_for(method, adjacency, s))
        out.append((sc, control))
        if (sc, None) not in twins:
            twins.append((sc, None))  # the sound mechanism at the control's setting and claim
    return out + twins


def write_report(out: Path, results: dict[str, Any]) -> None:
    lines = [
        "# Crafted-update audit of the mechanism (the proved accounting)", "",
        f"Command: `{results['command']}`; {results['seconds']:.0f} s. Trials per world: "
        f"{results['trials']:,} (vectorized path), {results['real_trials']} (real path, sound rows). "
        f"Confidence {results['confidence']:.0%} (Clopper-Pearson, one-sided 97.5% on each rate); "
        "threshold chosen on the even trials, bound on the odd ones. Both worlds have the same N + 1 places "
        "(model (i)); laws are of the noiseless sum minus world 0's most likely value, in units of b.",
    ]
    if results.get("warning"):
        lines += ["", f"**{results['warning']}** (seeded for reproduction; an audit, not a private run)."]
    lines += ["", "| setting | mechanism | adjacency | design | control | claimed eps (rule) "
              "| true eps, realizable | sound accountant at drawn sigma | lower bound (95%) "
              "| LB / claim | LB / true | TPR / FPR (eval) | world 0 (b : prob) | world 1 (b : prob) "
              "| max moved / accounted max (b) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        lb = r["lower_bound"]
        lines.append(
            f"| {r['setting']} | {r['method']} | {r['adjacency']} | {r['design']} | {r['control']} "
            f"| {r['claimed_epsilon']:.2f} ({r['claimed_rule']}) | {r['true_epsilon_realizable']:.2f} "
            f"| {r['true_epsilon_accounted']:.2f} ({r['sound_rule_at_drawn']}) "
            f"| {lb['eps_lb']:.2f} | {r['ratio_lb_claim']:.2f} | {r['ratio_lb_true']:.2f} "
            f"| {lb['tpr']:.2e} / {lb['fpr']:.2e} | {r['world0_text']} | {r['world1_text']} "
            f"| {r['realizable_max_difference']:g} / {r['accounted_max_shift']:g} |")
    undetected = [r for r in results["rows"] if r["adjacency"] == "undetected"]
    if undetected:
        lines += ["", "eps_undetected is the max over two kinds of sentence; the crafted holder's sentence is "
                  "entity-free (its S-coin). The entity-free kind's own bound at the reported sigma:", "",
                  "| setting | design | control | claimed eps_undetected (rule) | entity-free bound (rule) "
                  "| true eps, realizable | lower bound |", "|---|---|---|---|---|---|---|"]
        for r in undetected:
            lines.append(f"| {r['setting']} | {r['design']} | {r['control']} | {r['claimed_epsilon']:.2f} "
                         f"({r['claimed_rule']}) | {r['entity_free_epsilon']:.2f} ({r['entity_free_rule']}) "
                         f"| {r['true_epsilon_realizable']:.2f} | {r['lower_bound']['eps_lb']:.2f} |")
    lines += ["", "Real path (server round with crafted clients) against the exact law and the vectorized path:", "",
              "| setting | mechanism | adjacency | design | rounds per world | realized range w0 / w1 (b) "
              "| chi-square p (w0 / w1) | KS p scores real vs vectorized (w0 / w1) | re-check (w1) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        a = r.get("real_path")
        if not a:
            continue
        w0, w1 = a["world0"], a["world1"]
        lines.append(
            f"| {r['setting']} | {r['method']} | {r['adjacency']} | {r['design']} | {w1['chi_square']['rounds']} "
            f"| [{w0['min_shift']:g}, {w0['max_shift']:g}] / [{w1['min_shift']:g}, {w1['max_shift']:g}] "
            f"| {w0['chi_square']['p']:.2f} / {w1['chi_square']['p']:.2f} | {w0['ks_p']:.2f} / {w1['ks_p']:.2f} "
            f"| {w1['recheck']} |")
    if results.get("refused"):
        lines += ["", "Settings the accountant refuses (the first audit's truncating settings; not audited):", "",
                  "| setting | places | q_u | m_max | rounds | delta_trunc | safe m_max | calibration |",
                  "|---|---|---|---|---|---|---|---|"]
        for e in results["refused"]:
            lines.append(f"| {e['setting']} | {e['places']} | {e['q_u']:g} | {e['m_max']} | {e['rounds']} "
                         f"| {e['delta_trunc']:.3g} | {e['safe_m_max']} | {e['refused'] or 'accepted'} |")
    (out / "audit_mechanism.md").write_text("\n".join(lines) + "\n")


def plot(out: Path, results: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5.5))
    finite = [v for r in results["rows"] for v in (r["claimed_epsilon"], r["true_epsilon_realizable"])
              if math.isfinite(v)]
    top = max(finite) * 1.1
    ax.plot([0, top], [0, top], "k-", lw=0.8, label="lower bound = claim")
    ax.plot([0, top], [0, top / 2], "k:", lw=0.8, label="lower bound = claim / 2")
    for r in results["rows"]:
        sound = r["control"] == "sound"
        color = "tab:blue" if sound else ("tab:orange" if r.get("probe") else "tab:red")
        marker = {"user": "o", "uedp": "s", "undetected": "v" if r["design"] == "flip" else "^"}[r["adjacency"]]
        ax.scatter(r["claimed_epsilon"], r["lower_bound"]["eps_lb"], color=color, marker=marker, zorder=3)
        ax.scatter(r["claimed_epsilon"], r["true_epsilon_realizable"], facecolors="none", edgecolors=color,
                   marker=marker, zorder=3)
        ax.plot([r["claimed_epsilon"]] * 2, [r["lower_bound"]["eps_lb"], r["true_epsilon_realizable"]], color=color,
                lw=0.5, alpha=0.5)
        label = f"{r['control']} ({r['setting']})" if not sound else f"{r['setting']} {r['method']} {r['adjacency']}"
        ax.annotate(label, (r["claimed_epsilon"], r["lower_bound"]["eps_lb"]), fontsize=5, xytext=(3, -3),
                    textcoords="offset points")
    ax.set_xlabel("claimed epsilon (the run's accountant)")
    ax.set_ylabel("epsilon: lower bound (filled), true of realizable worst case (hollow)")
    ax.set_title("Crafted-update audit: sound (blue), broken controls (red), unproved rule (orange)\n"
                 "o eps_user, square eps_uedp, triangle eps_undetected (^ zero, v flip design)", fontsize=9)
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(out / "audit_mechanism.png", dpi=130)
    plt.close(fig)


def select_settings(names: list[str], controls: list[str], overrides: list[str]
                    ) -> tuple[list[AuditSetting], dict[str, AuditSetting]]:
    """The named settings with `overrides` applied, and every setting so overridden by name (the controls'
    twins are looked up there); an unknown setting, control or override raises ValueError."""
    if bad := [n for n in names if n not in SETTINGS] + [c for c in controls if c not in CONTROLS]:
        raise ValueError(f"unknown setting(s) or control(s): {bad}")
    lookup = {n: apply_overrides(s, overrides) for n, s in SETTINGS.items()}  # also the controls'
    return [lookup[n] for n in names], lookup


def run_study(names: list[str], controls: list[str], *, trials: int, real_trials: int, out: Path,
              seed: int | None, overrides: list[str], command: str) -> dict[str, Any]:
    """The crafted-update audit of the named settings and controls: every row's bounds and verdict in
    out/audit_mechanism.json (saved after each row: an interrupted audit keeps its finished rows), the report
    (audit_mechanism.md) and the plot. An unknown setting, control or override raises ValueError first
    (select_settings)."""
    settings, lookup = select_settings(names, controls, overrides)
    noise = GaussianNoise(seed=seed)
    rng = random.Random(seed) if seed is not None else random.SystemRandom()
    np_rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    results: dict[str, Any] = {"command": command, "trials": trials, "real_trials": real_trials,
                               "confidence": 0.95, "seed": seed,
                               "warning": FIXED_SEED_WARNING if seed is not None else None, "rows": [],
                               "refused": refusals()}
    for sc, control in rows_to_run(settings, controls, lookup):
        row = audit_row(sc, control, trials=trials, real_trials=real_trials, noise=noise, rng=rng,
                        np_rng=np_rng)
        results["rows"].append(row)
        lb = row["lower_bound"]
        print(f"{sc.label} [{row['control']}]: claim {row['claimed_epsilon']:.2f} ({row['claimed_rule']}), true "
              f"(realizable) {row['true_epsilon_realizable']:.2f}, LB {lb['eps_lb']:.2f} (TPR {lb['tpr']:.2e}, "
              f"FPR {lb['fpr']:.2e}) ({row['seconds']:.0f} s)", file=sys.stderr, flush=True)
        results["seconds"] = time.monotonic() - t0
        (out / "audit_mechanism.json").write_text(json.dumps(results, indent=1, default=str))
    results["seconds"] = time.monotonic() - t0
    (out / "audit_mechanism.json").write_text(json.dumps(results, indent=1, default=str))
    write_report(out, results)
    plot(out, results)
    return results
