"""The run's tokenizer (`make_run_tokenizer`) and its file (`save_run_tokenizer`, `load_tokenizer`).

By default (`tokenizer.source = "public"`) it is trained on a public corpus independent of the users' text
(`tokenizer.public_corpus`, "auto" by default: the public corpus the dataset's loader registered,
uedp.data.loaders.DatasetFacts.public_corpus; uedp.public_corpora has the public corpora), so the vocabulary
reveals nothing about them. `tokenizer.source = "private_split"` trains it on the users' training split, a
non-private preprocessing step (its vocabulary is a function of every user's text): such runs are reported not
private. Pretrained models (`minilm`, `hf`, or `gpt2`/`bert` with `pretrained=<local path>`) keep their own
tokenizer (a Hugging Face checkpoint's with the special ids it declares: `Manifest.special_ids`); `hf` with
option tokenizer "project" uses the public one, for a checkpoint that records its digest
(uedp.models.checkpoints). Every tokenizer `make_run_tokenizer` returns encodes a public sample text to at least two
distinct ids (uedp.models.checkpoints.check_encodes).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from uedp.data.corpus import Corpus
from uedp.errors import ConfigError
from uedp.models.checkpoints import check_encodes, check_tokenizer, checkpoint_of
from uedp.models.registry import MODELS, build_tokenizer
from uedp.paths import cache_root
from uedp.public_corpora import independent_public_corpora, private_text_clash
from uedp.tokenization import (
    PublicCorpus,
    TextTokenizer,
    TokenizerTraining,
    get_public_tokenizer,
    public_corpus,
    resolve_public_corpus,
    tokenizer_digest,
)


@dataclass(frozen=True)
class TokenizerSpec:
    """The trained tokenizer's settings (the tokenizer group): `kind` (bpe | wordpiece), `vocab_size`, `source`
    (public | private_split) and `public_corpus` (a public corpus's name, "auto" or a text file)."""

    kind: str = "bpe"
    vocab_size: int = 2000
    source: str = "public"
    public_corpus: str = "auto"

    def training(self) -> TokenizerTraining:
        return TokenizerTraining(kind=self.kind, vocab_size=self.vocab_size)


def make_run_tokenizer(corpus: Corpus | None, *, model: str, model_options: dict[str, Any], spec: TokenizerSpec,
                  dataset: str, private: tuple[str, dict[str, Any]]) -> tuple[TextTokenizer, dict[str, Any]]:
    """The tokenizer of a run of model `model` (with `model_options`) on dataset `dataset`, and what it was
    trained on. Pretrained models keep their own; otherwise `spec.source` "public" trains on the public corpus
    `spec.public_corpus` names (the private corpus is not read: only `dataset` picks "auto"'s default;
    `private`: (name, options) of the dataset whose users' text the run trains on, uedp.pipeline.private_dataset,
    which the public corpus may not be), "private_split" on the users' training split (reported
    not private: uedp.server_data.ServerData.tokenizer_warning). `corpus` is None on a server that holds no
    private text (federation.data = owners), where only public and pretrained tokenizers exist."""
    checkpoint = checkpoint_of(model, model_options)
    training = spec.training()  # checked here, for pretrained tokenizers too
    if model == "minilm" or (checkpoint is not None and checkpoint.tokenizer == "own"):
        return _pretrained_tokenizer(corpus, model, model_options)
    if spec.source == "private_split":
        if corpus is None:
            raise ConfigError("tokenizer.source = private_split needs the users' text, which this server does not hold")
        tokenizer = build_tokenizer(model, corpus, config=training)
        info = {"source": "private_split", "corpus": f"{dataset} training split (the users' text)"}
    else:
        source = public_corpus(resolve_public_corpus(spec.public_corpus, dataset))
        _refuse_private_tokenizer_text(source, spec.public_corpus, private)
        MODELS.get(model)  # an unknown model name fails here, as in build_tokenizer
        tokenizer = get_public_tokenizer(source, training)
        check_encodes(tokenizer, f"the public tokenizer trained on {source.description}")
        info = {"source": "public", "corpus": source.description}
    if checkpoint is not None:  # hf with tokenizer "project": the checkpoint must record this tokenizer
        check_tokenizer(checkpoint, tokenizer_digest(tokenizer))
    return tokenizer, {**info, "vocab_size": tokenizer.vocab_size, "kind": spec.kind}


def _pretrained_tokenizer(corpus: Corpus | None, model: str,
                          model_options: dict[str, Any]) -> tuple[TextTokenizer, dict[str, Any]]:
    """A pretrained model's own tokenizer, and what summary.json says of it."""
    tokenizer = build_tokenizer(model, corpus, options=model_options)
    info = {"source": "pretrained", "corpus": f"the pretrained {model} model's own tokenizer",
            "vocab_size": tokenizer.vocab_size, "kind": "pretrained"}
    if tokenizer.special_tokens == "own":
        info["special_tokens"] = ("own: the tokenizer's own template frames each sentence (model option "
                                  "special_tokens); perplexity counts the tokens the model predicts under it, so "
                                  "it is not comparable with a run that frames sentences with [BOS] .. [EOS]")
    if tokenizer.special_ids is not None and tokenizer.pad_id == tokenizer.eos_id:
        info["padding"] = (f"with its eos token (id {tokenizer.pad_id}): the tokenizer declares no other pad "
                           "token; the attention mask hides padding from the model and the loss")
    return tokenizer, info


def _refuse_private_tokenizer_text(source: PublicCorpus, named: str, private: tuple[str, dict[str, Any]]) -> None:
    """Refuse a "public" tokenizer corpus (`source`, tokenizer.public_corpus `named`) that is the run's private
    text (`private`: its dataset and options; uedp.public_corpora.private_text_clash, the one rule): its
    vocabulary would be a function of the users' text, outside the guarantee. Refused rather than labelled,
    since the clash is known before anything is trained."""
    dataset, options = private
    why = private_text_clash(source.name, dataset, options, role="tokenizer")  # a file ("file"): its origin unknown
    if why is not None:
        others = ", ".join(independent_public_corpora(dataset, options))
        raise ConfigError(f"tokenizer.public_corpus = {named}: {why}; a tokenizer trained on "
                          f"it is not public. Set tokenizer.public_corpus to a public corpus independent of it "
                          f"({others}) or to a public text file")


def save_run_tokenizer(tokenizer: TextTokenizer, key: str) -> Path:
    """Write the tokenizer of the prepared data `key` (uedp.prepare.manifest.data_key) to the cache; its path."""
    path = cache_root() / "tokenizers" / f"run-{key}.json"
    tokenizer.save(path)
    return path


SpecialIdsKey = tuple[tuple[str, int | None], ...] | None


def special_ids_key(special_ids: dict[str, int | None] | None) -> SpecialIdsKey:
    """TextTokenizer.special_ids as a hashable key (load_tokenizer is cached)."""
    return None if special_ids is None else tuple(sorted(special_ids.items()))


@functools.lru_cache(maxsize=4)
def load_tokenizer(path: str, special_ids: SpecialIdsKey = None, special_tokens: str = "frame") -> TextTokenizer:
    """The tokenizer file `path`; `special_ids` (special_ids_key of TextTokenizer.special_ids): the ids its
    special tokens were given (a checkpoint's tokenizer), None: found by name; `special_tokens`: how it frames."""
    return TextTokenizer(Tokenizer.from_file(path), source=path,
                         special_ids=None if special_ids is None else dict(special_ids), special_tokens=special_tokens)
