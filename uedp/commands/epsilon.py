"""`uedp epsilon`: the epsilons of T identical rounds of a mechanism, or the noise multiplier for a target.

    uedp epsilon --q-u 0.05 --q-e 0.5 --q-s 0.1 --noise-multiplier 2 --m-max 100 --rounds 500 --num-users 4000
    uedp epsilon --q-u 0.25 --q-e 0.2 --q-s 1 --target-epsilon 8 --k-cap 1 --rounds 30 --num-users 200 --json
    uedp epsilon --strategy user_dp --q-u 0.02 --noise-multiplier 0.476 --rounds 30 --num-users 5000 --holders 1,16
    uedp epsilon --strategy user_dp --q-u 0.02 --target-epsilon 8 --target-holders 5 --rounds 30 --num-users 5000

--strategy is a central mechanism of the registry (uedp.privacy.mechanisms): uedp (the default), uedp_naive,
user_dp or deid_dp (user-level DP on de-identified text: the same accounting); --q-e and --q-s are UeDP's.
--holders K[,K...] adds the epsilon for one user AND one entity held by K other users (uedp.privacy.holders,
docs/proofs.md section 11): for UeDP a detected entity (eps_uedp, any K) and an undetected one; for user-level
DP any entity; with --lower also a concrete world's epsilon, a lower bound (uedp.audit.holders). --missed K'
adds, for UeDP, the mixed case: the entity detected in some mentions and missed in at least one sentence of K'
of the K holders (docs/proofs.md section 12; K' <= K). --target-holders K makes the calibration also bound
that epsilon for K holders (config privacy.target_holders).

The rounds are charged to UeDP's accountant (uedp.privacy.accountant.UeDPAccountant, the one a run's Flower
wrapper uses), T identical ledger records, and every epsilon is read from its ledger. Prints eps_uedp,
eps_user, eps_undetected (with the name of the bound that decided it: docs/proofs.md Theorem 2) and
eps_rdp_bound (uedp.privacy.accounting) as a table, or with --json one JSON object (keys
eps_uedp, eps_user, eps_undetected, undetected_rule, eps_rdp_bound, delta_trunc, claims, noise_multiplier,
delta, sigma, sensitivities and the inputs; an infinite epsilon is written as null). --num-users is N, the
public number of places: the truncation at m_max is charged delta_trunc (docs/proofs.md section 4), which
needs it; --m-max 0 (the default) picks the smallest cap whose charge is at most 1% of delta. With
--target-epsilon the noise multiplier is calibrated first: the smallest z with which every claimed epsilon
(eps_uedp and eps_undetected, or those --target-on names) is <= target (uedp.privacy.calibration). Bad values
raise ConfigError (exit status 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from dataclasses import dataclass

from uedp.config import AUTO, PrivacyConfig
from uedp.errors import ConfigError
from uedp.privacy.accountant import UeDPAccountant
from uedp.privacy.accounting import DEFAULT_DELTA, Mechanism, safe_m_max
from uedp.privacy.calibration import calibrate_identical
from uedp.privacy.composition import check_delta
from uedp.privacy.holders import holders_epsilon
from uedp.privacy.ledger import RoundRecord
from uedp.privacy.mechanisms import MechanismSpec, get, specs

KEYS = ("eps_uedp", "eps_user", "eps_undetected", "eps_rdp_bound")
USER_KEYS = ("eps_user", "eps_undetected")  # user-level DP samples no entity: eps_uedp is infinite
LOWER_SENTENCES = 100  # --lower, UeDP: the world's holders hold the entity in this many entity-free sentences
STRATEGIES = tuple(s.name for s in specs() if s.rule in ("uedp", "uedp_naive", "user_dp") and not s.local)
LABELS = {
    "eps_uedp": "user-entity DP (UeDP)",
    "eps_user": "user-level DP only",
    "eps_undetected": "undetected entities",
    "eps_rdp_bound": "RDP cross-check (>= UeDP)",
}


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("epsilon", help="privacy accounting of UeDP rounds", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--strategy", default="uedp", choices=STRATEGIES, help="the mechanism (default uedp)")
    p.add_argument("--q-u", type=float, required=True, help="user sampling probability")
    p.add_argument("--q-e", type=float, default=None, help="entity sampling probability (UeDP)")
    p.add_argument("--q-s", type=float, default=None, help="extended-entity sampling probability (UeDP)")
    noise = p.add_mutually_exclusive_group(required=True)
    noise.add_argument("--noise-multiplier", type=float, help="z: sigma = z * (s_u + s_e)")
    noise.add_argument("--target-epsilon", type=float,
                       help="calibrate z so that every claimed epsilon (--target-on) is at most this")
    p.add_argument("--target-on", default="", help="the epsilons the target bounds, comma-separated: uedp, "
                   "undetected (default: the mechanism's claims: UeDP both, user-level DP user)")
    p.add_argument("--holders", default="", help="K[,K...]: also the epsilon for one user and one entity held "
                   "by K other users")
    p.add_argument("--missed", type=int, default=None, metavar="K'", help="with --holders (UeDP): also the "
                   "epsilon when K' of the K holders hold the entity in a sentence the detector misses")
    p.add_argument("--lower", action="store_true", help="with --holders: also a concrete world's epsilon, a LOWER "
                   "bound of what the run leaks about such an entity (uedp.audit.holders)")
    p.add_argument("--target-holders", type=int, default=None, metavar="K", help="with --target-epsilon: the "
                   "target also bounds the epsilon for an (undetected) entity held by K other users")
    p.add_argument("--m-max", type=int, default=0, help="maximal number of users per round (0, the default: the "
                   "smallest whose truncation charge is at most 1%% of delta)")
    p.add_argument("--k-cap", type=int, default=None, help="entity cap (clients per entity); default off")
    p.add_argument("--rounds", type=int, required=True, help="number of rounds T")
    p.add_argument("--delta", type=float, default=DEFAULT_DELTA, help=f"delta (default {DEFAULT_DELTA})")
    p.add_argument("--beta", type=float, default=1.0, help="clip bound (only scales sigma; default 1)")
    p.add_argument("--w-max", type=float, default=1.0, help="maximal user weight (default 1)")
    p.add_argument("--num-users", type=int, required=True,
                   help="N, the public number of places (users); delta must be < 1/N")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
    return p


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _holders(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--holders takes non-negative integers separated by commas, got {text!r}") from None
    if any(k < 0 for k in ks):
        raise ConfigError(f"--holders takes non-negative integers, got {text!r}")
    return tuple(dict.fromkeys(ks))


@dataclass(frozen=True)
class _Setting:
    """The checked options: the mechanism, its rates and cap, what is claimed and which holders are asked for."""

    spec: MechanismSpec
    q_e: float
    q_s: float
    m_max: int | None
    holders: tuple[int, ...]
    claims: tuple[str, ...]

    @property
    def user_level(self) -> bool:
        return self.spec.rule == "user_dp"


def _check(args: argparse.Namespace) -> _Setting:
    """Every option checked (ConfigError naming it) before any work."""
    check_delta(args.delta, args.num_users)
    if args.rounds < 1:
        raise ConfigError(f"--rounds must be a positive integer, got {args.rounds}")
    if args.m_max < 0:
        raise ConfigError(f"--m-max must be >= 1, or 0 (automatic), got {args.m_max}")
    spec = get(args.strategy)
    user_level = spec.rule == "user_dp"
    if user_level:
        if args.q_e is not None or args.q_s is not None or args.k_cap is not None:
            raise ConfigError(f"--q-e, --q-s and --k-cap are UeDP's: {spec.name} uses every sentence of a sampled "
                              "user and has no entity cap")
        q_e, q_s = spec.rates(argparse.Namespace(q_e=1.0, q_s=1.0))
    else:
        if args.q_e is None or args.q_s is None:
            raise ConfigError(f"--strategy {spec.name} needs --q-e and --q-s")
        q_e, q_s = spec.rates(argparse.Namespace(q_e=args.q_e, q_s=args.q_s))
    holders = _holders(args.holders)
    if args.missed is not None:
        if user_level or not holders:
            raise ConfigError("--missed K' needs --holders and a UeDP strategy (user-level DP does not detect)")
        if args.missed < 0 or args.missed > min(holders):
            raise ConfigError(f"--missed K' must lie in [0, the smallest K of --holders = {min(holders)}], "
                              f"got {args.missed}")
    if args.target_holders is not None and (args.target_epsilon is None or args.target_holders < 0):
        raise ConfigError("--target-holders K (K >= 0) needs --target-epsilon")
    claims = tuple(spec.claims_for(argparse.Namespace(target_on=args.target_on)))
    m_max = None if user_level else (args.m_max or safe_m_max(args.num_users, args.q_u, args.rounds, args.delta))
    setting = _Setting(spec=spec, q_e=q_e, q_s=q_s, m_max=m_max, holders=holders, claims=claims)
    _record(args, setting, z=1.0)  # a record with z = 1 checks every mechanism option (and beta, w_max)
    return setting


def _record(args: argparse.Namespace, setting: _Setting, *, z: float) -> RoundRecord:
    return RoundRecord(round=1, rule=setting.spec.rule, q_u=args.q_u, q_e=setting.q_e, q_s=setting.q_s,
                       m_max=setting.m_max, k_cap=args.k_cap, beta=args.beta, w_max=args.w_max, z=z, denominator=1.0)


def _noise_multiplier(args: argparse.Namespace, setting: _Setting) -> float:
    """The given z, or the calibrated one: the problem a run of these settings solves
    (uedp.privacy.calibration.run_noise_multiplier), so that it finds the calibration cached."""
    if args.target_epsilon is None:
        return args.noise_multiplier
    return calibrate_identical(args.target_epsilon, setting.claims, rule=setting.spec.rule, q_u=args.q_u,
                               q_e=setting.q_e, q_s=setting.q_s, m_max=setting.m_max, k_cap=args.k_cap,
                               rounds=args.rounds, delta=args.delta, num_users=args.num_users,
                               holders=args.target_holders)


def _ledger_epsilons(args: argparse.Namespace, setting: _Setting, record: RoundRecord) -> tuple[dict, list[tuple]]:
    """(every epsilon of the ledger of T identical rounds of `record`, per K of --holders: (K, undetected, detected,
    mixed))."""
    z = record.z
    privacy = PrivacyConfig(q_u=args.q_u, q_e=setting.q_e, q_s=setting.q_s, m_max=setting.m_max or AUTO,
                            k_cap=args.k_cap or None, beta=args.beta, w_max=args.w_max, noise_multiplier=z,
                            target_epsilon=None, target_on=args.target_on, delta=args.delta)
    accountant = UeDPAccountant(setting.spec.name, privacy, num_users=args.num_users, rounds=args.rounds,
                                noise_multiplier=z)
    for r in range(1, args.rounds + 1):
        accountant.compose(dataclasses.replace(record, round=r))
    runs = accountant.ledger.runs()
    per_k = []
    for k in setting.holders:  # UeDP: computed once for a detected entity; the undetected one is its other bounds
        h = holders_epsilon(runs, k, delta=args.delta, num_users=args.num_users, detected=not setting.user_level)
        mixed = (holders_epsilon(runs, k, delta=args.delta, num_users=args.num_users, missed=args.missed)
                 if args.missed is not None else None)
        per_k.append((k, h.undetected(), None if setting.user_level else h, mixed))
    return accountant.epsilons(), per_k


def _lower_bounds(args: argparse.Namespace, setting: _Setting, sigma: float) -> dict[int, float]:
    """--lower: a concrete world's epsilon per K (uedp.audit.holders), a lower bound."""
    if not args.lower:
        return {}
    from uedp.audit.holders import world_epsilon

    # a holder's sentence used: always (user-level DP), or by its S-coins: a holder with the entity in
    # LOWER_SENTENCES entity-free sentences uses one of them with probability 1 - (1 - q_s)^that
    q_sel = 1.0 if setting.user_level else 1.0 - (1.0 - setting.q_s) ** LOWER_SENTENCES
    return {k: world_epsilon(k, q_u=args.q_u, q_sel=q_sel, sigma=sigma, rounds=args.rounds, delta=args.delta)
            for k in setting.holders}


