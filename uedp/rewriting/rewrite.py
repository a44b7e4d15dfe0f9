"""Rewriting documents under local DP: a data owner's texts in, privatized rewrites and their guarantee out.

    settings = RewriteSettings(epsilon=1000.0, variant="clv")
    rewriter = load_rewriter(private_corpus="jsonl", variant="clv")        # public weights (uedp.rewriting.store)
    texts = rewrite_texts(sentences, rewriter, mechanism_for(rewriter, settings), rng)
    meta = guarantee(mechanism_for(rewriter, settings), settings, documents_per_user=40)

A document is one sentence (the JSONL loader's sentence split), cut or padded to the rewriter's l tokens.
Each is encoded, clipped (by value: ClvMechanism; by norm for the adept variant: NormClipMechanism; per-document
(epsilon, delta)-LDP) and decoded; decoding is post-processing. A user with n rewritten documents is covered
by composition over n (`guarantee`: basic n*epsilon and the tighter PLD composition of n Gaussians); an
entity in f documents likewise over f. `RewriteSettings.max_documents` caps n per user, so the per-user
guarantee is a public number rather than a function of the user's data. Released beside the rewrites, in
the clear: user ids, splits, and labels unless `label_epsilon` is set (then k-ary randomized response with
that epsilon, composed into each document's label guarantee).

Noise comes from a cryptographically seeded generator (uedp.privacy.noise.secure_generator) unless a seed
is given for reproduction, which `guarantee` then reports as not private. A document is rewritten once:
rewriting it again spends epsilon again (`rewrite_cached` keeps the rewrites of a user's data on that
machine and reuses them).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from uedp.checks import integer
from uedp.config_values import from_wire, to_wire
from uedp.errors import ConfigError
from uedp.files import atomic_write_json
from uedp.rewriting.mechanism import MECHANISM_NAMES, VARIANTS, LocalMechanism

NOISES = ("gaussian", "laplace")
ENTITY_DOCUMENTS = (1, 2, 4, 8, 32)  # documents holding one entity: the per-entity guarantee is reported for these
IN_THE_CLEAR = ("user ids", "splits", "the number of documents per user")
UNITS_NOTE = ("local DP: epsilon per document (any two documents are neighbours), composed over a user's "
              "documents; not comparable one-to-one with central eps_uedp / eps_user, whose neighbours differ "
              "by one user and one entity of the whole dataset")


@dataclass(frozen=True)
class RewriteSettings:
    epsilon: float
    delta: float = 1e-5
    variant: str = "clv"  # clv | pr | pr+ | adept (docs/dp-bart-system.md)
    noise: str = "gaussian"  # gaussian (analytic) | laplace (pure epsilon: delta 0)
    label_epsilon: float | None = None  # labels released by randomized response with this epsilon (None: in the clear)
    max_documents: int | None = None  # per user (None: all; the per-user guarantee then depends on the user's data)

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ConfigError(f"rewrite epsilon must be a positive number, got {self.epsilon!r}")
        if self.variant not in VARIANTS:
            raise ConfigError(f"rewrite variant must be one of {', '.join(VARIANTS)}, got {self.variant!r}")
        if self.noise not in NOISES:
            raise ConfigError(f"rewrite noise must be one of {', '.join(NOISES)}, got {self.noise!r}")
        if self.noise == "gaussian" and not 0 < self.delta < 1:
            raise ConfigError(f"rewrite delta must lie in (0, 1) for Gaussian noise, got {self.delta!r}")
        label_epsilon = from_wire("rewrite.label_epsilon", self.label_epsilon)  # 0 (a run config's): None
        if label_epsilon is not None and not (label_epsilon > 0 and math.isfinite(label_epsilon)):  # NaN fails
            raise ConfigError(f"rewrite label_epsilon must be a finite number > 0, or None (labels in the clear), "
                              f"got {self.label_epsilon!r}")
        object.__setattr__(self, "label_epsilon", label_epsilon)
        max_documents = from_wire("rewrite.max_documents", self.max_documents)  # 0 (a run config's): None
        if max_documents is not None:
            max_documents = integer("rewrite max_documents", max_documents, minimum=1, note="(or None: all)")
        object.__setattr__(self, "max_documents", max_documents)

    def wire(self) -> dict[str, Any]:
        """The settings as a Flower record and the rewrite cache key hold them (a ConfigRecord refuses None:
        label_epsilon and max_documents None are their run-config numbers, 0.0 and 0)."""
        return {name: to_wire(f"rewrite.{name}", value) for name, value in asdict(self).items()}

    @property
    def mechanism_delta(self) -> float:
        return self.delta if self.noise == "gaussian" else 0.0


def mechanism_for(rewriter: Any, settings: RewriteSettings) -> LocalMechanism:
    """The mechanism of `rewriter` (CLV: its l, d, C and released coordinates; adept: its l, d and norm bound) at
    the settings' epsilon."""
    return rewriter.mechanism(settings.epsilon, settings.mechanism_delta, settings.noise)


