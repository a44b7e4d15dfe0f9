"""From a trained variant's canary scores to typed results and a verdict.

`analyse` turns one variant's per-canary rows (frequency, member, rank, exposure) into one `GroupResult`
per canary frequency: exposure of members and non-members, the chance p-value, the threshold attack's
TPR/FPR with its Clopper-Pearson bound, the one-run (Steinke et al.) and rank-based epsilon lower bounds,
and the epsilon the variant claims for such a canary (`claimed`). `verdicts` then flags variants (`flagged`).

Claims, from the variant's mechanism spec: a user canary (frequency 1) is covered by eps_user; an entity
canary held by f > 1 users by eps_uedp under UeDP, and only by group privacy, f * eps_user, under user-level
DP; noiseless FedAvg claims nothing (inf).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from uedp.audit.exposure import chance_p_value, rank_epsilon_lower_bound
from uedp.audit.membership import (
    cp_epsilon_lower_bound,
    median_threshold,
    one_run_epsilon_lower_bound,
    one_run_guesses,
    threshold_attack,
)
from uedp.audit.variants import VARIANTS

CONFIDENCE = 0.95
CHANCE_P = 1e-3  # exposure flag: members' ranks beat chance at this p-value ...
EXPOSURE_GAP = 2.0  # ... and their mean exposure exceeds the non-members' by this many bits


@dataclass(frozen=True)
class GroupResult:
    """The audit's numbers for one variant and one canary frequency."""

    variant: str
    frequency: int
    kind: str  # "user" (frequency 1) | "entity"
    members: int
    non_members: int
    exposure_mean: float
    exposure_median: float
    exposure_nonmember_mean: float
    chance_p: float
    tpr: float
    fpr: float
    one_run: str  # "correct/guesses" of the one-run attack
    eps_lb_cp: float
    eps_lb_one_run: float
    eps_lb_rank: float
    claimed_eps: float
    violation: bool  # a lower bound above the claim

    @property
    def group_privacy(self) -> bool:
        """The claim for this group is user-level DP's group privacy (frequency * eps_user)."""
        return VARIANTS[self.variant].spec.adjacency == "user" and self.frequency > 1

    @property
    def leak(self) -> bool:
        """Exposure far above chance: the members' ranks beat chance (p < CHANCE_P) by a wide margin."""
        return self.chance_p < CHANCE_P and self.exposure_mean - self.exposure_nonmember_mean > EXPOSURE_GAP

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "group_privacy": self.group_privacy, "leak": self.leak}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroupResult:
        """From a results.json entry (the derived group_privacy and leak are recomputed)."""
        return cls(**{f.name: data[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class Verdict:
    reference: str | None  # what a control was compared with: its twin, or "chance (<twin> not run)"
    flagged: bool


def claimed(variant: str, summary: Mapping[str, Any], frequency: int) -> float:
    """The epsilon the variant claims for a canary living in `frequency` users (one entity)."""
    adjacency = VARIANTS[variant].spec.adjacency
    if adjacency is None:
        return math.inf
    if adjacency == "uedp":
        return summary["eps_user"] if frequency == 1 else summary["eps_uedp"]
    return frequency * summary["eps_user"]  # user-level DP: group privacy over the holders


def analyse(variant: str, summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], *,
            num_candidates: int, delta: float) -> list[GroupResult]:
    """One GroupResult per canary frequency of a variant's scored canaries."""
    out = []
    for freq in sorted({r["frequency"] for r in rows}):
        group = [r for r in rows if r["frequency"] == freq]
        members = [r for r in group if r["member"]]
        score = [r["rank"] for r in group]  # membership score: the secret's rank (uniform for non-members)
        is_in = [r["member"] for r in group]
        conf = threshold_attack(score, is_in, median_threshold(score))
        r, v = one_run_guesses(score, is_in, k=max(1, len(group) // 4))
        rank_lb = max(rank_epsilon_lower_bound(m["rank"], num_candidates, delta=delta, alpha=1 - CONFIDENCE,
                                               tests=len(members)) for m in members)
        lbs = (cp_epsilon_lower_bound(conf, delta=delta, confidence=CONFIDENCE),
               one_run_epsilon_lower_bound(r, v, confidence=CONFIDENCE), rank_lb)
        claim = claimed(variant, summary, freq)
        out.append(GroupResult(
            variant=variant, frequency=freq, kind="user" if freq == 1 else "entity", members=len(members),
            non_members=len(group) - len(members),
            exposure_mean=float(np.mean([m["exposure"] for m in members])),
            exposure_median=float(np.median([m["exposure"] for m in members])),
            exposure_nonmember_mean=float(np.mean([g["exposure"] for g in group if not g["member"]])),
            chance_p=chance_p_value([m["rank"] for m in members], num_candidates),
            tpr=conf.tpr, fpr=conf.fpr, one_run=f"{v}/{r}", eps_lb_cp=lbs[0], eps_lb_one_run=lbs[1],
            eps_lb_rank=lbs[2], claimed_eps=claim, violation=max(lbs) > claim,
        ))
    return out


def flagged(groups: Sequence[GroupResult], reference: Sequence[GroupResult] | None = None) -> bool:
    """A variant is flagged if a lower bound exceeds its claim, or if a canary group leaks (exposure far
    above chance) where the variant's claim should prevent it. A leak counts when the group's claim is one
    the mechanism states directly (eps_user for user canaries, eps_uedp for UeDP's entity canaries; FedAvg,
    which claims nothing, is flagged by any leak: that shows the audit's power). User-level DP covers an
    entity held by f users only by group privacy (f * eps_user, vacuous for large f), so there a leak is
    what the guarantee allows, and it counts only if the variant's sound `reference` (a control's twin, run
    in the same audit) does not leak on the same canaries. Exposure can never prove a violation at eps of
    8 or more (under eps-DP the mean exposure may reach (eps + 1) / ln 2 bits), so the exposure rule is a
    comparison with what the sound mechanism shows, not a proof; the lower bounds are the proof."""
    ref = None if reference is None else {g.frequency: g.leak for g in reference}
    for g in groups:
        if g.violation:
            return True
        if g.leak and (not g.group_privacy or (ref is not None and not ref.get(g.frequency, False))):
            return True
    return False


def verdicts(finished: Sequence[str], groups: Sequence[GroupResult]) -> dict[str, Verdict]:
    """The verdict of each finished variant: a control is compared with its twin, or with chance if the
    twin did not run."""
    by_variant: dict[str, list[GroupResult]] = {}
    for g in groups:
        by_variant.setdefault(g.variant, []).append(g)
    out = {}
    for name in finished:
        ref = VARIANTS[name].reference
        reference = None
        if ref is not None:
            reference = by_variant.get(ref, [])
            ref = ref if ref in by_variant else f"chance ({ref} not run)"
        out[name] = Verdict(reference=ref, flagged=flagged(by_variant.get(name, []), reference))
    return out
