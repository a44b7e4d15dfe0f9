"""Model hf option special_tokens: "frame" (the default: [BOS] ids [EOS], [CLS] ids [SEP] from the special ids) or
"own" (the tokenizer's own template, what `tokenizer(text)` adds in transformers). The choice changes the ids a
model sees, so the tokenizer digest covers it and every copy of the tokenizer carries it (the run's manifest, the
tokenizer an owners-mode server ships)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from tiny_checkpoints import tiny_checkpoint
from tokenizers import Tokenizer
from tokenizers.processors import TemplateProcessing

from uedp.config import RunConfig
from uedp.errors import ConfigError
from uedp.models.registry import build_model_and_tokenizer
from uedp.owners import shipped_tokenizer, tokenizer_payload
from uedp.pipeline import prepare
from uedp.tokenization import load_hf_tokenizer, tokenizer_digest

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _with_template(directory: Path) -> Path:
    """The tiny Llama checkpoint with Llama's real template: <s> before a sentence, </s> after it."""
    file = directory / "tokenizer.json"
    tok = Tokenizer.from_file(str(file))
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", bos), ("</s>", eos)])
    tok.save(str(file))
    return directory


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("special")
    return {"gpt2": tiny_checkpoint(root / "gpt2", "gpt2"),
            "llama": _with_template(tiny_checkpoint(root / "llama", "llama"))}


def _vocab_digest(tokenizer) -> str:
    vocab = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
    return hashlib.blake2b(vocab.encode(), digest_size=16).hexdigest()


def test_own_frames_with_the_tokenizers_template_and_the_digest_covers_the_choice(checkpoints):
    framed = load_hf_tokenizer(checkpoints["llama"])
    own = load_hf_tokenizer(checkpoints["llama"], special_tokens="own")
    ids = own.encode("The bus was late.")
    bos, eos = own.bos_id, own.eos_id
    assert own.template == ((bos,), (eos,))
    assert own.frame(ids, mode="lm", max_len=64) == [bos, *ids, eos]
    assert own.frame(ids, mode="lm", max_len=3) == [bos, *ids[:2]]  # an LM sentence cut short loses its end
    assert own.frame(ids, mode="cls", max_len=3) == [bos, ids[0], eos]  # a classified one keeps its template
    assert tokenizer_digest(framed) == _vocab_digest(framed)  # the default: the digests recorded before stay
    assert tokenizer_digest(own) != tokenizer_digest(framed)
    gpt2 = load_hf_tokenizer(checkpoints["gpt2"], special_tokens="own")  # GPT-2's template adds nothing
    ids = gpt2.encode("The bus was late.")
    assert gpt2.template == ((), ()) and gpt2.frame(ids, mode="lm", max_len=64) == ids
    assert load_hf_tokenizer(checkpoints["gpt2"]).frame(ids, mode="lm", max_len=64) == [0, *ids, 0]


def test_the_choice_travels_with_every_copy_of_the_tokenizer(checkpoints, tmp_path):
    from helpers import tiny_config

    cfg = tiny_config(tmp_path, model={"name": "hf", "options": {"path": str(checkpoints["llama"]),
                                                                 "special_tokens": "own"}})
    manifest = prepare(cfg)
    own = load_hf_tokenizer(checkpoints["llama"], special_tokens="own")
    assert manifest.special_tokens == "own" and manifest.tokenizer_digest == tokenizer_digest(own)
    node = manifest.text_tokenizer()
    assert node.special_tokens == "own" and node.template == own.template
    shipped = shipped_tokenizer(tokenizer_payload(own))
    assert shipped.special_tokens == "own" and tokenizer_digest(shipped) == tokenizer_digest(own)
    assert "not comparable" in manifest.tokenizer_info["special_tokens"]  # summary.json says so
    default = prepare(tiny_config(tmp_path / "d", model={"name": "hf", "options": {"path": str(checkpoints["llama"])}}))
    assert default.special_tokens == "frame" and default.tokenizer != manifest.tokenizer  # another cache entry


def test_a_model_built_with_own_special_tokens_checks_its_tokenizer(checkpoints, tmp_path):
    from helpers import tiny_config

    cfg = tiny_config(tmp_path, model={"name": "hf", "options": {"path": str(checkpoints["llama"]),
                                                                 "special_tokens": "own"}})
    from uedp.data.loaders import materialize

    _, corpus = materialize(cfg.dataset.name, **cfg.loader_options())
    model, tokenizer = build_model_and_tokenizer("hf", task="next_word", corpus=corpus,
                                                 **cfg.model.option_dict())
    assert tokenizer.special_tokens == "own" and model.task == "next_word"


@pytest.mark.parametrize(("options", "match"), [
    ({"special_tokens": "mine"}, "special_tokens must be one of frame, own"),
    ({"special_tokens": "own", "tokenizer": "project"}, "needs tokenizer own"),
])
def test_bad_special_tokens_options_are_refused(checkpoints, tmp_path, options, match):
    cfg = RunConfig.from_flat({"model.name": "hf",
                               "model.options": json.dumps({"path": str(checkpoints["gpt2"]), **options})})
    from uedp.models.checkpoints import checkpoint_of

    with pytest.raises(ConfigError, match=match):
        checkpoint_of("hf", cfg.model.option_dict())
