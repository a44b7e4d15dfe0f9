"""Training the rewriter (uedp.rewriting.model) on PUBLIC text: the clv model from scratch (`train_rewriter`), its
pruning (`prune_rewriter`, DP-BART-PR), further training with the target epsilon's noise (pr+) or with the encoder
output norm-clipped to a bound chosen on public text (`public_norm_bound`, adept). docs/dp-bart-system.md states
what each variant is; uedp.rewriting.store.load_rewriter trains each variant once and caches it.

Training always feeds the decoder clamp(z) to [-C, C] with pruned coordinates 0 (and for "pr+", plus the
mechanism's noise: `ClvMechanism.privatize` in the forward pass, a straight-through estimator carrying the clamp's
gradient). The noise used in training is on public text: it protects nothing and may be seeded. An "adept" rewriter
is fed each document's z norm-clipped to its `norm_bound` instead (`Rewriter.clip_tensor`).
"""

from __future__ import annotations

import copy
import hashlib
import math
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from uedp.errors import ConfigError
from uedp.rewriting.mechanism import LocalMechanism
from uedp.rewriting.model import (
    BATCH,
    Codec,
    Rewriter,
    RewriterConfig,
    RewriterNet,
    normalize_texts,
    reconstruction_bleu,
)


def say(progress: bool, message: str) -> None:
    """Print a progress line of rewriter training to stderr, if `progress`."""
    if progress:
        print(f"[rewriter] {message}", file=sys.stderr, flush=True)


def train_rewriter(sentences: Sequence[str], config: RewriterConfig, *, valid: Sequence[str] | None = None,
                   init: Rewriter | None = None, kept: Sequence[int] | np.ndarray | None = None,
                   mechanism: LocalMechanism | None = None, steps: int | None = None, variant: str = "clv",
                   public: str | None = None, public_key: str | None = None, progress: bool = True,
                   norm_bound: float | None = None) -> Rewriter:
    """Train a rewriter on `sentences` (public text): from scratch (a BPE tokenizer trained on them, fresh weights)
    or, with `init`, a copy of `init` trained further. `kept`: released coordinates (None: all, or init's); the
    others are 0 for the decoder. `mechanism`: add its noise in the forward pass (pr+; it must match the rewriter).
    `steps` defaults to config.steps. Validation BLEU on `valid` (default: the sentences themselves, at most
    config.valid_sentences) is reported every config.eval_every steps. `norm_bound` (variant "adept"): the decoder is
    fed the norm-clipped z (`Rewriter.clip_tensor`) in place of the value-clamped one. All training in this module
    goes through this function."""
    from uedp.tokenization import TokenizerTraining, train_tokenizer

    train = normalize_texts(sentences)
    if len(train) < 2:
        raise ConfigError(f"train_rewriter needs at least 2 sentences, got {len(train)}")
    valid = normalize_texts(valid) if valid is not None else train[: config.valid_sentences]
    steps = config.steps if steps is None else steps
    if public_key is None:
        public_key = hashlib.blake2b("\n".join(train).encode(), digest_size=12).hexdigest()
    started = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed + 7919 * len(init.log if init is not None else ()))
        if init is None:
            bpe = train_tokenizer(train, TokenizerTraining(vocab_size=config.vocab_size))
            codec = Codec(config, bpe)
            net = RewriterNet(config, bpe.vocab_size, bpe.pad_id)
            log: list[dict[str, Any]] = []
        else:
            config, codec, net, log = init.config, init.codec, copy.deepcopy(init.net), list(init.log)
        if init is not None:
            public, public_key = init.public, init.public_key
            kept = init.kept if kept is None else kept
        rw = Rewriter(config=config, net=net, codec=codec, kept=kept, public=public or f"{len(train)} given sentences",
                      public_key=public_key, variant=variant, epsilon=None if mechanism is None else mechanism.epsilon,
                      delta=None if mechanism is None else mechanism.delta,
                      noise=None if mechanism is None else mechanism.noise, log=log, norm_bound=norm_bound)
        if mechanism is not None:
            rw.check_mechanism(mechanism)
        stage = {"variant": variant, "steps": steps, "kept": rw.dim if rw.kept is None else len(rw.kept),
                 "epsilon": rw.epsilon, "evals": []}
        _fit(rw, train, valid, steps=steps, mechanism=mechanism, stage=stage, progress=progress)
    stage["seconds"] = round(time.perf_counter() - started, 1)
    rw.log.append(stage)
    rw.net.eval()
    return rw


