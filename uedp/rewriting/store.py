"""Trained rewriters on disk: `load_rewriter` trains the rewriter of a variant on public text once
(uedp.rewriting.training) and caches it; `load_saved_rewriter` reads one that someone saved (`Rewriter.save`).

The cache: cache_root()/"rewriters"/<digest of the request>/ holds weights.pt, tokenizer.json and rewriter.json
(identity, kept coordinates, training log). The request (`rewriter_request`, uedp.rewriting.model) is the config
fields the variant uses, the variant, epsilon and delta (pr+ only) and `public_text_key` of the public text; a
cached rewriter is loaded with its weights checked against the SHA-256 its identity records.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from uedp.errors import ConfigError
from uedp.paths import cache_root
from uedp.rewriting.mechanism import VARIANTS, ClvMechanism
from uedp.rewriting.model import Rewriter, RewriterConfig, rewriter_request
from uedp.rewriting.public_text import public_text_for, public_text_key
from uedp.rewriting.training import prune_rewriter, public_norm_bound, say, train_rewriter


def rewriter_dir(request: dict[str, Any]) -> Path:
    """Where `load_rewriter` caches the rewriter of `request` (`rewriter_request`): a digest of it under
    cache_root()/"rewriters"."""
    digest = hashlib.blake2b(json.dumps(request, sort_keys=True).encode(), digest_size=12).hexdigest()
    return cache_root() / "rewriters" / digest


def load_rewriter(*, private_corpus: str, variant: str = "clv", epsilon: float | None = None, delta: float = 1e-5,
                  config: RewriterConfig = RewriterConfig(), progress: bool = True,  # noqa: B008
                  noise: str = "gaussian") -> Rewriter:
    """The rewriter for `variant`, trained on public_text_for(private_corpus) only, cached (see the module docstring):
    "clv" (clip-by-value training, no noise); "pr" (the clv model pruned, `prune_rewriter`); "pr+" (the pr model
    further trained for config.noisy_steps with the noise of (epsilon, delta): one model per epsilon; epsilon is
    required, and ignored by the other variants, as is delta); "adept" (the ADePT mechanism on our model: the clv
    model further trained for config.adept_steps with its encoder output norm-clipped, no noise; the bound C is the
    config.adept_quantile quantile of the clv model's raw output norms on the public validation text).
    Progress (step, loss, BLEU) goes to stderr."""
    if variant not in VARIANTS:
        raise ConfigError(f"rewriter variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if not isinstance(config, RewriterConfig):
        raise ConfigError(f"config must be a RewriterConfig, got {type(config).__name__}")
    if variant == "pr+":
        if epsilon is None:
            raise ConfigError("the pr+ rewriter is trained for one epsilon: give epsilon")
        mechanism = ClvMechanism(epsilon=epsilon, delta=delta, dim=config.width, clip=config.clip,
                                 length=config.length, noise=noise)  # validates; its kept is set below
        epsilon, delta, noise = mechanism.epsilon, mechanism.delta, mechanism.noise
    else:
        epsilon = delta = noise = None
    key = public_text_key(private_corpus, max_sentences=config.max_sentences)
    request = rewriter_request(config, variant, epsilon, delta, noise, key)
    directory = rewriter_dir(request)
    if (directory / "rewriter.json").is_file():
        return Rewriter.load(directory)
    description, sentences = public_text_for(private_corpus, max_sentences=config.max_sentences)
    train, valid = sentences[: -config.valid_sentences], sentences[-config.valid_sentences :]
    say(progress, f"training the {config.kind} {variant} rewriter on {description}")
    if variant == "clv":
        rw = train_rewriter(train, config, valid=valid, public=description, public_key=key, progress=progress)
    elif variant == "pr":
        base = load_rewriter(private_corpus=private_corpus, config=config, progress=progress)
        rw = prune_rewriter(base, train, valid, progress=progress)
    elif variant == "adept":
        base = load_rewriter(private_corpus=private_corpus, config=config, progress=progress)
        bound = public_norm_bound(base, valid, config.adept_quantile)
        say(progress, f"adept: norm bound C = {bound:.4g} (the {config.adept_quantile:g} quantile of the public "
                      "validation text's encoder-output norms)")
        rw = train_rewriter(train, config, valid=valid, init=base, steps=config.adept_steps, variant="adept",
                            norm_bound=bound, progress=progress)
    else:
        base = load_rewriter(private_corpus=private_corpus, variant="pr", config=config, progress=progress)
        rw = train_rewriter(train, config, valid=valid, init=base, kept=base.kept, steps=config.noisy_steps,
                            mechanism=base.mechanism(epsilon, delta, noise), variant="pr+", progress=progress)
    if rw.request() != request:  # pragma: no cover - a bug, not an input error
        raise RuntimeError(f"trained rewriter {rw.request()} does not match the request {request}")
    _store(rw, directory)
    return rw


def load_saved_rewriter(directory: str | Path, *, variant: str, epsilon: float | None = None,
                        delta: float | None = None, noise: str | None = None, setting: str = "rewrite.rewriter"
                        ) -> Rewriter:
    """A rewriter saved with Rewriter.save at `directory` (weights.pt, tokenizer.json, rewriter.json), its weights
    checked against their recorded digest; it must be of `variant`, and a pr+ one trained for exactly this
    epsilon, delta and noise (it was trained with that noise). ConfigError naming `setting` otherwise. Whether
    its training text was public is the word of whoever trained it (rewriter.json's "public" says what it was)."""
    path = Path(directory).expanduser()
    if not (path / "rewriter.json").is_file():
        raise ConfigError(f"{setting}: {path} is not a saved rewriter (no rewriter.json; Rewriter.save writes "
                          "weights.pt, tokenizer.json and rewriter.json)")
    try:
        rw = Rewriter.load(path)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise ConfigError(f"{setting}: cannot load the rewriter at {path}: {exc}") from None
    if rw.variant != variant:
        raise ConfigError(f"{setting}: the rewriter at {path} is a {rw.variant} one, rewrite.variant is {variant}")
    if variant == "pr+" and (rw.epsilon, rw.delta, rw.noise) != (epsilon, delta, noise):
        raise ConfigError(f"{setting}: the pr+ rewriter at {path} was trained for epsilon {rw.epsilon}, delta "
                          f"{rw.delta}, noise {rw.noise}; this run asks epsilon {epsilon}, delta {delta}, "
                          f"noise {noise}")
    return rw


def _store(rw: Rewriter, directory: Path) -> None:
    """Write atomically: a temporary directory renamed into place (a concurrent writer's copy wins)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=directory.name + ".tmp"))
    try:
        rw.save(tmp)
        try:
            os.rename(tmp, directory)
        except OSError:
            if not (directory / "rewriter.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