def rewriter_for(settings: RewriteSettings, private_corpus: str, *, progress: bool = True, path: str = "",
                 setting: str = "rewrite.rewriter") -> Any:
    """The public rewriter these settings use: the one saved at `path` (rewrite.rewriter;
    uedp.rewriting.store.load_saved_rewriter), else the one load_rewriter trains on public text independent of
    `private_corpus` (a PR+ one for the settings' epsilon and noise)."""
    from uedp.rewriting.store import load_rewriter, load_saved_rewriter

    if path:
        pr_plus = settings.variant == "pr+"
        return load_saved_rewriter(path, variant=settings.variant, epsilon=settings.epsilon if pr_plus else None,
                                   delta=settings.mechanism_delta if pr_plus else None,
                                   noise=settings.noise if pr_plus else None, setting=setting)
    return load_rewriter(private_corpus=private_corpus, variant=settings.variant,
                         epsilon=settings.epsilon if settings.variant == "pr+" else None,
                         delta=settings.mechanism_delta, noise=settings.noise, progress=progress)


def rewriter_digest(rewriter: Any) -> str:
    """A digest of everything that determines a rewriter's outputs (its identity: request, kept coordinates,
    weights, tokenizer): the server sends it with the query, and an owner whose rewriter differs refuses before
    rewriting anything (the recorded guarantee names the server's rewriter)."""
    return hashlib.blake2b(json.dumps(rewriter.identity(), sort_keys=True, default=str).encode(),
                           digest_size=16).hexdigest()


def rewrite_texts(texts: Sequence[str], rewriter: Any, mechanism: LocalMechanism, rng: np.random.Generator, *,
                  batch_size: int = 64, progress: Callable[[int], None] | None = None) -> list[str]:
    """Each text encoded, privatized (clip, prune, noise) and decoded, in order; `progress(n)` after each batch."""
    out: list[str] = []
    for start in range(0, len(texts), batch_size):
        batch = list(texts[start:start + batch_size])
        z = rewriter.encode(batch)
        out.extend(rewriter.decode(mechanism.privatize(z, rng)))
        if progress is not None:
            progress(len(batch))
    return out


def randomized_response(label: int, num_labels: int, epsilon: float, rng: np.random.Generator) -> int:
    """k-ary randomized response: the true label with probability e^eps / (e^eps + k - 1), else one of the
    other k - 1 uniformly (epsilon-LDP for the label)."""
    if num_labels < 2:
        return label
    keep = 1.0 / (1.0 + (num_labels - 1) * math.exp(-epsilon))
    if rng.random() < keep:
        return label
    other = int(rng.integers(num_labels - 1))
    return other if other < label else other + 1


def guarantee(mechanism: LocalMechanism, settings: RewriteSettings, *, documents_per_user: int,
              warning: str | None = None) -> dict[str, Any]:
    """The local guarantee of a rewrite, as JSON: per document, per user (composition over
    `documents_per_user` documents), per entity held by f documents, and what is released in the clear."""
    per_user = _compose(mechanism, max(documents_per_user, 1))
    label_eps = settings.label_epsilon
    clear = list(IN_THE_CLEAR) + ([] if label_eps else ["labels"])
    with_labels = {}
    if label_eps:  # each released label is its own label_eps-LDP release: it composes with the text (basic)
        with_labels = {"epsilon_document_with_label": settings.epsilon + label_eps,
                       "epsilon_user_with_labels": per_user.epsilon + max(documents_per_user, 1) * label_eps}
    return {
        "mechanism": MECHANISM_NAMES[settings.variant], "noise": settings.noise, "sigma": mechanism.sigma,
        "clip": mechanism.clip, "clipping": "norm" if settings.variant == "adept" else "value",
        "length": mechanism.length, "dim": mechanism.dim,
        "dim_released": mechanism.dim_released, "l2_sensitivity": mechanism.l2_sensitivity,
        "epsilon_document": settings.epsilon, "delta_document": settings.mechanism_delta,
        "documents_per_user": documents_per_user,
        "documents_per_user_source": "max_documents (public cap)" if settings.max_documents else
                                     "the largest user's document count (data-dependent)",
        "epsilon_user": per_user.epsilon, "delta_user": per_user.delta,
        "epsilon_user_basic": per_user.basic_epsilon,
        "epsilon_entity": {str(f): _compose(mechanism, f).epsilon for f in ENTITY_DOCUMENTS},
        "label_epsilon": label_eps, **with_labels, "in_the_clear": clear, "units": UNITS_NOTE,
        "private": warning is None, "warning": warning,
    }


