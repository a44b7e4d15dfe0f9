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
    pairs        3, 4     the dominating pairs of one round (Mixture, RemoveForm, Labelled), by adjacency
    composition  4        epsilons of pairs composed over rounds (PLD, RDP): pairs_epsilon(pairs, ...),
                          pairs_rdp_epsilon, undetected_bound; the automatic PLD grid
    accounting   4        the epsilons of a run's rounds, in dp-accounting's shape: epsilon_of(runs, adjacency,
                          *, delta, num_users), epsilons_of(runs, ...); runs are (Mechanism, count) pairs
    calibration  4        the smallest noise multiplier z reaching a target epsilon: calibrate(runs_from_z,
                          target, adjacencies, ...) and its conveniences
    accountant   4        UeDPAccountant: a run's mechanism, ledger and claims (Flower's accountant vocabulary)
    ledger       2.9, 4   per-round records, epsilons from the ledger, budget stop, save / resume

The package exports the accounting API that docs/privacy-accounting.md documents (`__all__`), lazily (so a
client importing selection does not load dp-accounting); every other public name is imported from its module.
Code outside this package uses only public names (no leading underscore): tests/test_public_privacy_api.py.
"""

from __future__ import annotations

from uedp.lazy import lazy_exports

_EXPORTS = {
    "sensitivity": ("Rule",),
    "pairs": ("Mixture", "Labelled"),
    "composition": ("pairs_epsilon", "pairs_rdp_epsilon", "undetected_bound"),
    "accounting": ("DEFAULT_DELTA", "Adjacency", "Mechanism", "Epsilons", "mechanism", "epsilon_of", "rdp_epsilon_of",
                   "epsilon_and_bound", "epsilons_of", "truncation_delta"),
    "calibration": ("calibrate", "calibrate_identical", "calibrate_epsilon_function", "run_noise_multiplier",
                    "clear_caches"),
    "ledger": ("RoundRecord", "Ledger", "BudgetCheck"),
    "accountant": ("UeDPAccountant",),
}  # fmt: skip
__all__, __getattr__, __dir__ = lazy_exports(__name__, {f"{__name__}.{m}": names for m, names in _EXPORTS.items()})
