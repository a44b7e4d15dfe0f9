"""Tasks: per-sentence losses that ignore padding, weighted mean loss, and whole-set metrics (perplexity,
error, macro-F1) checked against hand computations and against the wrong, batch-averaged versions."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from uedp.errors import ConfigError
from uedp.models.base import CLASSIFICATION, NEXT_WORD, UedpModel
from uedp.tasks import (
    NextWordTask,
    classification_metrics,
    evaluate,
    get_task,
    per_sentence_loss,
    weighted_loss,
)
from uedp.tokenization import Batch, pad_sequences


class UniformLM(UedpModel):
    family = "uniform"

    def __init__(self, vocab_size: int) -> None:
        super().__init__(task=NEXT_WORD, pad_id=0)
        self.vocab_size = vocab_size

    def forward(self, batch: Batch) -> torch.Tensor:
        return torch.zeros(*batch.input_ids.shape, self.vocab_size)


class BigramLM(UedpModel):
    """Logits depend on the current token only: a fixed random table."""

    family = "bigram"

    def __init__(self, vocab_size: int) -> None:
        super().__init__(task=NEXT_WORD, pad_id=0)
        gen = torch.Generator().manual_seed(0)
        self.table = torch.nn.Parameter(torch.randn(vocab_size, vocab_size, generator=gen))

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.table[batch.input_ids]


class EchoClassifier(UedpModel):
    """Predicts the class written in the first token (so predictions are chosen by the test)."""

    family = "echo"

    def __init__(self, num_labels: int) -> None:
        super().__init__(task=CLASSIFICATION, pad_id=0, num_labels=num_labels)

    def forward(self, batch: Batch) -> torch.Tensor:
        return F.one_hot(batch.input_ids[:, 0], self.num_labels).float() * 5.0


def test_uniform_model_perplexity_equals_vocab_size() -> None:
    vocab = 97
    seqs = [[1, 5, 9, 2], [1, 3, 2], [1, 4, 4, 4, 4, 4, 2], [1, 2]]
    batches = [pad_sequences(seqs[:3], pad_id=0), pad_sequences(seqs[3:], pad_id=0)]
    result = evaluate(UniformLM(vocab), batches)
    assert result["tokens"] == sum(len(s) - 1 for s in seqs)
    # float32 log_softmax of equal logits: ln 97 to a few float32 ulps (~1e-6 absolute), so exp of the mean to
    # ~1e-6 relative: rel 1e-5
    assert result["perplexity"] == pytest.approx(vocab, rel=1e-5)


def test_perplexity_is_over_the_whole_set_not_batch_averaged() -> None:
    vocab = 11
    model = BigramLM(vocab)
    seqs = [[1, 2], [1, 3, 4, 5, 6, 7, 8, 9, 10, 2, 3, 4], [1, 5, 2], [1, 6, 7, 2, 9]]
    batches = [pad_sequences(seqs[:1], pad_id=0), pad_sequences(seqs[1:], pad_id=0)]
    # Reference: one sentence at a time, no padding at all.
    nll, tokens = 0.0, 0
    for s in seqs:
        logp = torch.log_softmax(model.table[torch.tensor(s[:-1])].double(), dim=-1)
        nll -= logp[torch.arange(len(s) - 1), torch.tensor(s[1:])].sum().item()
        tokens += len(s) - 1
    expected = math.exp(nll / tokens)
    # the float32 model's log-probabilities (~1e-7 relative each) against this float64 reference: rel 1e-5
    assert evaluate(model, batches)["perplexity"] == pytest.approx(expected, rel=1e-5)
    batch_mean = sum(evaluate(model, [b])["perplexity"] for b in batches) / len(batches)
    assert abs(batch_mean - expected) / expected > 0.01  # the wrong way gives a different number


def test_next_word_loss_ignores_padding_and_counts_tokens() -> None:
    model = BigramLM(11)
    short, long = [1, 3, 4, 2], [1, 5, 6, 7, 8, 9, 2]
    alone = per_sentence_loss(model, pad_sequences([short], pad_id=0))
    both = per_sentence_loss(model, pad_sequences([short, long], pad_id=0))
    torch.testing.assert_close(both[0], alone[0])  # float32: assert_close's defaults (rtol 1.3e-6, atol 1e-5)
    logp = torch.log_softmax(model.table[torch.tensor(short[:-1])], dim=-1)
    torch.testing.assert_close(alone[0], -logp[torch.arange(3), torch.tensor(short[1:])].mean())
    _, counts = NextWordTask.sentence_nll(model, pad_sequences([short, long], pad_id=0))
    assert counts.tolist() == [3, 6]  # predicted tokens: the length minus the first token


# y_true and y_pred chosen by hand; per class (TP, FP, FN): 0: (3, 0, 1), 1: (1, 1, 1), 2: (1, 1, 0).
Y_TRUE = [0, 0, 0, 0, 1, 1, 2]
Y_PRED = [0, 0, 1, 0, 1, 2, 2]
F1 = [2 * 3 / (6 + 0 + 1), 2 * 1 / (2 + 1 + 1), 2 * 1 / (2 + 1 + 0)]
# The metrics are ratios of integer counts (and means of a few): a few ulps, so pytest.approx's default rel 1e-6.


def _cls_batch(preds: list[int], labels: list[int]) -> Batch:
    return pad_sequences([[p, 1] for p in preds], pad_id=0, labels=labels)


def test_classification_metrics_match_hand_computation() -> None:
    model = EchoClassifier(num_labels=4)  # class 3 never occurs: skipped, as scikit-learn does
    result = evaluate(model, [_cls_batch(Y_PRED[:4], Y_TRUE[:4]), _cls_batch(Y_PRED[4:], Y_TRUE[4:])])
    assert result["error"] == pytest.approx(2 / 7)
    assert result["accuracy"] == pytest.approx(5 / 7)
    assert result["macro_f1"] == pytest.approx(sum(F1) / 3)
    assert result["sentences"] == 7
    # A class only ever predicted (never true) counts with F1 = 0.
    only_pred = classification_metrics(torch.tensor([[1, 1], [0, 0]]).numpy())
    assert only_pred["macro_f1"] == pytest.approx((2 / 3 + 0.0) / 2)


def test_classification_metrics_are_not_batch_averaged() -> None:
    model = EchoClassifier(num_labels=3)
    batches = [_cls_batch(Y_PRED[:4], Y_TRUE[:4]), _cls_batch(Y_PRED[4:], Y_TRUE[4:])]
    whole = evaluate(model, batches)
    per_batch = [evaluate(model, [b]) for b in batches]
    # batch 1: F1 class0 6/7, class1 0 -> 3/7; batch 2: class1 2/3, class2 2/3 -> 2/3.
    assert per_batch[0]["macro_f1"] == pytest.approx(3 / 7)
    assert per_batch[1]["macro_f1"] == pytest.approx(2 / 3)
    averaged = sum(r["macro_f1"] for r in per_batch) / 2
    assert abs(whole["macro_f1"] - averaged) > 0.1
    averaged_error = sum(r["error"] for r in per_batch) / 2  # (1/4 + 1/3) / 2 != 2/7
    assert abs(whole["error"] - averaged_error) > 0.0
    assert whole["error"] == pytest.approx(2 / 7)


def test_weighted_loss() -> None:
    losses = torch.tensor([1.0, 2.0, 4.0], requires_grad=True)
    out = weighted_loss(losses, torch.tensor([1.0, 0.0, 3.0]))
    assert out.item() == pytest.approx((1 + 12) / 4)  # float32 arithmetic on small integers: exact, default rel
    out.backward()
    torch.testing.assert_close(losses.grad, torch.tensor([0.25, 0.0, 0.75]))

    losses.grad = None
    zero = weighted_loss(losses, torch.zeros(3))
    assert zero.item() == 0.0 and zero.requires_grad
    zero.backward()
    torch.testing.assert_close(losses.grad, torch.zeros(3))

    with pytest.raises(ValueError, match=">= 0"):
        weighted_loss(losses, torch.tensor([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="same length"):
        weighted_loss(losses, torch.ones(2))


def test_evaluate_restores_training_mode_and_needs_data() -> None:
    model = BigramLM(5).train()
    evaluate(model, [pad_sequences([[1, 2, 3]], pad_id=0)])
    assert model.training
    with pytest.raises(ValueError, match="empty"):
        evaluate(model, [])
    with pytest.raises(ConfigError, match="unknown task"):
        get_task("summarization")


def test_diverged_model_has_infinite_perplexity_not_an_error() -> None:
    """A model destroyed by the noise (logits of 1e4) gives loss > 709: perplexity inf, run not aborted."""
    model = BigramLM(50)
    with torch.no_grad():
        model.table.mul_(1e4)
    seqs = [[1, 5, 9, 2], [1, 3, 2]]
    result = evaluate(model, [pad_sequences(seqs, pad_id=0)])
    assert result["loss"] > 709 and result["perplexity"] == math.inf


def test_token_nll_equals_the_shifted_slice_computation_and_the_last_position_has_no_gradient() -> None:
    """token_nll runs the cross-entropy on the whole logits (no copy of a shifted slice): the same values as the
    cross-entropy of logits[:, :-1] against input_ids[:, 1:], and nothing flows from the last position."""
    model = BigramLM(11)
    batch = pad_sequences([[1, 4, 5, 2], [1, 7, 2], [1, 3, 9, 10, 8, 2]], pad_id=0)
    nll, mask = NextWordTask.token_nll(model, batch)
    logits = model(batch)[:, :-1]
    want = F.cross_entropy(logits.reshape(-1, 11), batch.input_ids[:, 1:].reshape(-1), reduction="none")
    assert nll.shape == mask.shape == (3, 5)
    assert torch.equal(nll, want.view(3, 5))
    nll.sum().backward()
    assert model.table.grad.abs().sum() > 0

    class FixedLogits(UedpModel):
        family = "fixed"

        def __init__(self) -> None:
            super().__init__(task=NEXT_WORD, pad_id=0)
            self.logits = torch.nn.Parameter(torch.randn(3, 6, 11))

        def forward(self, batch: Batch) -> torch.Tensor:
            return self.logits

    fixed = FixedLogits()
    NextWordTask.token_nll(fixed, batch)[0].sum().backward()
    assert torch.count_nonzero(fixed.logits.grad[:, -1]) == 0  # the last position predicts nothing
    assert torch.count_nonzero(fixed.logits.grad[:, :-1]) > 0
