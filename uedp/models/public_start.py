"""A public start: model weights trained on PUBLIC text only, from which a private run starts (`model.init`).

`uedp/pretraining.py` trains the run's model on a public corpus and writes the file with
`save_public_start`; the server of a run with `model.init=FILE` builds its model as usual and loads the
weights with `load_public_start`, which refuses a file made for another model, other model options or
another tokenizer (the vocabulary's digest), or holding weights that do not fit the model (a missing or
extra parameter, another shape or dtype, NaN or infinite values), naming the file and the field; a refused
file leaves the model unchanged. The weights are a function of public text and of public choices only
(corpus, epochs, optimizer), so starting from them spends no privacy: the guarantee of the run covers what
the private training adds. The file also says which public
corpus it learned from; the run's summary repeats it (`initial_model`).

That holds only if the public corpus is not the run's private text: given the run's private dataset
(`private=`, uedp.pipeline.private_dataset, as the server passes it), `load_public_start` refuses a start whose
recorded corpus is, or is contained in, the run's dataset (a start pretrained on bbc_news for dataset=bbc_news;
the synthetic generator's public text for a synthetic dataset at the same seed):
uedp.public_corpora.private_text_clash, the one rule, which the tokenizer obeys too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from uedp.errors import ConfigError
from uedp.files import atomic_path
from uedp.models.base import UedpModel
from uedp.public_corpora import (
    independent_public_corpora,
    private_text_clash,
    recorded_public_corpus,
)
from uedp.tokenization import TextTokenizer, tokenizer_digest

FORMAT = "uedp-public-start-1"
__all__ = ["FORMAT", "load_public_start", "refuse_private_start", "save_public_start", "tokenizer_digest"]


def save_public_start(path: Path, model: UedpModel, *, model_name: str, model_options: dict[str, Any],
                      tokenizer: TextTokenizer, corpus: str, details: dict[str, Any]) -> None:
    """Write `model`'s weights with what they fit (model, options, tokenizer) and where they come from."""
    with atomic_path(path) as tmp:
        torch.save({"format": FORMAT, "model": model_name, "options": model_options,
                    "tokenizer": tokenizer_digest(tokenizer), "vocab_size": tokenizer.vocab_size,
                    "corpus": corpus, "details": details, "state_dict": model.state_dict()}, tmp)


def load_public_start(path: str | Path, model: UedpModel, *, model_name: str, model_options: dict[str, Any],
                      tokenizer: TextTokenizer, private: tuple[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Load the weights of `path` into `model` after checking they were made for it and, given `private` (the
    run's private dataset: name and options), that their public corpus is not the run's private text; returns
    where they come from ({"file", "corpus", "details"}). Without `private` the corpus is not checked (a caller
    that has no run)."""
    where = f"model.init {path}"
    if not Path(path).is_file():
        what = "not a regular file" if Path(path).exists() else "no such file"
        raise ConfigError(f"{where}: {what} (write one with python -m experiments.pretrain)")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same bad input
        raise ConfigError(f"{where}: not a public-start file ({type(exc).__name__}: {exc})") from None
    if not isinstance(blob, dict) or not _same(blob.get("format"), FORMAT):
        raise ConfigError(f"{where}: not a public-start file (field 'format' is not {FORMAT!r})")
    checks = (("model", blob.get("model"), model_name), ("options", blob.get("options"), model_options),
              ("tokenizer", blob.get("tokenizer"), tokenizer_digest(tokenizer)))
    for field, theirs, ours in checks:
        if not _same(theirs, ours):
            raise ConfigError(f"{where}: field {field!r} is {_show(theirs)}, this run's is {_show(ours)} (pretrain "
                              "with the run's model, model.options and tokenizer settings)")
    if private is not None:
        refuse_private_start(blob.get("corpus"), private, where=where)
    weights = _checked_state_dict(blob.get("state_dict"), model, where=where)
    model.load_state_dict(weights)  # every key, shape and value checked: the model is changed only now
    corpus, details = blob.get("corpus"), blob.get("details", {})
    return {"file": str(path), "corpus": corpus if isinstance(corpus, str) else _show(corpus),
            "details": details if _plain(details) else {}}


def refuse_private_start(corpus: Any, private: tuple[str, dict[str, Any]], *, where: str) -> None:
    """Refuse a start whose recorded public corpus is the run's private text (`private`: the dataset whose users'
    text the run trains on and its options, uedp.pipeline.private_dataset; uedp.public_corpora.private_text_clash):
    its weights would be a function of the users' text, outside the guarantee. The record is the description
    experiments.pretrain wrote (uedp.pretraining.public_text); one this version cannot parse is refused only
    when it names a public corpus the dataset contains."""
    dataset, options = private
    record = corpus if isinstance(corpus, str) else _show(corpus)
    known = recorded_public_corpus(record)
    name, seed = known if known is not None else (None, None)
    why = private_text_clash(name, dataset, options, seed=seed, named=record, role="start")
    if why is not None:
        others = ", ".join(independent_public_corpora(dataset, options))
        raise ConfigError(f"{where}: {why}; a start trained on it is not public. Pretrain on a public corpus "
                          f"independent of it (python -m experiments.pretrain --public NAME, NAME one of {others}) "
                          "or start from random weights (model.init=)")


def _plain(value: Any) -> bool:
    """JSON-like data (str, int, float, bool, None, lists and str-keyed dicts of them), compared by `==`
    without surprises (a tensor's `==` is elementwise)."""
    if value is None or isinstance(value, str | int | float | bool):
        return True
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _same(theirs: Any, ours: Any) -> bool:
    return _plain(theirs) and type(theirs) is type(ours) and theirs == ours


def _show(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _checked_state_dict(weights: Any, model: UedpModel, *, where: str) -> dict[str, torch.Tensor]:
    """The file's `state_dict` once its keys, shapes, dtypes and values are known to fit `model` (ConfigError
    naming the field otherwise), so that a refused file leaves the model as it was (load_state_dict copies
    what fits before it reports what does not)."""
    field = f"{where}: field 'state_dict'"
    if not isinstance(weights, dict):
        raise ConfigError(f"{field} must be a mapping of parameter names to tensors, got {type(weights).__name__}")
    ours = model.state_dict()
    missing, extra = sorted(set(ours) - set(weights)), sorted(set(weights) - set(ours), key=str)
    if missing or extra:
        raise ConfigError(f"{field} does not fit the model (missing: {_show(missing)}; unexpected: {_show(extra)})")
    for name, tensor in weights.items():
        if not isinstance(tensor, torch.Tensor):
            raise ConfigError(f"{field}: {name} is a {type(tensor).__name__}, not a tensor")
        if tensor.shape != ours[name].shape:
            raise ConfigError(f"{field}: {name} has shape {tuple(tensor.shape)}, the model's is "
                              f"{tuple(ours[name].shape)}")
        if tensor.is_complex() or (ours[name].is_floating_point() and not tensor.is_floating_point()):
            raise ConfigError(f"{field}: {name} has dtype {tensor.dtype}, the model's is {ours[name].dtype}")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise ConfigError(f"{field}: {name} holds NaN or infinite values")
    return weights
