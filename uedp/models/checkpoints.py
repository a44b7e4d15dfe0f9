"""Hugging Face checkpoints a model starts from: which directory the model options name, loading it with a
report of what did not fit, its tokenizer, and the digest of its weights (the base every node loads).

- `checkpoint_of(name, options)`: the `BaseCheckpoint` of model `hf` (option `path`, required) or of `gpt2`/`bert`
  given option `pretrained`; None for a model built from scratch (lstm, minilm, gpt2/bert without pretrained).
  A path is a local directory; a hub name is resolved only online (`resolve_pretrained`).
- `load_base_checkpoint(auto_class, checkpoint, task=...)`: `from_pretrained(..., output_loading_info=True)`. A
  weight the model has and the files lack (missing) or hold with another shape (mismatched) is a ConfigError
  naming the weights (the first few and their count) and the directory, never a silent random start, unless it
  belongs to the classification head the load creates (a weight outside the base model, `base_model_prefix`,
  for task classification) or the model option `allow_missing` is true (then said on stderr). Weights the files
  hold and the model does not use (unexpected: the LM head of a causal LM loaded as a classifier) are reported
  on stderr, not refused. transformers' own load report is muted: this one replaces it.
- `require_model_type(path, expected, entry)`: the `gpt2` and `bert` entries build one architecture each; a
  directory of another (config.json `model_type`) is refused with a pointer to model `hf`.
- The tokenizer is the checkpoint's own, read from its directory (uedp.tokenization.load_hf_tokenizer; refused when
  the directory has none of TOKENIZER_FILES, and any run tokenizer that encodes the public SAMPLE_TEXT to fewer than
  two distinct ids is refused: `check_encodes`), unless model `hf` says `tokenizer: "project"`: the project's public
  tokenizer (uedp.pipeline.run_tokenizer), allowed only for a checkpoint whose config.json records that tokenizer's
  digest (uedp.tokenization.tokenizer_digest) as `uedp_tokenizer_digest` (one this project saved:
  uedp.models.export). `expected_tokenizer_digest` is the digest the run's tokenizer must have; `check_tokenizer`
  refuses any other, naming both digests (a same-size foreign tokenizer included).
- `base_digest(path)`: SHA-256 over the directory's config.json and weight files (*.safetensors, *.bin and
  their indexes): the public base. The server sends it with every training message (uedp.protocol
  BASE_RECORD); a node whose own base differs refuses to train (`check_base`), naming both digests.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch

from uedp.errors import ConfigError, UedpError
from uedp.tasks import CLASSIFICATION
from uedp.tokenization import SPECIAL_TOKENS_CHOICES, TextTokenizer, load_hf_tokenizer, tokenizer_digest

TOKENIZER_CHOICES = ("own", "project")  # model hf option `tokenizer`
DIGEST_KEY = "uedp_tokenizer_digest"  # config.json of a checkpoint this project saved
PUBLIC_CORPUS_KEY = "uedp_public_corpus"  # config.json of a public start saved as a checkpoint (the corpus it learnt)
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "pytorch_model*.bin.index.json")
TOKENIZER_PATTERNS = ("tokenizer*", "*.json", "*.txt", "*.model")  # what a directory's tokenizer is read from
SHOWN = 5  # weights named in a refusal; the count says how many more
_TRUE = {"1", "on", "yes", "true"}


class BaseCheckpointMismatch(UedpError):
    """This node's base checkpoint is not the one the server trains from (the message holds only digests)."""


@dataclass(frozen=True)
class BaseCheckpoint:
    """A checkpoint directory a model starts from, with what the model options say about it."""

    path: Path
    entry: str  # the model entry: hf, gpt2 or bert
    tokenizer: str = "own"  # TOKENIZER_CHOICES
    allow_missing: bool = False
    special_tokens: str = "frame"  # uedp.tokenization.SPECIAL_TOKENS_CHOICES: how its own tokenizer frames sentences

    @property
    def where(self) -> str:
        return f"model {self.entry!r} checkpoint {str(self.path)!r}"


