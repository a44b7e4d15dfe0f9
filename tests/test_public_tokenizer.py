"""The default tokenizer is trained on a public corpus (docs/audit.md, "The tokenizer trained on the private split
leaks"): its vocabulary does not depend on the
private users' text, any text encodes without an unknown token, it is cached by the public corpus and the
config, and the private-split tokenizer stays available but makes a run report `private: false`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import tiny_config
from uedp.config import RunConfig
from uedp.data.loaders import dataset_facts, dataset_names, materialize
from uedp.data.synthetic import PUBLIC_SEED
from uedp.errors import ConfigError
from uedp.pipeline import load_tokenizer, prepare, run_tokenizer
from uedp.tokenization import (
    PRIVATE_SPLIT_WARNING,
    TokenizerTraining,
    get_public_tokenizer,
    public_corpus,
    public_tokenizer_cache_path,
    resolve_public_corpus,
)

TEXTS = [
    "Ünïcödé café — “quotes” 日本語 🙂 Ærøskøbing, Łódź, São Paulo, Zürich",
    "Write to jane.doe+news@example.co.uk or j_smith42@mail.example.org before 11:45pm.",
    "Card 4111 1111 1111 1111, IBAN GB82 WEST 1234 5698 7654 32, phone +44 (0)20 7946 0958.",
    "0123456789 9876543210 3.14159 1,234,567.89 -42 1e-5 #tag @user ~ ` ^ | \\ { } < >",
    "Quetzalcoatlus Xylophagous zyzzyva: words no corpus has.",
]


def _tiny(tmp_path: Path, name: str, *, options: dict | None = None, **groups) -> RunConfig:
    opts = {"num_users": 8, "min_sentences": 20, "max_sentences": 30, **(options or {})}
    return tiny_config(tmp_path / name, dataset={"options": opts}, **groups)


def test_default_vocabulary_does_not_depend_on_the_private_corpus(tmp_path):
    """Two private corpora (other seed, other canaries) give the byte-identical tokenizer file, named as
    trained on the public synthetic personas, and a canary planted in 8 users does not become a token;
    the private-split tokenizer of the same corpus does learn it (so the check can fail)."""
    canaries = {"canary_users": [8, 8, 8]}
    cfgs = [_tiny(tmp_path, "a", tokenizer={"vocab_size": 2000}),
            _tiny(tmp_path, "b", options={"seed": 7, **canaries}, tokenizer={"vocab_size": 2000})]
    manifests = [prepare(c) for c in cfgs]
    files = [Path(m.tokenizer).read_bytes() for m in manifests]
    assert files[0] == files[1]
    info = manifests[1].tokenizer_info
    assert info == {"source": "public", "corpus": f"synthetic-public(seed={PUBLIC_SEED}, users=200)",
                    "vocab_size": 2000, "kind": "bpe"}

    _, corpus = materialize("synthetic", **cfgs[1].dataset.option_dict())
    public = load_tokenizer(manifests[1].tokenizer)
    private_cfg = _tiny(tmp_path, "c", options={"seed": 7, **canaries},
                        tokenizer={"vocab_size": 2000, "source": "private_split"})
    private = load_tokenizer(prepare(private_cfg).tokenizer)
    for canary in corpus.meta["canaries"]:
        first, second = canary["secret"].split("-")
        assert not {f"Ġ{first}", second} & set(public.get_vocab())  # the secret's halves are no tokens
        assert {f"Ġ{first}", second} <= set(private.get_vocab())  # they are, trained on the private split
        assert len(private.encode(canary["text"])) < len(public.encode(canary["text"]))


@pytest.mark.parametrize("name", ["synthetic", "shakespeare", "bbc_news"])
def test_any_text_encodes_without_unknown_tokens(name):
    tok = get_public_tokenizer(name, TokenizerTraining(vocab_size=500))
    for text in TEXTS:
        ids = tok.encode(text)
        assert tok.unk_id not in ids and tok.decode(ids) == text, (name, text)


def test_public_tokenizer_is_cached_by_public_corpus_and_config(tmp_path, monkeypatch):
    import uedp.tokenization as tokmod

    monkeypatch.setenv("UEDP_CACHE_DIR", str(tmp_path / "cache"))
    cfg = TokenizerTraining(vocab_size=400)
    first = get_public_tokenizer("synthetic", cfg)
    path = public_tokenizer_cache_path(public_corpus("synthetic"), cfg)
    assert path.is_file() and path.name.startswith("public-synthetic-")

    def no_training(*args, **kwargs):
        raise AssertionError("trained again instead of loaded from the cache")

    monkeypatch.setattr(tokmod, "train_tokenizer", no_training)
    again = get_public_tokenizer("synthetic", cfg)
    assert again.source == "cache" and again.get_vocab() == first.get_vocab()
    assert public_tokenizer_cache_path(public_corpus("synthetic"), TokenizerTraining(vocab_size=500)) != path
    assert public_tokenizer_cache_path(public_corpus("bbc_news"), cfg) != path

    # a public text file: keyed by its content, not its name
    text = tmp_path / "public.txt"
    text.write_text("some public text\nmore public text\n")
    key = public_corpus(str(text)).key
    assert key.startswith("file-") and public_corpus(str(text)).texts() == ["some public text", "more public text"]
    text.write_text("other public text\n")
    assert public_corpus(str(text)).key != key
    with pytest.raises(ConfigError, match="public_corpus"):
        public_corpus(str(tmp_path / "missing.txt"))


def test_auto_public_corpus_is_never_the_private_one():
    assert resolve_public_corpus("auto", "synthetic") == "synthetic"  # other personas (another seed)
    assert resolve_public_corpus("auto", "shakespeare") == "bbc_news"
    assert resolve_public_corpus("auto", "bbc_news") == "shakespeare"
    assert resolve_public_corpus("auto", "jsonl") == "synthetic"
    assert resolve_public_corpus("shakespeare", "synthetic") == "shakespeare"
    import uedp.audit  # noqa: F401 - registers audit_synthetic

    auto = {name: dataset_facts(name).public_corpus for name in dataset_names()}
    assert all(public != private for private, public in auto.items() if private != "synthetic")
    assert auto["audit_synthetic"] == "synthetic"


def test_bad_tokenizer_settings_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="tokenizer.source"):
        RunConfig.from_flat({"tokenizer.source": "users"})
    with pytest.raises(ConfigError, match="public_corpus"):
        prepare(_tiny(tmp_path, "x", tokenizer={"public_corpus": str(tmp_path / "nope.txt")}))
    with pytest.raises(ConfigError, match="public tokenizer corpus's seed"):  # its personas would be the users'
        prepare(_tiny(tmp_path, "y", options={"seed": PUBLIC_SEED}))


def test_pretrained_models_keep_their_own_tokenizer(tmp_path):
    cfg = tiny_config(tmp_path, model={"name": "minilm", "options": {}}, task={"name": "classification"})
    _, corpus = materialize(cfg.dataset.name, **cfg.dataset.option_dict())
    tok, info = run_tokenizer(cfg, corpus)
    assert info["source"] == "pretrained" and info["vocab_size"] == tok.vocab_size == 30522


def test_summary_says_what_the_tokenizer_was_trained_on(tmp_path):
    """The default run is private and names its public corpus; tokenizer.source=private_split runs (it is
    refused nowhere) but reports private: false with the reason."""
    from runtime.local_grid import run_local

    public = run_local(_tiny(tmp_path, "public", federation={"rounds": 1}))
    assert public["private"] and public["warning"] is None
    assert public["tokenizer"]["source"] == "public" and public["tokenizer"]["corpus"].startswith("synthetic-public")

    cfg = _tiny(tmp_path, "split", tokenizer={"source": "private_split"}, federation={"rounds": 1})
    split = run_local(cfg)
    assert not split["private"] and split["warning"] == PRIVATE_SPLIT_WARNING
    assert split["tokenizer"] == {"source": "private_split", "corpus": "synthetic training split (the users' text)",
                                  "vocab_size": 300, "kind": "bpe"}
    saved = json.loads((Path(cfg.federation.out_dir) / "summary.json").read_text())
    assert saved["tokenizer"] == split["tokenizer"] and saved["private"] is False

    fixed = run_local(_tiny(tmp_path, "fixed", tokenizer={"source": "private_split"}, federation={"rounds": 1},
                            privacy={"seed": 3}))
    assert fixed["warning"] == f"not private: fixed seed; {PRIVATE_SPLIT_WARNING}"
