"""Models: one interface (`UedpModel`: `model(batch) -> logits`) over LSTM and Hugging Face families.

    from uedp.models import build_model_and_tokenizer
    model, tok = build_model_and_tokenizer("lstm", task="next_word", corpus=corpus)

See `uedp.models.base` for the interface and exchange format, `uedp.models.registry` for the names.
"""

from uedp.models.base import (
    CLASSIFICATION,
    NEXT_WORD,
    UedpModel,
    get_weights,
    set_weights,
    trainable_parameters,
)
from uedp.models.registry import (
    MODELS,
    build_model,
    build_model_and_tokenizer,
    build_tokenizer,
    model_names,
)

__all__ = [
    "CLASSIFICATION",
    "MODELS",
    "NEXT_WORD",
    "UedpModel",
    "build_model",
    "build_model_and_tokenizer",
    "build_tokenizer",
    "get_weights",
    "model_names",
    "set_weights",
    "trainable_parameters",
]