def checkpoint_of(name: str, options: Mapping[str, Any]) -> BaseCheckpoint | None:
    """The checkpoint model `name` with `options` starts from (module docstring), or None."""
    if name == "hf":
        path = options.get("path")
        if not isinstance(path, str) or not path:
            raise ConfigError("model 'hf' needs option path: a local checkpoint directory (config.json, weights, "
                              "tokenizer), e.g. model.options = '{\"path\": \"/models/my-llama\"}'")
        tokenizer = options.get("tokenizer", "own")
        if tokenizer not in TOKENIZER_CHOICES:
            raise ConfigError(f"model 'hf' option tokenizer must be one of {', '.join(TOKENIZER_CHOICES)}, got "
                              f"{tokenizer!r}")
        allow = options.get("allow_missing", False)
        if not isinstance(allow, bool):
            raise ConfigError(f"model 'hf' option allow_missing must be true or false, got {allow!r}")
        special = options.get("special_tokens", "frame")
        if special not in SPECIAL_TOKENS_CHOICES:
            raise ConfigError(f"model 'hf' option special_tokens must be one of {', '.join(SPECIAL_TOKENS_CHOICES)}, "
                              f"got {special!r}")
        if special == "own" and tokenizer == "project":
            raise ConfigError("model 'hf' option special_tokens own frames sentences with the checkpoint's own "
                              "tokenizer's template: it needs tokenizer own (the project tokenizer frames its own)")
        return BaseCheckpoint(resolve_pretrained(path), "hf", tokenizer, allow, special)
    if name in ("gpt2", "bert") and options.get("pretrained") is not None:
        return BaseCheckpoint(resolve_pretrained(str(options["pretrained"])), name)
    return None


# -- where a checkpoint is -------------------------------------------------------------------------------------

def hub_offline() -> bool:
    """True when the environment forbids hub access (checked at call time, not import time)."""
    flags = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in flags)


def _looks_like_path(spec: str) -> bool:
    """Hub names are "name" or "org/name"; anything else that is not an existing directory is a bad path."""
    return spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec


def resolve_pretrained(spec: str) -> Path:
    """A local directory for `spec`: the directory itself, or (online only) a hub snapshot of that name."""
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"pretrained model directory {spec!r} has no config.json")
        return path
    if path.exists():
        raise ConfigError(f"pretrained model path {spec!r} is not a directory")
    if _looks_like_path(spec):
        raise ConfigError(f"pretrained model directory {spec!r} does not exist")
    if hub_offline():
        raise UedpError(
            f"model {spec!r} is a hub name but hub access is off (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE): "
            "pass a local path to a downloaded model directory instead"
        )
    from huggingface_hub import snapshot_download

    try:
        local = snapshot_download(spec, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"])
    except Exception as exc:  # network errors come in many types
        raise UedpError(
            f"could not fetch model {spec!r} from the hub ({type(exc).__name__}: {exc}); "
            "pass a local path to a downloaded model directory instead"
        ) from None
    return Path(local)


def read_config(path: Path) -> dict[str, Any]:
    """The directory's config.json (ConfigError naming the file when it is not a JSON object)."""
    file = path / "config.json"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{file}: not a readable config.json ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: not a JSON object")
    return data


def require_model_type(path: Path, expected: str, entry: str) -> None:
    """Refuse a directory whose config.json model_type is not `expected` (entry gpt2 builds GPT-2 only, ...)."""
    found = read_config(path).get("model_type")
    if found != expected:
        raise ConfigError(f"model {entry!r} builds {expected} models, but {str(path)!r} holds a {found!r} checkpoint "
                          f"(config.json model_type): use model 'hf' (model.name=hf, model.options = "
                          f"'{{\"path\": \"{path}\"}}'), which loads any architecture transformers knows")


# -- loading, with a report ------------------------------------------------------------------------------------

@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' warnings and progress bars off (our own load report replaces its)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


@dataclass(frozen=True)
class LoadReport:
    """What did not fit when a checkpoint was loaded: `missing` and `mismatched` weights (outside a new head),
    the new head's (`head`: missing or mismatched, trained from a random start by design) and `unexpected`."""

    missing: tuple[str, ...]
    mismatched: tuple[str, ...]
    head: tuple[str, ...]
    unexpected: tuple[str, ...]

    @classmethod
    def of(cls, info: Mapping[str, Any], model: torch.nn.Module, *, task: str) -> LoadReport:
        prefix = f"{getattr(model, 'base_model_prefix', '')}."
        in_head = (lambda k: not k.startswith(prefix)) if task == CLASSIFICATION and prefix != "." else \
            (lambda k: False)
        missing = {str(k) for k in info.get("missing_keys", ())}
        mismatched = {str(k[0] if isinstance(k, tuple | list) else k) for k in info.get("mismatched_keys", ())}
        return cls(missing=tuple(sorted(k for k in missing if not in_head(k))),
                   mismatched=tuple(sorted(k for k in mismatched if not in_head(k))),
                   head=tuple(sorted(k for k in missing | mismatched if in_head(k))),
                   unexpected=tuple(sorted(str(k) for k in info.get("unexpected_keys", ()))))

    @property
    def not_loaded(self) -> tuple[str, ...]:
        """Weights outside a new head that start at random: missing or mismatched."""
        return tuple(sorted({*self.missing, *self.mismatched}))


def shown(keys: Iterable[str]) -> str:
    """The first SHOWN names and how many there are: "a, b, c (3)" or "a, ..., e and 7 more (12)"."""
    keys = list(keys)
    head = ", ".join(keys[:SHOWN])
    return f"{head} and {len(keys) - SHOWN} more ({len(keys)})" if len(keys) > SHOWN else f"{head} ({len(keys)})"


def load_base_checkpoint(auto_class: Any, checkpoint: BaseCheckpoint, *, task: str, stream: TextIO | None = None,
                    dtype: torch.dtype = torch.float32, **kwargs: Any) -> torch.nn.Module:
    """`auto_class.from_pretrained(checkpoint.path, **kwargs)`, offline, in `dtype` (float32 unless the model option
    dtype says otherwise: uedp.models.precision.load_dtype), checked (module docstring)."""
    stream = stream or sys.stderr
    with quiet_transformers():
        try:
            model, info = auto_class.from_pretrained(
                str(checkpoint.path), local_files_only=True, dtype=dtype, output_loading_info=True,
                ignore_mismatched_sizes=True, **kwargs)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:  # unreadable files, an unknown architecture
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise ConfigError(f"{checkpoint.where}: transformers could not load it with {auto_class.__name__} "
                              f"({type(exc).__name__}: {first[:300]})") from None
    report = LoadReport.of(info, model, task=task)
    if report.not_loaded:
        what = ", ".join(filter(None, (f"missing {shown(report.missing)}" if report.missing else "",
                                       f"another shape {shown(report.mismatched)}" if report.mismatched else "")))
        if not checkpoint.allow_missing:
            allow = " or set the model option allow_missing: true" if checkpoint.entry == "hf" else ""
            raise ConfigError(f"{checkpoint.where}: weights the model needs are not in its files ({what}); they "
                              f"would start at random. Use the checkpoint they belong to{allow}")
        print(f"WARNING: {checkpoint.where}: weights not in its files start at random (allow_missing: true): "
              f"{what}", file=stream, flush=True)
    if report.head:
        print(f"{checkpoint.where}: a new classification head, trained from a random start: {shown(report.head)}",
              file=stream, flush=True)
    if report.unexpected:
        print(f"{checkpoint.where}: weights in its files this model does not use (not loaded): "
              f"{shown(report.unexpected)}", file=stream, flush=True)
    return model


# -- the tokenizer ---------------------------------------------------------------------------------------------

# the files a checkpoint's own tokenizer is read from (any one of them); without them AutoTokenizer would build
# a tokenizer of one token that encodes every sentence to nothing
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt", "merges.txt",
                   "tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
# a fixed public sentence every run tokenizer must encode to at least two distinct ids (check_encodes)
SAMPLE_TEXT = "The quick brown fox jumps over the lazy dog, and 42 people saw it."


def check_encodes(tokenizer: TextTokenizer, source: str) -> None:
    """Refuse a tokenizer that encodes SAMPLE_TEXT to fewer than two distinct ids: every sentence would be (almost)
    the same sequence, and a run would train on its start and end tokens alone. `source` names the tokenizer."""
    ids = tokenizer.encode(SAMPLE_TEXT)
    if len(set(ids)) < 2:
        shown_ids = ids if len(ids) <= 8 else [*ids[:8], "..."]
        raise ConfigError(f"{source}: the tokenizer (vocabulary of {tokenizer.vocab_size}) encodes the sample text "
                          f"{SAMPLE_TEXT!r} to {shown_ids} ({len(set(ids))} distinct ids; at least 2 needed): it "
                          "cannot tell sentences apart. Use the tokenizer the model was trained with")


def _load_own(path: Path, where: str, special_tokens: str = "frame") -> TextTokenizer:
    """The directory's own tokenizer, refused when the directory has no tokenizer files or it is degenerate."""
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(f"{where}: no tokenizer files in the directory (looked for {', '.join(TOKENIZER_FILES)}); "
                          "save the model's tokenizer beside it (tokenizer.save_pretrained(directory))")
    tokenizer = load_hf_tokenizer(path, special_tokens=special_tokens)
    check_encodes(tokenizer, f"{where}: its own tokenizer")
    return tokenizer


@functools.lru_cache(maxsize=8)
def _own_tokenizer_digest(path: str, stamp: tuple, where: str, special_tokens: str) -> str:
    return tokenizer_digest(_load_own(Path(path), where, special_tokens))


def own_tokenizer(checkpoint: BaseCheckpoint) -> TextTokenizer:
    """The checkpoint's own tokenizer (its directory's), refused when the directory has none (TOKENIZER_FILES) or
    it encodes SAMPLE_TEXT to fewer than two distinct ids (check_encodes)."""
    return _load_own(checkpoint.path, checkpoint.where, checkpoint.special_tokens)


def expected_tokenizer_digest(checkpoint: BaseCheckpoint) -> str:
    """The digest (uedp.models.public_start.tokenizer_digest) the run's tokenizer must have: the directory's own
    tokenizer's, or with tokenizer "project" the one its config.json records (refused when it records none)."""
    if checkpoint.tokenizer == "project":
        recorded = read_config(checkpoint.path).get(DIGEST_KEY)
        if not isinstance(recorded, str):
            try:
                own = f"its own tokenizer's digest is {_own_digest(checkpoint)}"
            except ConfigError:
                own = "nor has it a usable tokenizer of its own"
            raise ConfigError(f"{checkpoint.where}: tokenizer 'project' needs a checkpoint that records the project "
                              f"tokenizer's digest (config.json {DIGEST_KEY}, written when this project saves a "
                              f"checkpoint); this one records none ({own}). Leave "
                              "out the tokenizer option to use the checkpoint's own tokenizer")
        return recorded
    return _own_digest(checkpoint)


def _own_digest(checkpoint: BaseCheckpoint) -> str:
    return _own_tokenizer_digest(str(checkpoint.path), _stamp(checkpoint.path, TOKENIZER_PATTERNS), checkpoint.where,
                                 checkpoint.special_tokens)


def check_tokenizer(checkpoint: BaseCheckpoint, digest: str) -> None:
    """Refuse a run tokenizer of digest `digest` that is not the one the checkpoint's embedding was trained with."""
    expected = expected_tokenizer_digest(checkpoint)
    if digest != expected:
        whose = (f"the project tokenizer recorded in its config.json ({DIGEST_KEY})"
                 if checkpoint.tokenizer == "project" else "its own tokenizer's (the directory's tokenizer files)")
        raise ConfigError(f"{checkpoint.where}: the run's tokenizer has digest {digest}, the checkpoint's is "
                          f"{expected}, {whose}: its token ids would index the wrong rows of the embedding. Use "
                          "the checkpoint's own tokenizer")


# -- the base every node loads ---------------------------------------------------------------------------------

def _files(path: Path, patterns: Iterable[str]) -> list[Path]:
    return sorted({f for p in patterns for f in path.glob(p) if f.is_file()})


def _stamp(path: Path, patterns: Iterable[str]) -> tuple:
    """Names, sizes and modification times: a cache key that changes when a file does."""
    return tuple((f.name, (s := f.stat()).st_size, s.st_mtime_ns) for f in _files(path, patterns))


def recorded_public_corpus_of(path: Path) -> str | None:
    """The public corpus a checkpoint this project pretrained records (PUBLIC_CORPUS_KEY), or None."""
    corpus = read_config(Path(path)).get(PUBLIC_CORPUS_KEY)
    return corpus if isinstance(corpus, str) else None


def base_digest(path: Path) -> str:
    """SHA-256 of the checkpoint's config.json and weight files (names and contents), cached while unchanged."""
    patterns = ("config.json", *WEIGHT_PATTERNS)
    return _base_digest(str(Path(path).resolve()), _stamp(Path(path), patterns))


@functools.lru_cache(maxsize=8)
def _base_digest(path: str, stamp: tuple) -> str:
    files = _files(Path(path), ("config.json", *WEIGHT_PATTERNS))
    if not any(f.name != "config.json" for f in files):
        raise ConfigError(f"checkpoint {path!r}: no weight files ({', '.join(WEIGHT_PATTERNS)})")
    total = hashlib.sha256()
    for file in files:
        one = hashlib.sha256()
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):  # noqa: B023 - used at once
                one.update(block)
        total.update(f"{file.name}\0{one.hexdigest()}\n".encode())
    return total.hexdigest()


def check_base(name: str, options: Mapping[str, Any], expected: str) -> None:
    """Refuse to train when this node's base (model `name`'s checkpoint) is not the server's (`expected`)."""
    checkpoint = checkpoint_of(name, options)
    ours = base_digest(checkpoint.path) if checkpoint is not None else "none (no checkpoint)"
    if ours != expected:
        raise BaseCheckpointMismatch(f"this node's base checkpoint has digest {ours}, the server trains from "
                                     f"{expected}: refusing to train (every owner loads the same public base)")
