"""The privacy core of UeDP: pure, framework-free code, one module per part of docs/mechanism.md
(N.M: section N, step M).

    mechanisms   2, 4     the registry of mechanism specs (UeDP f_E+ / f_E, user-level DP, the baselines)
                          that the strategy, client, accountant and budget check all read
    sampling     2.2-2.4  round keys, keyed hash h(k, tag, ...), entity / extended-entity sampling, slots
    cohort       2.1      server-side user sampling, truncation at m_max, slot assignment
    selection    2.4-2.5  which sentences a client uses, and their loss weights omega(x)
    trainable    2.4      the expected share of a client's sentences a round may train on, by entities per
                          sentence (`uedp corpus-stats`, each node's own log)
    clipping     2.6      whole-update clipping, user weight
    sensitivity  3        s_u, s_e, s_s and the noise std sigma per accounting rule
    noise        2.8      CSPRNG-seeded Gaussian noise
    aggregation  2.7-2.8  server re-check, the one noisy aggregation core, the public denominator Z
    accounting   4        PLD accounting (eps_uedp, eps_user, eps_undetected, RDP bound): epsilon_of(records,
                          adjacency, ...), pairs_epsilon(pairs, ...) for any dominating pairs
    calibration  4        the smallest noise multiplier z reaching a target epsilon: calibrate(records_from_z,
                          target, adjacencies, ...), calibrate_epsilon_function(eps_of_z, target, ...)
    ledger       2.9, 4   per-round records, epsilons from the ledger, budget stop, save / resume

Names are re-exported lazily here (so a client importing selection does not load dp-accounting). Code
outside this package uses only public names (no leading underscore): tests/test_public_privacy_api.py.
"""

from __future__ import annotations

from uedp.lazy import lazy_exports

_EXPORTS = {
    "mechanisms": ("MechanismSpec", "spec_for", "sampling_rates"),
    "sampling": ("RoundKey", "new_round_key", "h_int", "h", "entity_sampled", "extended_sampled",
                 "extended_entity", "permitted_slots"),
    "selection": ("Selection", "SelectionParams", "select_sentences"),
    "trainable": ("TINY_SHARE", "trainable_share", "selection_probability", "slot_probability"),
    "clipping": ("clip_update", "update_norm", "scale"),
    "sensitivity": ("RULES", "Sensitivities", "sensitivities", "noise_std"),
    "noise": ("GaussianNoise", "NoiseSource"),
    "aggregation": ("AggregationStats", "recheck", "aggregate", "denominator"),
    "accounting": ("DEFAULT_DELTA", "ADJACENCIES", "Mechanism", "Mixture", "RemoveForm", "Labelled", "Epsilons",
                   "mechanism", "as_groups", "epsilon_of", "rdp_epsilon_of", "undetected_epsilon",
                   "pairs_epsilon", "pairs_rdp_epsilon", "undetected_bound", "truncation_delta",
                   "epsilon", "compose_epsilons", "epsilons", "mixture_epsilon", "check_delta"),
    "calibration": ("calibrate", "calibrate_claims", "calibrate_epsilon_function", "calibrate_noise_multiplier",
                    "calibrate_noise_multiplier_reference", "clear_caches", "run_noise_multiplier"),
    "ledger": ("RoundRecord", "Ledger", "BudgetCheck"),
}  # fmt: skip
__all__, __getattr__, __dir__ = lazy_exports(__name__, {f"{__name__}.{m}": names for m, names in _EXPORTS.items()})
