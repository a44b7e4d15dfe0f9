"""summary.json: what a run reports when it ends; its keys, its one writer and its one reader.

    write_summary(out_dir, summary, kind="federated")   # atomic; refuses a key missing or not in the schema
    s = read_summary(out_dir)                            # or the file's path; SummaryError names the file
    s = read_summary(out_dir, require=RUN)               # a reader of the run's metric, noise and epsilons
    if has_summary(job_dir): ...                         # a finished job

Three writers, one summary kind each (`SUMMARY_KINDS`):
- "federated": server/app.py, every run of the rounds loop (fedavg, the private strategies, deid);
- "local": server/local_dp.py, strategy=dp_bart (local DP: one query, then central training on the rewrites);
- "reference": studies/dp_bart.py's noiseless central training on the original text (not a run of the
  server; only its COMMON keys and `documents`).
Every summary holds the `COMMON` keys; every run of the server loop also the rest of `RUN`. Epsilons that do
not apply are infinite, written as JSON's `Infinity` (Python's json reads and writes it), e.g. fedavg's
eps_uedp. `KEYS` documents every key. The file is written atomically (uedp.files), so a reader that finds
it (a figure's collector, a resumed sweep that skips finished jobs) never reads half of one. Readers accept
keys they do not know, so summaries written by older or newer code stay readable.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from uedp.errors import SummaryError
from uedp.files import atomic_write_json

SUMMARY = "summary.json"

# Every key a summary may hold, and what it means.
KEYS: dict[str, str] = {
    # COMMON: every summary
    "strategy": "the strategy's name (strategy.name; the DP-BART study's reference: 'central-original')",
    "rounds": "rounds recorded in the ledger (strategy=dp_bart and the reference: epochs of central training)",
    "eps_uedp": "UeDP epsilon at `delta` from the ledger (inf where not private or not a central claim)",
    "eps_user": "user-level epsilon at `delta` from the ledger (inf where not private)",
    "final": "the test metrics at the end ({metric name: value}; see `metric`)",
    "private": "whether the run's guarantee holds as configured (false with the reason in `warning`)",
    "warning": "why the run is not private, or another caveat; null when none",
    # RUN: every run of the server loop (server/app.py, server/local_dp.py)
    "method": "MechanismSpec.summary_method: the accounting method, or a local mechanism's own name "
              "(summary_methods())",
    "estimator": "the UeDP estimator (f_E, f_E+), or null",
    "noise_multiplier": "z, the noise multiplier (null for strategy=dp_bart)",
    "sigma": "the absolute noise standard deviation on the sum of updates (dp_bart: the rewriter's)",
    "Z": "the denominator of the average (null for strategy=dp_bart)",
    "delta": "the delta every epsilon is computed at",
    "population": "the number of users (places) the run sampled from",
    "stopped_by_budget": "whether the run stopped early because the next round would exceed the target epsilon",
    "eps_undetected": "epsilon for an entity the detector missed (inf where not private)",
    "eps_rdp_bound": "the RDP cross-check, an upper bound on eps_uedp (inf where not private)",
    "metric": "the name of the task's metric (perplexity, error)",
    "initial": "the test metrics before training",
    "tokenizer": "what the tokenizer was trained on ({source, corpus, vocab_size, kind})",
    "detector": "the entity detector (null for strategy=dp_bart)",
    "metrics_note": "what metrics.csv/jsonl reveal (operator logs outside the guarantee); null when not private",
    "seconds": "the run's wall time",
    # federated runs only (server/app.py)
    "claims": "the epsilons the run claims, e.g. ['eps_uedp', 'eps_undetected']",
    "m_max": "the cohort truncation, or null",
    "noise": "how the noise was drawn (uedp.privacy.noise: secure, philox, philox_fixed_seed; none if noiseless)",
    "undetected_rule": "the proved bound that decided eps_undetected, or null",
    "delta_trunc": "the probability that truncation at m_max acts, charged to delta; or null",
    "final_tokens": ("next-word runs: the final model on the central evaluation set split by predicted token "
                     "({entity_tokens, other_tokens, all_tokens: perplexity, null over no token; entity_token_count, "
                     "other_token_count; spans: gold | detector}); an entity token overlaps a protected entity's "
                     "gold span, or the run's detector's on a corpus without gold spans (uedp.entity_tokens); null "
                     "for classification and without an evaluation set. The same status as `final` (in a simulation "
                     "outside the guarantee: `outside_guarantee`)"),
    "holders": ("with privacy.target_holders = K >= 0: {k, epsilon, bound, bounds}, the epsilon for one user and "
                "one undetected entity held by K other users (uedp.privacy.holders); null otherwise"),
    "initial_model": "where the start model came from ({source: random} or a public-start file's record)",
    "public_entities": "the public-entity policy's record (name, size, SHA-256), or null",
    "outside_guarantee": "the summary's fields the guarantee does not cover (private runs), or null",
    "model_round": ("the round after which model.pt's weights were released: `rounds`, unless a resumed run "
                    "lost the models of rounds charged after its last checkpoint (they stay charged)"),
    "noised_dimension": "the number of trainable numbers each client sends and the server noises (the update's "
                        "dimension: with model.lora, the adapters and a classifier's new head only)",
    "trainable_share": "noised_dimension / the model's parameters",
    "base_model": ("a checkpoint's record ({entry, path, digest: SHA-256 of its config and weight files, lora}): "
                   "the public base every node loads itself; null for a model from random weights"),
    # every run of the server (federated and local), outside RUN: summaries written without it stay readable
    "device": ("where the server evaluated (strategy=dp_bart: trained and evaluated): federation.device resolved "
               "on the server, cpu or cuda; each node resolves the option for its own training (uedp.devices)"),
    # local runs only (server/local_dp.py, strategy=dp_bart)
    "eps_local_document": "local DP epsilon per document (rewrite.epsilon)",
    "eps_local_user": "local DP epsilon per user, composed over its documents",
    "eps_local_entity": "local DP epsilon per entity, by the number of documents holding it",
    "local": "the local guarantee in full (the content of local_dp.json)",
    # the DP-BART study's central reference only (studies/dp_bart.py)
    "documents": "the number of training sentences pooled",
}

COMMON: tuple[str, ...] = ("strategy", "rounds", "eps_uedp", "eps_user", "final", "private", "warning")
RUN: tuple[str, ...] = (*COMMON, "method", "estimator", "noise_multiplier", "sigma", "Z", "delta", "population",
                        "stopped_by_budget", "eps_undetected", "eps_rdp_bound", "metric", "initial", "tokenizer",
                        "detector", "metrics_note", "seconds")
# The keys each writer writes, every one of them every time (a value may be null or inf).
SUMMARY_KINDS: dict[str, frozenset[str]] = {
    "federated": frozenset((*RUN, "claims", "m_max", "noise", "undetected_rule", "delta_trunc", "holders",
                            "initial_model", "final_tokens",
                            "public_entities", "outside_guarantee", "model_round", "device", "noised_dimension",
                            "trainable_share", "base_model")),
    "local": frozenset((*RUN, "eps_local_document", "eps_local_user", "eps_local_entity", "local", "device")),
    "reference": frozenset((*COMMON, "documents")),
}


def summary_path(path: str | os.PathLike[str]) -> Path:
    """The summary file of `path`: `path` itself when it names a .json file, else the run directory's
    summary.json."""
    path = Path(path)
    return path if path.suffix == ".json" else path / SUMMARY


def has_summary(run_dir: str | os.PathLike[str]) -> bool:
    """Whether the run in `run_dir` finished (its summary.json exists)."""
    return summary_path(run_dir).is_file()


def write_summary(out_dir: str | os.PathLike[str], summary: Mapping[str, Any], *, kind: str) -> Path:
    """Write `summary` to OUT_DIR/summary.json atomically, after checking it holds exactly the keys of `kind`
    (SUMMARY_KINDS); returns the path. Values JSON cannot hold are written as their str(); infinities as Infinity."""
    if kind not in SUMMARY_KINDS:
        raise ValueError(f"summary kind must be one of {', '.join(SUMMARY_KINDS)}, got {kind!r}")
    missing = [k for k in SUMMARY_KINDS[kind] if k not in summary]
    unknown = [k for k in summary if k not in SUMMARY_KINDS[kind]]
    if missing or unknown:  # a bug in a writer, not bad input
        raise ValueError(f"a {kind} summary must hold exactly the keys of uedp.summary.SUMMARY_KINDS[{kind!r}]: "
                         f"missing {sorted(missing)}, unknown {unknown} (document a new key in KEYS)")
    return atomic_write_json(Path(out_dir) / SUMMARY, dict(summary), indent=1, default=str)


def read_summary(path: str | os.PathLike[str], *, require: Iterable[str] = COMMON) -> dict[str, Any]:
    """The summary of a run directory (or of a summary file's path). SummaryError, naming the file, when it
    is missing, is not a JSON object, or lacks a key of `require` (default: COMMON; RUN for a reader of the
    run's metric, noise and epsilons)."""
    file = summary_path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SummaryError(f"summary file {file} does not exist (a run writes it when it ends)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SummaryError(f"summary file {file}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise SummaryError(f"summary file {file}: not a JSON object (got {type(data).__name__})")
    missing = [k for k in require if k not in data]
    if missing:
        raise SummaryError(f"summary file {file}: missing key(s) {', '.join(missing)} (uedp.summary.KEYS)")
    return data
