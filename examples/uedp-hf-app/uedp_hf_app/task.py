"""The app's model and data: a Hugging Face causal LM from a local directory (optionally with LoRA adapters),
a node's sentences, weighted local training and central evaluation. Nothing here knows about UeDP but the
sentence weights it trains with."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


@functools.lru_cache(maxsize=2)
def load_model(model_dir: str, lora_r: int = 0, lora_alpha: float = 16.0) -> tuple[torch.nn.Module, object]:
    """The checkpoint and its tokenizer, from a local directory (offline: no hub), loaded once per process (a
    round loads the global arrays into it). `lora_r` > 0: LoRA adapters of that rank on peft's default modules
    for the architecture, and only they are trainable (so only they travel); the base stays frozen."""
    if not model_dir or not Path(model_dir).is_dir():
        raise ValueError(f"model-dir {model_dir!r}: a local Hugging Face checkpoint directory is needed")
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    if lora_r > 0:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=lora_r, lora_alpha=lora_alpha, task_type="CAUSAL_LM"))
    return model, tokenizer


def trainable(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The arrays that travel: the trainable parameters, by name."""
    return {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}


@functools.lru_cache(maxsize=64)
def user_texts(data_path: str, index: int) -> tuple[str, tuple[str, ...]]:
    """(user name, texts) of the `index`-th user of a JSONL file (users in order of first appearance)."""
    users: dict[str, list[str]] = {}
    for number, line in enumerate(Path(data_path).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
                users.setdefault(str(row["user"]), []).append(str(row["text"]))
            except (ValueError, KeyError) as exc:
                raise ValueError(f"{data_path}, line {number}: not a {{user, text}} row ({exc})") from None
    name = list(users)[index]
    return name, tuple(users[name])


def sentence_losses(model: torch.nn.Module, tokenizer, texts: list[str], max_len: int) -> torch.Tensor:
    """The mean next-token loss of each text."""
    batch = tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=max_len)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    targets = batch["input_ids"][:, 1:]
    mask = batch["attention_mask"][:, 1:].float()
    token = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), targets, reduction="none")
    return (token * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def train(model: torch.nn.Module, tokenizer, texts: list[str], weights: list[float], *, lr: float, epochs: int,
          max_len: int, batch_size: int = 8) -> None:
    """Local SGD on `texts`, each sentence's loss weighted (a weighted mean per batch)."""
    if not texts:
        return
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    for _ in range(epochs):
        for start in range(0, len(texts), batch_size):
            w = torch.tensor(weights[start:start + batch_size], dtype=torch.float32)
            loss = (sentence_losses(model, tokenizer, texts[start:start + batch_size], max_len) * w).sum() / w.sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


@torch.no_grad()
def perplexity(model: torch.nn.Module, tokenizer, texts: list[str], max_len: int) -> float:
    model.eval()
    losses = sentence_losses(model, tokenizer, texts, max_len)
    return math.exp(float(losses.mean()))
