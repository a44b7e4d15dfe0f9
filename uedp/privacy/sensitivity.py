"""Sensitivities of the un-normalized sum of client updates, and the noise standard deviation
(docs/mechanism.md section 3).

With clip bound beta and maximal user weight w_max, one client's contribution has norm <= w_max * beta
(`unit`; the server's re-check enforces it). Adding or removing (docs/proofs.md, Theorems 1 and 2; places
are public and an absent user is an empty place, section 1 there):
  - a user u' (s_u): its own update, s_u = w_max beta. On the good event of docs/proofs.md section 4
    (truncation at m_max never acts, charged as delta_trunc by the accountant) nobody is displaced and the
    slots of the other users do not move. (The first rule's 3 w_max beta with the entity cap and 2 w_max
    beta without charged a displaced user and a slot move.)
  - an entity e' (s_e): every sampled user allowed to use e' may change its update by up to 2 w_max beta:
    s_e = 2 k_cap w_max beta with the cap, 2 m_max w_max beta without;
  - an undetected entity in one sentence of one user (s_s): s_s = 2 w_max beta.

Accounting rules (`RULES`; `MechanismSpec.rule`, `RoundRecord.rule`, the ledger file's key "method"):
  - "uedp" (f_E+) and "uedp_naive" (f_E, q_s = 0): sigma = z * (s_u + s_e).
  - "uedp_split" (docs/proofs.md Theorem 3): each client returns its entity-free part clipped to beta and
    its entity part (every sentence whose entities are all sampled, no slot rule) clipped to gamma,
    re-checked separately: s_u = w_max (beta + gamma), s_e = 2 m_max w_max gamma (every place on the good
    event may use e'), s_s = 2 w_max (beta + gamma) (one sentence moves one part, by at most 2 w_max
    max(beta, gamma); an undetected entity in several of one user's sentences of both kinds moves both
    parts: docs/proofs.md section 9, F2); sigma = z * (s_u + s_e).
  - "user_dp" (DP-FedAvg baseline, docs/mechanism.md step 8): sigma = z * w_max * beta (z relative to `unit`). Its
    own sensitivities: s_u = w_max beta; every entity is always used (no entity sampling), by up to
    m_max users: s_e = 2 m_max w_max beta, infinite without truncation; s_s = 2 w_max beta.
  - "noiseless": sigma = 0 (not private; every epsilon is infinite); m_max may be None.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from uedp.checks import positive, positive_int


class Rule(enum.StrEnum):
    """An accounting rule (module docstring). A str: files and f-strings see its value ("uedp_split")."""

    UEDP = "uedp"
    UEDP_NAIVE = "uedp_naive"
    UEDP_SPLIT = "uedp_split"
    USER_DP = "user_dp"
    NOISELESS = "noiseless"


RULES = tuple(Rule)


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise ValueError(f"accounting rule must be one of {', '.join(RULES)}, got {rule!r}")
    return rule


@dataclass(frozen=True)
class Sensitivities:
    """L2 sensitivities of the sum of updates, for user (s_u), entity (s_e) and extended entity (s_s)
    adjacency; `unit` = w_max * beta, the bound on one client's contribution."""

    s_u: float
    s_e: float
    s_s: float
    unit: float


def sensitivities(
    *, beta: float, w_max: float, m_max: int | None, k_cap: int | None, rule: str = "uedp",
    gamma: float = 0.0,
) -> Sensitivities:
    """The sensitivities for the accounting rule `rule` (see the module docstring); `gamma`: the entity
    part's clip (uedp_split only; absolute, like beta: `Mechanism` passes beta = 1 and gamma in units of
    beta)."""
    check_rule(rule)
    unit = positive("beta", beta) * positive("w_max", w_max)
    if rule == "uedp_split":
        g = positive("gamma", gamma)
        if m_max is None or k_cap is not None:
            raise ValueError("uedp_split needs m_max (the cohort truncation) and has no entity cap (k_cap None)")
        positive_int("m_max", m_max)
        if w_max > 1.0:
            raise ValueError(f"w_max must lie in (0, 1], got {w_max!r}")
        return Sensitivities(s_u=unit * (1.0 + g / beta), s_e=2.0 * m_max * w_max * g,
                             s_s=2.0 * unit * (1.0 + g / beta), unit=unit)
    if gamma:
        raise ValueError(f"gamma (the entity part's clip) is for uedp_split only, got {gamma!r} for {rule}")
    if w_max > 1.0:
        raise ValueError(f"w_max must lie in (0, 1], got {w_max!r}")
    if k_cap is not None:
        positive_int("k_cap", k_cap)
    if m_max is not None:
        positive_int("m_max", m_max)
    if rule == "user_dp" and k_cap is not None:
        raise ValueError("user_dp has no entity cap: k_cap must be None")
    if m_max is None:
        if rule not in ("user_dp", "noiseless"):  # noiseless is not private anyway
            raise ValueError(f"accounting rule {rule!r} needs m_max (the cohort truncation), got None")
        return Sensitivities(s_u=unit, s_e=math.inf, s_s=2.0 * unit, unit=unit)
    s_e = 2.0 * (k_cap if k_cap is not None else m_max) * unit
    return Sensitivities(s_u=unit, s_e=s_e, s_s=2.0 * unit, unit=unit)


def noise_std(rule: str, z: float, sens: Sensitivities) -> float:
    """sigma for the accounting rule `rule`: z * (s_u + s_e) for uedp / uedp_naive / uedp_split, z * w_max *
    beta for user_dp, 0 for noiseless."""
    check_rule(rule)
    if rule == "noiseless":
        return 0.0
    z = positive("noise multiplier z", z)
    if rule == "user_dp":
        return z * sens.unit
    return z * (sens.s_u + sens.s_e)
