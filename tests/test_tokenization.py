"""Tokenizers: exact round trips, training on the train split only (the private-split tokenizer,
`tokenizer.source=private_split`), caching keyed by corpus + config, framing/padding/truncation, and
length bucketing. The default, public tokenizer: tests/test_public_tokenizer.py."""

from __future__ import annotations

import string

import pytest

import uedp.tokenization as tokmod
from uedp.data.corpus import CorpusBuilder
from uedp.errors import ConfigError
from uedp.models.hf import minilm_dir
from uedp.tokenization import (
    TokenizerTraining,
    get_tokenizer,
    load_pretrained_tokenizer,
    pad_sequences,
    tokenizer_cache_path,
    train_tokenizer,
)

TRAIN = [
    "The quick brown fox jumps over the lazy dog.",
    "Alice met Bob in Paris on 3 May 2021, at 10:30am.",
    "Write to alice.smith@example.com or call +1 (555) 010-9999!",
    "Prices rose 4.5% to $1,234.56; analysts (mostly) agreed.",
    "Don't panic -- it's fine? Yes: #tags, @users & [brackets] {x} <y> ~z `q` ^ | \\ / = * _",
    string.ascii_letters + " " + string.digits,
] * 20

ROUND_TRIPS = [
    "Hello, world!",
    "Email jane.doe+news@example.co.uk before 11:45pm.",
    "Revenue was $98,765.43 in Q3 2022 (up 7%).",
    "Don't split me; it's a test -- right?",
    "Zebras 0123456789 yak {brace} [square] <angle> #hash @at",
]


def make_corpus(extra: dict[str, list[str]] | None = None, name: str = "tok"):
    b = CorpusBuilder(name)
    for i, text in enumerate(TRAIN):
        b.add(f"user{i % 7}", text, split="train")
    for split, texts in (extra or {}).items():
        for i, text in enumerate(texts):
            b.add(f"user{i % 3}", text, split=split)
    return b.build(seed=0)


@pytest.mark.parametrize("kind", ["bpe", "wordpiece"])
def test_round_trip_is_exact_for_normalized_text(kind: str) -> None:
    tok = train_tokenizer(TRAIN, TokenizerTraining(kind=kind, vocab_size=600))
    for text in ROUND_TRIPS:
        ids = tok.encode(text)
        assert tok.unk_id not in ids, (kind, text)
        assert tok.decode(ids) == text, (kind, text)
    # Whitespace is normalized (runs -> one space, stripped) before encoding.
    assert tok.decode(tok.encode("  two   spaces\there \n")) == "two spaces here"
    # Special tokens added by encode_batch never come back in decoded text.
    batch = tok.encode_batch([ROUND_TRIPS[0]], max_len=64, mode="lm")
    assert tok.decode(batch.input_ids[0].tolist()) == ROUND_TRIPS[0]


def test_byte_level_bpe_round_trips_unseen_unicode() -> None:
    tok = train_tokenizer(TRAIN, TokenizerTraining(kind="bpe", vocab_size=600))
    text = "Ünïcödé café — “quotes” 日本語 🙂"
    assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize("kind", ["bpe", "wordpiece"])