def run(args: argparse.Namespace) -> int:
    setting = _check(args)  # validation first (ConfigError names the option), then the work
    z = _noise_multiplier(args, setting)
    record = _record(args, setting, z=z)
    mech, sigma = record.mechanism, record.sigma
    start = time.perf_counter()
    eps, per_k = _ledger_epsilons(args, setting, record)
    lower = _lower_bounds(args, setting, mech.sigma)
    seconds = time.perf_counter() - start
    keys = USER_KEYS if setting.user_level else KEYS
    values = {k: float(eps[k]) for k in keys}
    if args.json:
        _print_json(args, setting, z, sigma, mech, eps, values, per_k, lower)
    else:
        _print_text(args, setting, z, sigma, mech, eps, values, per_k, lower, seconds)
    return 0


def _print_json(args: argparse.Namespace, setting: _Setting, z: float, sigma: float, mech: Mechanism, eps: dict,
                values: dict, per_k: list[tuple], lower: dict[int, float]) -> None:
    sens, unit = mech.sensitivities, args.w_max * args.beta
    out: dict = {k: _finite_or_none(v) for k, v in values.items()}
    out.update(
        strategy=setting.spec.name, undetected_rule=eps["undetected_rule"], delta_trunc=eps["delta_trunc"],
        claims=[f"eps_{c}" for c in setting.claims], noise_multiplier=z, delta=args.delta, sigma=sigma,
        q_u=args.q_u, q_e=setting.q_e, q_s=setting.q_s, m_max=setting.m_max, k_cap=args.k_cap, rounds=args.rounds,
        beta=args.beta, w_max=args.w_max, num_users=args.num_users, target_epsilon=args.target_epsilon,
        target_holders=args.target_holders,
        sensitivities={k: _finite_or_none(v * unit) for k, v in (("s_u", sens.s_u), ("s_e", sens.s_e),
                                                                 ("s_s", sens.s_s))},
        holders=[{"k": k, "epsilon": _finite_or_none(h.epsilon), "bound": h.bound,
                  "bounds": {b: _finite_or_none(v) for b, v in h.bounds.items()},
                  "detected": None if d is None else _finite_or_none(d.epsilon),
                  "lower": _finite_or_none(lower[k]) if k in lower else None,
                  "missed": args.missed, "mixed": None if x is None else _finite_or_none(x.epsilon),
                  "mixed_bound": None if x is None else x.bound} for k, h, d, x in per_k],
    )  # fmt: skip
    print(json.dumps(out, sort_keys=False, allow_nan=False))


