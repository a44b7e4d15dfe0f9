"""uedp.entity_tokens: the token-level split (entity tokens and the rest), the excess share over a reference,
summary.json's `final_tokens` and `python -m experiments.entity_perplexity --reference`."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers

from uedp.entities.detectors import build_annotations, entity_sets
from uedp.entity_tokens import (
    TokenSplit,
    entity_targets,
    excess_share,
    protected_spans,
    split_tokens,
)
from uedp.errors import ConfigError
from uedp.pipeline import encode_sentences, evaluation_split
from uedp.tokenization import SPECIAL_TOKENS, TextTokenizer, TokenizerTraining, train_tokenizer

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["Alice", "met", "Bob", "in", "Paris", "today", "."]
TEXTS = ["Alice met Bob in Paris", "Bob met Alice today ."]
# Alice and Paris protected in the first sentence, Alice in the second (Bob is not protected here)
SPANS = [[(0, 5), (17, 22)], [(8, 13)]]


def word_tokenizer() -> TextTokenizer:
    """A word-level tokenizer: one token per word, its offsets the word's characters."""
    vocab = {t: i for i, t in enumerate([*SPECIAL_TOKENS, *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return TextTokenizer(tok, source="test")


class TinyLM(torch.nn.Module):
    """Logits from the current token only (enough for a known per-token NLL)."""

    task = "next_word"

    def __init__(self, vocab: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(vocab, 8)
        self.out = torch.nn.Linear(8, vocab)

    def forward(self, batch):
        return self.out(self.emb(batch.input_ids))


def test_entity_targets_mark_the_predicted_tokens_on_a_protected_span() -> None:
    tok = word_tokenizer()
    marks = entity_targets(tok, TEXTS, SPANS, max_len=16)
    # targets: the words, then [EOS] (never an entity token)
    assert [m.tolist() for m in marks] == [[True, False, False, False, True, False],
                                           [False, False, True, False, False, False]]
    cut = entity_targets(tok, TEXTS, SPANS, max_len=4)  # [BOS] Alice met Bob: the targets Alice met Bob
    assert [m.tolist() for m in cut] == [[True, False, False], [False, False, True]]
    assert entity_targets(tok, TEXTS, [[], []], max_len=16)[0].tolist() == [False] * 6


def test_byte_level_pieces_carry_the_space_before_a_word_not_after_an_entity() -> None:
    """A byte-level BPE trained on other text splits words into pieces: the entity tokens are exactly the pieces
    of the entity, the space inside a two-word entity included, not the piece after it nor a lone space before."""
    tok = train_tokenizer(["the cat sat on the mat"] * 5, TokenizerTraining(kind="bpe", vocab_size=300))
    text = "so Gutierrez Inc sat on Zoë"
    spans = [(3, 16), (24, 27)]  # Gutierrez Inc, Zoë (its ë is two bytes: two tokens with the same offsets)
    enc = tok.backend.encode(text, add_special_tokens=False)
    marks = entity_targets(tok, [text], [spans], max_len=64)[0]
    assert len(marks) == len(enc.ids) + 1 and not marks[-1]
    for start, end in spans:  # each entity's tokens decode to the entity, and no other token is marked
        on = [i for i, (s, e) in enumerate(enc.offsets) if s < end and start < e]
        assert marks[on].all() and tok.decode([enc.ids[i] for i in on]).strip() == text[start:end]
    by_offset = dict(zip(enc.offsets, marks))
    assert by_offset[(12, 13)]  # the space piece inside "Gutierrez Inc"
    assert not by_offset[(2, 3)] and not by_offset[(23, 24)]  # the lone space pieces before each entity
    assert not by_offset[(16, 20)] and not by_offset[(0, 1)]  # "Ġsat" right after the entity, "s"


def test_split_tokens_equals_a_direct_computation() -> None:
    tok = word_tokenizer()
    data = encode_sentences(tok, TEXTS, None, task="next_word", max_len=16)
    marks = entity_targets(tok, TEXTS, SPANS, max_len=16)
    model = TinyLM(tok.vocab_size)
    split = split_tokens(model, data, marks, spans="gold", batch_size=1)  # one sentence per batch
    again = split_tokens(model, data, marks, spans="gold")  # both in one (length-sorted) batch
    np.testing.assert_allclose(split.nll, again.nll, rtol=1e-6)
    nll, entity = [], []
    with torch.no_grad():
        for row, mark in enumerate(marks):
            ids = data.ids[row, : int(data.mask[row].sum())]
            logp = torch.log_softmax(model.emb.weight[ids] @ model.out.weight.T + model.out.bias, dim=-1)
            nll += [-float(logp[t, ids[t + 1]]) for t in range(len(ids) - 1)]
            entity += mark.tolist()
    nll, entity = np.array(nll), np.array(entity)
    np.testing.assert_allclose(split.nll, nll, rtol=1e-5)
    assert split.entity.tolist() == entity.tolist() and split.sentence.tolist() == [0] * 6 + [1] * 6
    assert split.has_entity.tolist() == [True, True]
    record = split.record()
    assert record["entity_token_count"] == 3 and record["other_token_count"] == 9 and record["spans"] == "gold"
    assert record["entity_tokens"] == pytest.approx(math.exp(nll[entity].mean()), rel=1e-6)
    assert record["other_tokens"] == pytest.approx(math.exp(nll[~entity].mean()), rel=1e-6)
    assert record["all_tokens"] == pytest.approx(math.exp(nll.mean()), rel=1e-6)
    with pytest.raises(ValueError, match="predicted tokens"):  # marks of another max_len
        split_tokens(model, data, entity_targets(tok, TEXTS, SPANS, max_len=4), spans="gold")
    none = split_tokens(model, data, entity_targets(tok, TEXTS, [[], []], max_len=16), spans="detector")
    assert none.record()["entity_tokens"] is None and none.record()["other_token_count"] == 12


def test_protected_spans_follow_entity_sets() -> None:
    texts = ["Alice went to Paris on Monday", "nothing here", "Paris again"]
    table = build_annotations([0, 1, 2], texts, [[(0, 5, "PERSON"), (14, 19, "GPE"), (23, 29, "DATE")], [],
                                                 [(0, 5, "GPE")]], identity={}, source="test")
    protected = {"PERSON", "GPE"}
    assert protected_spans(table, protected) == [[(0, 5), (14, 19)], [], [(0, 5)]]
    public = frozenset(k for k in set().union(*entity_sets(table, protected)) if k.startswith("GPE"))
    spans = protected_spans(table, protected, public)
    assert spans == [[(0, 5)], [], []]
    assert [bool(s) for s in spans] == [bool(s) for s in entity_sets(table, protected, public)]


def test_excess_share() -> None:
    entity = np.array([True, False, False, False])
    assert excess_share([3.0, 3.0, 1.0, 1.0], [1.0, 2.0, 1.0, 1.0], entity) == pytest.approx(2 / 3)
    # the run beats the reference on the other tokens: the entity tokens carry more than the whole excess
    assert excess_share([3.0, 1.0], [1.0, 2.0], [True, False]) == pytest.approx(2.0)
    assert excess_share([1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], entity) is None  # no excess
    assert excess_share([0.5, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], entity) is None  # better than the reference
    assert excess_share([np.nan, 2.0], [1.0, 1.0], [True, False]) is None
    with pytest.raises(ValueError, match="same tokens"):
        excess_share([1.0, 2.0], [1.0], [True, False])


def test_a_classification_run_has_no_token_split(tmp_path) -> None:
    from tests.helpers import tiny_config

    assert evaluation_split(TinyLM(10), tiny_config(tmp_path, task={"name": "classification"})) is None


@pytest.fixture(scope="module")
def fedavg_run(tmp_path_factory) -> tuple[Path, dict]:
    from runtime.local_grid import run_local
    from tests.helpers import tiny_config

    out = tmp_path_factory.mktemp("fedavg")
    return out, run_local(tiny_config(out, strategy={"name": "fedavg"}, federation={"rounds": 1, "eval_every": 1}))


def test_the_summary_carries_the_token_split(fedavg_run) -> None:
    from server.app import OUTSIDE_GUARANTEE

    out, summary = fedavg_run
    tokens = json.loads((out / "summary.json").read_text())["final_tokens"]
    assert tokens == summary["final_tokens"] and tokens["spans"] == "gold"  # the synthetic corpus's gold spans
    assert tokens["entity_token_count"] > 0 and tokens["other_token_count"] > 0
    assert tokens["entity_token_count"] + tokens["other_token_count"] == summary["final"]["tokens"]
    assert tokens["all_tokens"] == pytest.approx(summary["final"]["perplexity"], rel=1e-5)
    assert "final_tokens" in OUTSIDE_GUARANTEE["corpus"]  # as `final`: the users' held-out text


def test_the_cli_adds_the_token_columns_and_the_excess_share(fedavg_run, tmp_path) -> None:
    from studies.entity_perplexity import split_perplexity, token_split

    reference, _ = fedavg_run
    worse = tmp_path / "noisy"  # the same run with noise on its weights: worse than the reference
    shutil.copytree(reference, worse)
    saved = torch.load(worse / "model.pt", weights_only=False)
    gen = torch.Generator().manual_seed(0)
    saved["weights"] = [w + 0.5 * torch.randn(w.shape, generator=gen).numpy() for w in saved["weights"]]
    torch.save(saved, worse / "model.pt")
    proc = subprocess.run([sys.executable, "-m", "experiments.entity_perplexity", str(worse), str(reference),
                           "--reference", str(reference), "--out", str(tmp_path / "t.md")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "entity tokens" in text and f"share of excess NLL over {reference.name} on entity tokens" in text
    rows = json.loads((tmp_path / "t.json").read_text())
    run, ref = token_split(worse), token_split(reference)
    assert rows[0]["excess_share"] == pytest.approx(excess_share(run.nll, ref.nll, run.entity))
    assert 0 < rows[0]["excess_share"] < 1 and rows[1]["excess_share"] is None  # the reference: no excess
    assert rows[0]["entity_token_count"] + rows[0]["other_token_count"] == len(run.nll)
    assert rows[0]["with_entity_sentences"] + rows[0]["entity_free_sentences"] == rows[0]["all_sentences"]
    other = TokenSplit(ref.nll[1:], ref.entity[1:], ref.targets[1:], ref.sentence[1:], ref.has_entity, "gold")
    with pytest.raises(ConfigError, match="--reference"):
        split_perplexity(worse, reference=other)


def test_context_splits_the_other_tokens_by_sentence() -> None:
    """TokenSplit.context: the non-entity tokens of entity-free sentences and of sentences with an entity."""
    import math

    import numpy as np

    from uedp.entity_tokens import TokenSplit

    split = TokenSplit(nll=np.array([1.0, 2.0, 3.0, 5.0]), entity=np.array([False, False, True, False]),
                       targets=np.arange(4), sentence=np.array([0, 0, 1, 1]), has_entity=np.array([False, True]),
                       spans="gold")
    got = split.context()
    assert got["other_tokens_free_sentences"] == math.exp(1.5)  # sentence 0: NLL 1 and 2
    assert got["other_tokens_entity_sentences"] == math.exp(5.0)  # sentence 1's non-entity token only
    assert got["other_token_count_entity_sentences"] == 1