def _fit(rw: Rewriter, train: list[str], valid: list[str], *, steps: int, mechanism: LocalMechanism | None,
         stage: dict[str, Any], progress: bool) -> None:
    config, net, codec = rw.config, rw.net, rw.codec
    ids, mask, windows, contents = codec.inputs(train)
    targets = codec.targets(windows, contents)
    z_fixed = None
    if config.kind == "minilm":  # frozen encoder: its clamped output once per sentence list, in float16 (raw for
        # adept, whose norm clip needs the whole vector)
        bound = math.inf if rw.norm_bound is not None else config.clip
        key = hashlib.blake2b("\n".join(train).encode(), digest_size=12).hexdigest() + f"/{bound}"
        if codec.memo[0] != key:
            chunks = [net.encode(ids[s : s + BATCH], mask[s : s + BATCH]).clamp(-bound, bound).half()
                      for s in range(0, len(ids), BATCH)]
            codec.memo = (key, torch.cat(chunks))
        z_fixed = codec.memo[1]
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.01)
    warmup = max(1, min(100, steps // 10))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * max(0.05, 0.5 * (1 + math.cos(math.pi * s / steps))))
    noise_rng = np.random.default_rng([config.seed, len(rw.log)])  # public text: seeding is fine
    order = torch.randperm(len(train))
    pos, pad, label = 0, codec.bpe.pad_id, f"{config.kind} {stage['variant']}"
    mask_id = codec.source.backend.token_to_id("[MASK]")
    word_mask_id = codec.bpe.backend.token_to_id("[MASK]")
    losses: list[float] = []
    net.train()
    for step in range(1, steps + 1):
        if pos + config.batch_size > len(order):
            order, pos = torch.randperm(len(train)), 0
        idx = order[pos : pos + config.batch_size]
        pos += config.batch_size
        if z_fixed is not None:
            z = z_fixed[idx].float()
        else:
            inp = ids[idx]
            if config.mask_prob > 0 and mask_id is not None:
                content = mask[idx].bool() & (inp != codec.source.eos_id)
                inp = torch.where(content & (torch.rand(inp.shape) < config.mask_prob), mask_id, inp)
            z = net.encode(inp, mask[idx])
        z = rw.clip_tensor(z)
        if mechanism is not None:  # straight-through: the value is privatize(z), the gradient the clamp's
            noised = torch.from_numpy(mechanism.privatize(z.detach().numpy(), noise_rng)).float()
            z = z + (noised - z.detach())
        tgt = targets[idx]
        tgt = tgt[:, : int((tgt != pad).sum(1).max())]
        dec_in = tgt[:, :-1]
        if config.word_dropout > 0:
            hide = (torch.rand(dec_in.shape) < config.word_dropout) & (dec_in != pad) & (dec_in != codec.bpe.bos_id)
            dec_in = torch.where(hide, word_mask_id, dec_in)
        logits = net.logits(z, dec_in, use_cache=False)
        labels = tgt[:, 1:].masked_fill(tgt[:, 1:] == pad, -100)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if step % config.eval_every == 0 or step == steps:
            net.eval()
            entry = {"step": step, "loss": round(float(np.mean(losses[-config.eval_every :])), 4),
                     "bleu": round(reconstruction_bleu(rw, valid), 2)}
            if mechanism is not None:
                entry["noisy_bleu"] = round(reconstruction_bleu(rw, valid, mechanism=mechanism,
                                                                rng=np.random.default_rng(config.seed)), 2)
            stage["evals"].append(entry)
            noisy = f", noised BLEU {entry['noisy_bleu']:.1f}" if mechanism is not None else ""
            say(progress, f"{label} step {step}/{steps} loss {entry['loss']:.3f} valid BLEU {entry['bleu']:.1f}"
                          f"{noisy}")
            net.train()


def prune_rewriter(base: Rewriter, sentences: Sequence[str], valid: Sequence[str], *,
                   progress: bool = True) -> Rewriter:
    """DP-BART-PR on a TRAINED rewriter: score the coordinates still kept by the L1 norm of their column in the first
    decoder layer's cross-attention key projection, prune those below the config.prune_quantile quantile, retrain
    (clip, no noise; config.prune_steps), and repeat (at most config.prune_rounds times) while the no-noise validation
    BLEU stays >= the unpruned model's minus config.prune_tolerance. Returns the last model within tolerance (the
    base model itself, relabelled "pr", if even the first pruning falls outside it)."""
    config = base.config
    floor = reconstruction_bleu(base, valid) - config.prune_tolerance
    current = base
    kept = np.arange(base.dim) if base.kept is None else base.kept.copy()
    rejected = None
    for round_ in range(1, config.prune_rounds + 1):
        scores = current.net.cross_key_weight().detach().abs().sum(dim=0).numpy()[kept]
        new_kept = kept[scores >= np.quantile(scores, config.prune_quantile)]
        if len(new_kept) == len(kept):  # ties: drop the lowest-scored one at least
            new_kept = np.delete(kept, int(np.argmin(scores)))
        if len(new_kept) == 0:
            break
        candidate = train_rewriter(sentences, config, valid=valid, init=current, kept=new_kept,
                                   steps=config.prune_steps, variant="pr", progress=progress)
        bleu = reconstruction_bleu(candidate, valid)
        ok = bleu >= floor
        say(progress, f"prune round {round_}: d' {len(kept)} -> {len(new_kept)}, valid BLEU {bleu:.1f} "
                      f"({'within' if ok else 'beyond'} tolerance: floor {floor:.1f})")
        if not ok:
            rejected = {"variant": "pr", "rejected_kept": len(new_kept), "bleu": round(bleu, 2),
                        "seconds": candidate.log[-1]["seconds"]}
            break
        current, kept = candidate, new_kept
    return Rewriter(config=config, net=current.net, codec=current.codec, kept=current.kept, public=current.public,
                    public_key=current.public_key, variant="pr", log=current.log + ([rejected] if rejected else []))


def public_norm_bound(rewriter: Rewriter, texts: Sequence[str], quantile: float) -> float:
    """The `quantile` quantile of the L2 norms of `rewriter`'s raw encoder outputs (flattened l * d) on `texts`,
    which must be PUBLIC: the adept norm bound C is chosen from them, outside any privacy accounting."""
    norms = np.linalg.norm(rewriter.encode(texts).reshape(len(texts), -1).astype(np.float64), axis=1)
    return float(np.quantile(norms, quantile))