def _print_text(args: argparse.Namespace, setting: _Setting, z: float, sigma: float, mech: Mechanism, eps: dict,
                values: dict, per_k: list[tuple], lower: dict[int, float], seconds: float) -> None:
    user_level, claims, sens, unit = setting.user_level, setting.claims, mech.sensitivities, args.w_max * args.beta
    cap = "off" if args.k_cap is None else str(args.k_cap)
    rates = "" if user_level else f"q_e={setting.q_e}, q_s={setting.q_s}, m_max={setting.m_max}, k_cap={cap}, "
    print(f"{setting.spec.name} accounting: T={args.rounds} rounds, N={args.num_users}, q_u={args.q_u}, {rates}"
          f"delta={args.delta:g} (truncation charge {eps['delta_trunc']:.3g})")  # fmt: skip
    how = (f"calibrated to {' and '.join(f'eps_{c}' for c in claims)} <= {args.target_epsilon:g}"
           + (f" and {args.target_holders} holders" if args.target_holders is not None else "")
           if args.target_epsilon is not None else "given")
    total = sens.s_u if user_level else sens.s_u + sens.s_e
    print(f"noise multiplier z = {z:.6g} ({how}); sigma = {sigma:.6g} "
          f"({'s_u' if user_level else 's_u + s_e'} = {total * unit:g})")  # fmt: skip
    width = max(len(v) for v in LABELS.values())
    print(f"  {'':{width}}  {'epsilon':>12}")
    for k, v in values.items():
        bound = f", bound: {eps['undetected_rule']}" if k == "eps_undetected" else ""
        print(f"  {LABELS[k]:{width}}  {v:12.6g}   ({k}{bound})")
    if per_k:
        print("one user AND one entity held by K other users (docs/proofs.md section 11):")
        head = "any entity" if user_level else "undetected"
        mixed_head = f"  {f'{args.missed} missed':>10}  {'bound':<15}" if args.missed is not None else ""
        print(f"  {'K':>4}  {head:>12}  {'bound':<15}" + ("" if user_level else f"  {'detected':>10}")
              + mixed_head + (f"  {'lower bound':>11}" if lower else ""))
        for k, h, d, x in per_k:
            print(f"  {k:>4}  {h.epsilon:12.6g}  {h.bound:<15}" + ("" if d is None else f"  {d.epsilon:10.6g}")
                  + ("" if x is None else f"  {x.epsilon:10.6g}  {x.bound:<15}")
                  + (f"  {lower[k]:11.6g}" if lower else ""))
    print(f"(computed in {seconds:.2f} s)")
