"""A public start: model weights trained on PUBLIC text only, from which a private run starts (`model.init`).

`uedp/pretraining.py` trains the run's model on a public corpus and writes the file with
`save_public_start`; the server of a run with `model.init=FILE` builds its model as usual and loads the
weights with `load_public_start`, which refuses a file made for another model, other model options or
another tokenizer (the vocabulary's digest), naming the file and the field. The weights are a function of
public text and of public choices only (corpus, epochs, optimizer), so starting from them spends no
privacy: the guarantee of the run covers what the private training adds. The file also says which public
corpus it learned from; the run's summary repeats it (`initial_model`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from uedp.errors import ConfigError
from uedp.files import atomic_path
from uedp.models.base import UedpModel
from uedp.tokenization import TextTokenizer

FORMAT = "uedp-public-start-1"


def tokenizer_digest(tokenizer: TextTokenizer) -> str:
    """A digest of the tokenizer's vocabulary (token -> id): equal digests, equal ids for equal text."""
    vocab = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
    return hashlib.blake2b(vocab.encode(), digest_size=16).hexdigest()


def save_public_start(path: Path, model: UedpModel, *, model_name: str, model_options: dict[str, Any],
                      tokenizer: TextTokenizer, corpus: str, details: dict[str, Any]) -> None:
    """Write `model`'s weights with what they fit (model, options, tokenizer) and where they come from."""
    with atomic_path(path) as tmp:
        torch.save({"format": FORMAT, "model": model_name, "options": model_options,
                    "tokenizer": tokenizer_digest(tokenizer), "vocab_size": tokenizer.vocab_size,
                    "corpus": corpus, "details": details, "state_dict": model.state_dict()}, tmp)


def load_public_start(path: str | Path, model: UedpModel, *, model_name: str, model_options: dict[str, Any],
                      tokenizer: TextTokenizer) -> dict[str, Any]:
    """Load the weights of `path` into `model` after checking they were made for it; returns where they come
    from ({"file", "corpus", "details"})."""
    where = f"model.init {path}"
    if not Path(path).is_file():
        raise ConfigError(f"{where}: no such file (write one with python -m experiments.pretrain)")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same bad input
        raise ConfigError(f"{where}: not a public-start file ({type(exc).__name__}: {exc})") from None
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise ConfigError(f"{where}: not a public-start file (field 'format' is not {FORMAT!r})")
    checks = (("model", blob.get("model"), model_name), ("options", blob.get("options"), model_options),
              ("tokenizer", blob.get("tokenizer"), tokenizer_digest(tokenizer)))
    for field, theirs, ours in checks:
        if theirs != ours:
            raise ConfigError(f"{where}: field {field!r} is {theirs!r}, this run's is {ours!r} (pretrain "
                              "with the run's model, model.options and tokenizer settings)")
    try:
        model.load_state_dict(blob["state_dict"])
    except (KeyError, RuntimeError) as exc:
        raise ConfigError(f"{where}: field 'state_dict' does not fit the model ({exc})") from None
    return {"file": str(path), "corpus": blob.get("corpus"), "details": blob.get("details", {})}
