"""Is a next-word model causal? One forward pass at build time says (`check_causal`).

Next-word prediction reads position t's logits as a prediction of token t+1 from tokens 0..t only. A model whose
position t also sees later tokens (bidirectional attention: a masked-LM encoder such as BERT, which
transformers' AutoModelForCausalLM loads as BertLMHeadModel with is_decoder false) would train and evaluate on
the very token it should predict. `check_causal(model, vocab_size=..., pad_id=..., where=...)` runs the model
once, in eval mode and without gradients, on a batch of two rows: a short sequence drawn with a fixed seed
(its own generator: the global random state is untouched, so a run stays bit-identical) and a copy with its
last token changed. If the logits at any earlier position differ by more than TOLERANCE relative to their
largest magnitude, the model is refused with a ConfigError naming `where`. A causal model (GPT-2, Llama, the
project's GPT-2 from scratch, the LSTM) gives identical earlier logits and passes. The model's train/eval mode
is restored.
"""

from __future__ import annotations

import torch

from uedp.errors import ConfigError
from uedp.tokenization import Batch

LENGTH = 8  # tokens of the probe sequence (fewer when the model has fewer positions)
TOLERANCE = 1e-4  # relative to the largest earlier logit's magnitude
SEED = 20_261_207  # a constant: the probe is a public choice, the same on every build


def check_causal(model: torch.nn.Module, *, vocab_size: int, pad_id: int, where: str) -> None:
    """Refuse a next-word `model` (a UedpModel: forward(Batch) -> [B, T, V]) whose earlier predictions depend
    on a later token (module docstring). `vocab_size`: ids the probe may use (the run tokenizer's); `where`
    names the model or checkpoint in the refusal."""
    positions = getattr(model, "max_positions", None)
    length = min(LENGTH, positions) if isinstance(positions, int) and positions > 0 else LENGTH
    choices = [i for i in range(min(vocab_size, 64)) if i != pad_id]
    if length < 2 or len(choices) < 2:
        return  # nothing earlier to compare, or no two distinct non-pad ids to swap
    generator = torch.Generator().manual_seed(SEED)
    picks = torch.randint(len(choices), (length,), generator=generator)
    first = torch.as_tensor(choices)[picks]
    second = first.clone()
    second[-1] = choices[(int(picks[-1]) + 1) % len(choices)]  # another token at the last position only
    ids = torch.stack([first, second])
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    batch = Batch(ids.to(device), torch.ones_like(ids, device=device))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(batch).float()
    finally:
        model.train(was_training)
    earlier = logits[:, :-1]
    difference = (earlier[0] - earlier[1]).abs().max().item()
    scale = max(earlier.abs().max().item(), 1.0)
    if not difference <= TOLERANCE * scale:  # NaN fails too
        raise ConfigError(
            f"{where}: the model is not causal (bidirectional attention): changing the last token of a "
            f"{length}-token sequence changes its logits at earlier positions (by up to {difference:.3g}), so each "
            "position would see the token it is to predict. It is unfit for task next_word: use a causal (decoder) "
            "language model, or this checkpoint with task classification")
