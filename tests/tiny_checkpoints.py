"""Tiny Hugging Face checkpoints for the bring-your-own-model tests: a byte-level BPE tokenizer trained on a few
public sentences (saved as a PreTrainedTokenizerFast) and a 1-layer model of width 16, saved with save_pretrained
into a directory; no hub."""

from __future__ import annotations

from pathlib import Path

PUBLIC = ["The bus was late this morning.", "A long walk by the sea.", "Dinner with friends tonight.",
          "The library closes at six.", "Write to the office about the tickets.", "It rained all afternoon."]
# each kind: its special tokens (the first is the end-of-text or padding one), and the tokenizer's roles
SPECIALS = {
    "gpt2": (["<|endoftext|>"], {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                                 "unk_token": "<|endoftext|>"}),
    "llama": (["<unk>", "<s>", "</s>"], {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
    "bert": (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], {"pad_token": "[PAD]", "unk_token": "[UNK]",
                                                               "cls_token": "[CLS]", "sep_token": "[SEP]",
                                                               "mask_token": "[MASK]"}),
}


def tiny_tokenizer(kind: str, vocab_size: int = 300, texts: list[str] | None = None):
    """A byte-level BPE tokenizer (any text encodes) with `kind`'s special tokens, as a PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials, roles = SPECIALS[kind]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts or PUBLIC, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, **roles)


def tiny_checkpoint(directory: Path, kind: str, *, seed: int = 0, tokenizer_texts: list[str] | None = None) -> Path:
    """A tiny `kind` checkpoint (gpt2: GPT2LMHeadModel; llama: LlamaForCausalLM, untied head; bert:
    BertForPreTraining, encoder with pooler and MLM/NSP heads) and its tokenizer, saved into `directory`."""
    import torch
    from transformers import (
        BertConfig,
        BertForPreTraining,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
    )

    tokenizer = tiny_tokenizer(kind, texts=tokenizer_texts)
    vocab = len(tokenizer)
    torch.manual_seed(seed)
    if kind == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=64, n_embd=16, n_layer=1, n_head=2,
                                           bos_token_id=0, eos_token_id=0))
    elif kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32,
                                             num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                             max_position_embeddings=64, bos_token_id=1, eos_token_id=2,
                                             tie_word_embeddings=False))
    else:
        model = BertForPreTraining(BertConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=1,
                                              num_attention_heads=2, intermediate_size=32,
                                              max_position_embeddings=64, pad_token_id=0))
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return Path(directory)