def _compose(mechanism: LocalMechanism, n: int) -> Any:
    """mechanism.compose(n); no guarantee (epsilon inf, delta 1) where n * delta >= 1, rather than an error after
    the owners have released (adept read, docs/proofs.md section 10)."""
    from uedp.rewriting.mechanism import Composition

    if n * mechanism.delta >= 1.0:
        return Composition(n=n, basic_epsilon=math.inf, basic_delta=1.0, pld_epsilon=None)
    return mechanism.compose(n)


def select_documents(n: int, cap: int | None, rng: np.random.Generator) -> list[int]:
    """Indices of the documents a user rewrites: all (cap None or n <= cap) or `cap` drawn without replacement."""
    if cap is None or n <= cap:
        return list(range(n))
    return sorted(int(i) for i in rng.choice(n, size=cap, replace=False))


def cache_key(texts: Sequence[str], labels: Sequence[int] | None, rewriter: Any, settings: RewriteSettings,
              replicate: int = 0, fixed_seed: int | None = None) -> str:
    """The owner's rewrite cache key: the documents, labels, rewriter and settings (and a nonzero replicate
    label: a replicate is a new release with fresh noise; and the seed of a fixed-seed run, so that its
    rewrites, whose noise anyone can regenerate, are never read back by a private run: adversarial read,
    docs/proofs.md section 10)."""
    h = hashlib.blake2b(digest_size=16)
    parts: list[Any] = [rewriter.identity(), settings.wire(), labels]
    if replicate:  # 0 keeps the keys of caches written before replicates existed
        parts.append({"replicate": replicate})
    if fixed_seed is not None:
        parts.append({"fixed_seed": int(fixed_seed)})
    h.update(json.dumps(parts, sort_keys=True, default=str).encode())
    for t in texts:
        h.update(t.encode())
        h.update(b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class OwnerRewrite:
    """One owner's released documents: which of their documents, the rewrites, the released labels (after
    randomized response when settings.label_epsilon is set), and whether they were read back from the cache."""

    indices: list[int]
    texts: list[str]
    labels: list[int] | None
    reused: bool


def rewrite_cached(texts: Sequence[str], labels: Sequence[int] | None, num_labels: int | None, rewriter: Any,
                   settings: RewriteSettings, rng: np.random.Generator, *, cache_dir: Path,
                   replicate: int = 0, fixed_seed: int | None = None) -> OwnerRewrite:
    """One owner's documents rewritten once (at most settings.max_documents of them), then read back from
    `cache_dir` (on the owner's machine) so that running again spends no more epsilon; another `replicate`
    label rewrites again (fresh noise, a new release). `fixed_seed`: the seed `rng` was made from in a
    reproduction run (not private), which keeps its own cache entries (see cache_key)."""
    path = cache_dir / f"{cache_key(texts, labels, rewriter, settings, replicate, fixed_seed)}.json"
    if path.is_file():
        data = json.loads(path.read_text())
        return OwnerRewrite(data["indices"], data["texts"], data["labels"], True)
    indices = select_documents(len(texts), settings.max_documents, rng)
    rewrites = rewrite_texts([texts[i] for i in indices], rewriter, mechanism_for(rewriter, settings), rng)
    released = None
    if labels is not None:
        released = [int(labels[i]) for i in indices]
        if settings.label_epsilon is not None and num_labels:
            released = [randomized_response(y, num_labels, settings.label_epsilon, rng) for y in released]
    atomic_write_json(path, {"indices": indices, "texts": rewrites, "labels": released})
    return OwnerRewrite(indices, rewrites, released, False)
