"""Empirical privacy audit (docs/audit.md): canaries planted in a synthetic corpus, a model trained per
variant, and the variant judged by how much of the canaries it exposes.

    canaries    the `audit_synthetic` corpus: coin-flipped canary secrets held by 1 to 32 users
    variants    what is trained: fedavg, uedp, user_dp, the broken controls and control (a)'s twin (typed)
    config      each variant's RunConfig (quick CI version or the main job's settings), the canary-free tokenizer
    controls    the broken components (too little noise; per-step clipping) a control run is given
    scoring     rank and exposure of every planted secret under a trained model
    exposure, membership   the statistics: exposure, chance p-value, Clopper-Pearson, one-run and rank bounds
    verdicts    typed per-group results, claims, the flag rule
    report      report.md and exposure.png from results.json
    mechanism   the crafted-update audit of the aggregation path: worst-case neighbouring worlds,
                crafted clients, the real server round and its vectorized twin, the broken sensitivities
    bounds      its likelihood-ratio score, held-out threshold and Clopper-Pearson epsilon lower bound

`python -m experiments.audit` wires them to the server loop and the client round. Nothing here is used by
a normal run: importing `uedp.audit` only registers the `audit_synthetic` corpus loader.
"""

from uedp.audit import canaries as _canaries  # noqa: F401 - registers the audit_synthetic loader
from uedp.audit.exposure import chance_p_value, exposure, rank_epsilon_lower_bound, rank_of, sentence_nll
from uedp.audit.membership import (
                                 Confusion,
                                 clopper_pearson,
                                 cp_epsilon_lower_bound,
                                 median_threshold,
                                 one_run_epsilon_lower_bound,
                                 one_run_guesses,
                                 threshold_attack,
)

__all__ = [
    "Confusion", "chance_p_value", "clopper_pearson", "cp_epsilon_lower_bound", "exposure",
    "median_threshold", "one_run_epsilon_lower_bound", "one_run_guesses", "rank_epsilon_lower_bound",
    "rank_of", "sentence_nll", "threshold_attack",
]
