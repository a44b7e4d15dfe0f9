"""`uedp epsilon`: the epsilons of T identical UeDP rounds, or the noise multiplier for a target.

    uedp epsilon --q-u 0.05 --q-e 0.5 --q-s 0.1 --noise-multiplier 2 --m-max 100 --rounds 500 --num-users 4000
    uedp epsilon --q-u 0.25 --q-e 0.2 --q-s 1 --target-epsilon 8 --k-cap 1 --rounds 30 --num-users 200 --json

Prints eps_uedp, eps_user, eps_undetected (with the name of the bound that decided it: docs/proofs.md
Theorem 2) and eps_rdp_bound (uedp.privacy.accounting) as a table, or with --json one JSON object (keys
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
import json
import math
import time

from uedp.errors import ConfigError
from uedp.privacy.accounting import DEFAULT_DELTA, check_delta, epsilons, mechanism, safe_m_max
from uedp.privacy.calibration import calibrate_claims
from uedp.privacy.ledger import RoundRecord
from uedp.privacy.mechanisms import get

KEYS = ("eps_uedp", "eps_user", "eps_undetected", "eps_rdp_bound")
LABELS = {
    "eps_uedp": "user-entity DP (UeDP)",
    "eps_user": "user-level DP only",
    "eps_undetected": "undetected entities",
    "eps_rdp_bound": "RDP cross-check (>= UeDP)",
}


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("epsilon", help="privacy accounting of UeDP rounds", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--q-u", type=float, required=True, help="user sampling probability")
    p.add_argument("--q-e", type=float, required=True, help="entity sampling probability")
    p.add_argument("--q-s", type=float, required=True, help="extended-entity sampling probability")
    noise = p.add_mutually_exclusive_group(required=True)
    noise.add_argument("--noise-multiplier", type=float, help="z: sigma = z * (s_u + s_e)")
    noise.add_argument("--target-epsilon", type=float,
                       help="calibrate z so that every claimed epsilon (--target-on) is at most this")
    p.add_argument("--target-on", default="", help="the epsilons the target bounds, comma-separated: uedp, "
                   "undetected (default: both, a UeDP run's claim)")
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


def run(args: argparse.Namespace) -> int:
    # Validation first (ConfigError names the option), then the work.
    check_delta(args.delta, args.num_users)
    if args.rounds < 1:
        raise ConfigError(f"--rounds must be a positive integer, got {args.rounds}")
    if args.m_max < 0:
        raise ConfigError(f"--m-max must be >= 1, or 0 (automatic), got {args.m_max}")
    claims = get("uedp").claims_for(argparse.Namespace(target_on=args.target_on))
    m_max = args.m_max or safe_m_max(args.num_users, args.q_u, args.rounds, args.delta)
    # A record with z = 1 checks every mechanism option (and beta, w_max) before any calibration.
    RoundRecord(
        round=1, rule="uedp", q_u=args.q_u, q_e=args.q_e, q_s=args.q_s, m_max=m_max,
        k_cap=args.k_cap, beta=args.beta, w_max=args.w_max, z=1.0, denominator=1.0,
    )  # fmt: skip
    z = args.noise_multiplier
    if args.target_epsilon is not None:
        z = calibrate_claims(
            args.target_epsilon, claims, q_u=args.q_u, q_e=args.q_e, q_s=args.q_s, m_max=m_max,
            k_cap=args.k_cap, rounds=args.rounds, delta=args.delta, num_users=args.num_users,
        )  # fmt: skip
    mech = mechanism("uedp", z=z, q_u=args.q_u, q_e=args.q_e, q_s=args.q_s, m_max=m_max, k_cap=args.k_cap)
    record = RoundRecord(
        round=1, rule="uedp", q_u=args.q_u, q_e=args.q_e, q_s=args.q_s, m_max=m_max,
        k_cap=args.k_cap, beta=args.beta, w_max=args.w_max, z=z, denominator=1.0,
    )  # fmt: skip
    start = time.perf_counter()
    eps = epsilons(mech, rounds=args.rounds, delta=args.delta, num_users=args.num_users)
    seconds = time.perf_counter() - start
    values = {k: getattr(eps, k) for k in KEYS}
    sens = mech.sensitivities
    unit = args.w_max * args.beta
    if args.json:
        out = {k: _finite_or_none(v) for k, v in values.items()}
        out.update(
            undetected_rule=eps.undetected_bound, delta_trunc=eps.delta_trunc,  # the JSON key keeps its name
            claims=[f"eps_{c}" for c in claims], noise_multiplier=z, delta=args.delta, sigma=record.sigma,
            q_u=args.q_u, q_e=args.q_e, q_s=args.q_s, m_max=m_max, k_cap=args.k_cap, rounds=args.rounds,
            beta=args.beta, w_max=args.w_max, num_users=args.num_users, target_epsilon=args.target_epsilon,
            sensitivities={"s_u": sens.s_u * unit, "s_e": sens.s_e * unit, "s_s": sens.s_s * unit},
        )  # fmt: skip
        print(json.dumps(out, sort_keys=False))
        return 0
    cap = "off" if args.k_cap is None else str(args.k_cap)
    print(f"UeDP accounting: T={args.rounds} rounds, N={args.num_users}, q_u={args.q_u}, q_e={args.q_e}, "
          f"q_s={args.q_s}, m_max={m_max}, k_cap={cap}, delta={args.delta:g} "
          f"(truncation charge {eps.delta_trunc:.3g})")  # fmt: skip
    how = (f"calibrated to {' and '.join(f'eps_{c}' for c in claims)} <= {args.target_epsilon:g}"
           if args.target_epsilon is not None else "given")
    print(f"noise multiplier z = {z:.6g} ({how}); sigma = {record.sigma:.6g} "
          f"(s_u + s_e = {(sens.s_u + sens.s_e) * unit:g})")  # fmt: skip
    width = max(len(v) for v in LABELS.values())
    print(f"  {'':{width}}  {'epsilon':>12}")
    for k in KEYS:
        bound = f", bound: {eps.undetected_bound}" if k == "eps_undetected" else ""
        print(f"  {LABELS[k]:{width}}  {values[k]:12.6g}   ({k}{bound})")
    print(f"(computed in {seconds:.2f} s)")
    return 0
