"""The classification default: the frozen MiniLM sentence embedding with a linear head.

- `task=classification` picks it in Hydra unless a model is named; next-word keeps the LSTM.
- Only the head is trained and exchanged, and each sentence is encoded once (the embedding cache).
- A bring-your-own JSONL corpus with ONE label per owner learns with the defaults of `dataset=jsonl
  task=classification`: noiseless training ends clearly below the majority-class error (the LSTM default
  stayed at the constant predictor on such data).
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
import torch

from tests.helpers import compose_run_config as _compose
from uedp.config import CLASSIFICATION_MODEL, RunConfig
from uedp.errors import ConfigError
from uedp.models.base import get_weights
from uedp.tokenization import Batch


def test_classification_defaults_to_the_sentence_encoder_and_a_named_model_wins():
    cls = _compose(["task=classification"])
    assert cls.model == CLASSIFICATION_MODEL
    assert cls.model.option_dict() == {"freeze_encoder": True, "pooling": "mean", "scale": 10}
    assert _compose(["task=classification", "model=lstm"]).model == RunConfig().model
    assert _compose(["task=classification", "model=minilm"]).model.option_dict() == {"freeze_encoder": True}
    assert _compose([]).model == RunConfig().model  # next_word: the LSTM, unchanged


@pytest.fixture(scope="module")
def head_model():
    from uedp.models.registry import build_model

    return build_model("minilm", task="classification", vocab_size=30522, pad_id=0, num_labels=3,
                       **CLASSIFICATION_MODEL.option_dict())


def _batch(rows: list[list[int]]) -> Batch:
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return Batch(input_ids=ids, attention_mask=mask)


def test_only_the_head_is_exchanged_and_each_sentence_is_encoded_once(head_model, monkeypatch):
    assert [w.shape for w in get_weights(head_model)] == [(3, 384), (3,)]
    encoded = []
    real = head_model._encode
    monkeypatch.setattr(head_model, "_encode", lambda ids, mask: encoded.append(len(ids)) or real(ids, mask))
    head_model._cache.clear()
    a = _batch([[101, 2023, 2003, 102], [101, 7592, 102]])
    first = head_model(a)
    again = head_model(_batch([[101, 7592, 102], [101, 2023, 2003, 102], [101, 2000, 102]]))
    assert encoded == [2, 1] and len(head_model._cache) == 3  # the second batch encodes only its new sentence
    # the same cached float32 embeddings through the same head: allclose's defaults (rtol 1e-5, atol 1e-8)
    assert torch.allclose(first[0], again[1]) and torch.allclose(first[1], again[0])
    # the cached embedding is the encoder's, computed without the cache
    uncached = head_model.head(head_model.scale * real(a.input_ids, a.attention_mask))
    # the same float32 encodings through another sequence of operations: float32 rounding, atol 1e-5
    assert torch.allclose(first, uncached, atol=1e-5)
    # padding does not change a sentence's embedding (the key is the unpadded ids)
    padded = _batch([[101, 7592, 102], [101, 2023, 2003, 2003, 2003, 102]])  # row 0 padded to 6
    assert torch.allclose(head_model(padded)[0], first[1])


def test_bad_minilm_options_are_config_errors():
    from uedp.models.hf import build_minilm

    with pytest.raises(ConfigError, match="pooling"):
        build_minilm(vocab_size=10, pad_id=0, num_labels=2, pooling="max")
    with pytest.raises(ConfigError, match="scale"):
        build_minilm(vocab_size=10, pad_id=0, num_labels=2, scale=2.0)


def one_label_per_owner_corpus(path: Path, users: int = 48) -> float:
    """A JSONL corpus built from the synthetic generator where every owner keeps only the sentences of its
    most frequent topic (one label per owner, as BBC News or a per-author corpus: experiments.owner_files
    --one-label-per-owner), without hand-labelled entities; returns the majority-class error of its test
    split."""
    from uedp.owner_files import write_one_file

    write_one_file(path, dataset="synthetic", options={"num_users": users, "seed": 7},
                   splits=("train", "valid", "test"), one_label=True, entities=False)
    test_labels = [r["label"] for r in map(json.loads, path.read_text().splitlines()) if r["split"] == "test"]
    return 1.0 - collections.Counter(test_labels).most_common(1)[0][1] / len(test_labels)


@pytest.mark.e2e  # ~20-40 s: in the full tier, to keep the fast tier under 8 minutes
def test_one_label_per_owner_jsonl_learns_with_the_defaults(tmp_path):
    from runtime.local_grid import run_local

    corpus = tmp_path / "owners.jsonl"
    majority_error = one_label_per_owner_corpus(corpus)
    cfg = _compose(["dataset=jsonl", f"dataset.options.path={corpus}", "task=classification", "strategy=fedavg",
                    f"federation.out_dir={tmp_path / 'run'}"])
    summary = run_local(cfg)
    error = summary["final"]["error"]
    assert majority_error > 0.5  # 4 topics: the constant predictor is far from perfect
    assert error < majority_error - 0.25, (error, majority_error)
