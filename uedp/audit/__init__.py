"""Empirical privacy audit (project issue 5): exposure of planted secrets, membership inference on coin-
flipped canaries with Clopper-Pearson and one-run epsilon lower bounds, and two deliberately broken
controls that the audit must flag. Nothing here is used by a normal run: importing `uedp.audit` only
registers the `audit_synthetic` corpus wrapper (uedp.audit.canaries). See docs/audit.md.
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