def test_vocabulary_comes_from_the_train_split_only(kind: str, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("UEDP_CACHE_DIR", str(tmp_path))
    word = "Quetzalcoatlus"
    held_out = [f"A {word} flew over {word} today." for _ in range(50)]
    cfg = TokenizerTraining(kind=kind, vocab_size=2000)

    def word_pieces(tok) -> int:
        return len(tok.backend.encode(f"a {word}", add_special_tokens=False).tokens) - 1

    leaked = make_corpus({"valid": held_out[:25], "test": held_out[25:]}, name="heldout")
    tok = get_tokenizer(leaked, cfg)
    assert word_pieces(tok) > 1
    # Control: the same sentences in the train split make the word a single token, so the check can fail.
    control = make_corpus({"train": held_out}, name="control")
    assert word_pieces(get_tokenizer(control, cfg)) == 1


def test_tokenizer_is_cached_and_keyed_by_corpus_and_config(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("UEDP_CACHE_DIR", str(tmp_path))
    corpus = make_corpus({"test": ["held out sentence"]})
    cfg = TokenizerTraining(vocab_size=800)

    trained = []
    real_train = tokmod.train_tokenizer

    def counting_train(*args, **kwargs):
        trained.append(args)
        return real_train(*args, **kwargs)

    monkeypatch.setattr(tokmod, "train_tokenizer", counting_train)
    first = get_tokenizer(corpus, cfg)
    path = tokenizer_cache_path(corpus, cfg)
    assert first.source == "trained" and path.is_file() and len(trained) == 1
    assert path.parent == tmp_path / "tokenizers" and path.name.startswith(corpus.fingerprint())

    def no_training(*args, **kwargs):
        raise AssertionError("the tokenizer was trained again instead of loaded from the cache")

    monkeypatch.setattr(tokmod, "train_tokenizer", no_training)  # (train vs load times: experiments.benchmark)
    second = get_tokenizer(corpus, cfg)
    assert second.source == "cache"
    assert second.get_vocab() == first.get_vocab()
    assert second.encode(ROUND_TRIPS[1]) == first.encode(ROUND_TRIPS[1])

    # Another config or another corpus content is another cache entry (so it must be trained).
    other_cfg = TokenizerTraining(vocab_size=900)
    other_corpus = make_corpus({"test": ["a different held out sentence"]})
    assert tokenizer_cache_path(corpus, other_cfg) != path
    assert tokenizer_cache_path(other_corpus, cfg) != path
    for c, k in ((corpus, other_cfg), (other_corpus, cfg)):
        with pytest.raises(AssertionError, match="trained again"):
            get_tokenizer(c, k)


def test_special_tokens_framing_padding_and_truncation() -> None:
    tok = train_tokenizer(TRAIN, TokenizerTraining(vocab_size=600))
    assert tok.pad_id == 0 and len({tok.pad_id, tok.bos_id, tok.eos_id, tok.cls_id, tok.sep_id}) == 5
    short, long = "Hello, world!", "The quick brown fox jumps over the lazy dog. " * 3
    ids_short, ids_long = tok.encode(short), tok.encode(long)
    max_len = len(ids_short) + 4
    assert len(ids_long) > max_len

    lm = tok.encode_batch([short, long], max_len=max_len, mode="lm", labels=[1, 0])
    assert lm.input_ids.shape == (2, max_len)
    row0 = [tok.bos_id, *ids_short, tok.eos_id]
    assert lm.input_ids[0].tolist() == row0 + [tok.pad_id] * 2
    assert lm.attention_mask[0].tolist() == [1] * len(row0) + [0, 0]
    assert lm.lengths.tolist() == [len(row0), max_len]
    assert lm.input_ids[1].tolist() == [tok.bos_id, *ids_long][:max_len]  # cut short: loses [EOS]
    assert lm.labels.tolist() == [1, 0]

    cls = tok.encode_batch([long], max_len=6, mode="cls")
    assert cls.input_ids[0].tolist() == [tok.cls_id, *ids_long[:4], tok.sep_id]  # [SEP] kept
    with pytest.raises(ConfigError):
        tok.encode_batch([short], max_len=1)
    with pytest.raises(ConfigError):
        tok.encode_batch([short], max_len=8, mode="mlm")  # type: ignore[arg-type]


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="kind"):
        TokenizerTraining(kind="unigram")
    with pytest.raises(ConfigError, match="vocab_size"):
        TokenizerTraining(vocab_size=10)


def test_pad_sequences_refuses_an_empty_sequence() -> None:
    with pytest.raises(ValueError, match="empty"):
        pad_sequences([[1], []], pad_id=0)


def test_pretrained_minilm_tokenizer() -> None:
    tok = load_pretrained_tokenizer(minilm_dir())
    assert (tok.vocab_size, tok.pad_id, tok.cls_id, tok.sep_id) == (30522, 0, 101, 102)
    batch = tok.encode_batch(["Hello world", "Hi"], max_len=16, mode="cls")
    assert batch.input_ids[1].tolist() == [101, 7632, 102, 0]  # no padding to 128 from tokenizer.json
    assert tok.decode(batch.input_ids[0].tolist()) == "hello world"


def test_concurrent_trainers_end_up_with_the_first_cached_file(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("UEDP_CACHE_DIR", str(tmp_path))
    corpus = make_corpus(name="race")
    cfg = TokenizerTraining(vocab_size=700)
    winner = train_tokenizer(ROUND_TRIPS * 3, cfg)  # another vocabulary, written "by another process"
    real_train = tokmod.train_tokenizer

    def train_while_another_process_saves(texts, config):
        tok = real_train(texts, config)
        assert winner.save(tokenizer_cache_path(corpus, cfg), exclusive=True)
        return tok

    monkeypatch.setattr(tokmod, "train_tokenizer", train_while_another_process_saves)
    got = get_tokenizer(corpus, cfg)
    assert winner.get_vocab() != real_train(TRAIN, cfg).get_vocab()
    assert got.source == "cache" and got.get_vocab() == winner.get_vocab()
    assert not got.save(tokenizer_cache_path(corpus, cfg), exclusive=True)
    assert not list(tmp_path.glob("tokenizers/*.tmp"))
