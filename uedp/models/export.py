"""The release in Hugging Face format: what people load with transformers (or peft) after a run.

`export_release(out_dir, model, ...)` writes, for models of the families in EXPORTED (hf, gpt2, bert), beside
model.pt:
- without adapters: `out_dir/hf_model/`, the model (`save_pretrained`) and its tokenizer;
- with LoRA adapters (model.lora): `out_dir/hf_adapter/`, the adapter (peft's `save_pretrained`: the adapters and
  a classifier's trained head) and the tokenizer; and with model.lora.export_merged also `out_dir/hf_model/`,
  the base with the adapter merged into it (a copy: the run's model is left as it is).
Each folder has a model card (README.md, `model_card`): YAML front matter (library_name, pipeline_tag, tags, and
the public `datasets` and `base_model` where known), the architecture, the privacy summary from summary.json (the
mechanism, the epsilons and delta, whether the run is private, what is outside the guarantee, the base it started
from) and a Python snippet that loads it (tests/test_release.py runs every snippet). The server writes it after
summary.json and model.pt, so after the ledger (saved each round before its model exists): the release never
comes before its privacy record. uedp.pipeline.release_options(cfg) is what a server passes besides the model and
summary.

- Labels: a classifier's config.json maps its classes to the task's label names (`id2label`, `label2id`): the
  corpus's label names in corpus mode, `task.labels` in owners mode (`release_label_names`). peft saves no config
  for an adapter: its card's snippet gives the labels to the base it loads.
- dtype: hf_model/ is saved in `model.release_dtype` (uedp.models.precision: the model option `dtype` when given,
  else the checkpoint's own, else float32; a name or a torch.dtype), from a copy when the run's model is in
  another dtype. The adapter is always saved in float32, the dtype its weights train in (the master weights):
  it is a small share of the model, peft loads it in float32 onto a base of any dtype anyway
  (`autocast_adapter_dtype`), and rounding it would only change the released update.
- Card metadata is public by construction: `datasets` is `model.card_datasets` when set, else the registered
  public corpora (uedp.public_corpora) the tokenizer or the public start learnt from (never the private corpus:
  a run refuses a public corpus that is its private text); `base_model` is `model.card_base_model` only (a Hub
  id), which the adapter snippet then loads and adapter_config.json names instead of the local directory.

The tokenizer is the checkpoint's own (copied with AutoTokenizer) or, for a model trained with the project's
tokenizer, that tokenizer as a `PreTrainedTokenizerFast` with its special tokens. The saved config.json records
the run tokenizer's digest (`uedp_tokenizer_digest`, uedp.models.public_start.tokenizer_digest), so that the
folder can start another run with model hf and tokenizer "project" (uedp.models.checkpoints).
"""

from __future__ import annotations

import copy
import itertools
import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from uedp.errors import ConfigError
from uedp.markdown import table
from uedp.models.base import CLASSIFICATION, NEXT_WORD, UedpModel
from uedp.models.checkpoints import (
    DIGEST_KEY,
    PUBLIC_CORPUS_KEY,
    BaseCheckpoint,
    quiet_transformers,
    recorded_public_corpus_of,
)
from uedp.models.lora import is_adapted, transformers_model
from uedp.public_corpora import recorded_public_corpus
from uedp.tokenization import SPECIAL_ROLES, TextTokenizer, tokenizer_digest

EXPORTED = ("hf", "gpt2", "bert")  # model families released in Hugging Face format
MODEL_DIR, ADAPTER_DIR = "hf_model", "hf_adapter"
PIPELINE_TAGS = {NEXT_WORD: "text-generation", CLASSIFICATION: "text-classification"}  # the card's pipeline_tag


USER_FILE_DATASET = "jsonl"  # a corpus read from the users' own file: its label names are its text


def release_label_names(public: list[str] | None, corpus: list[str] | None, *, owners: bool,
                        user_file: bool) -> list[str] | None:
    """A classification run's label names, in the head's order: `public` (task.labels) in owners mode (the public
    label set every owner's labels map to: the server holds no corpus); else `corpus` (the prepared corpus's, the
    run's manifest), which for a registered dataset are its public schema. The label names of the users' own file
    (`user_file`: dataset USER_FILE_DATASET) come from their text: released only when `public` declares the same
    set, else None (the release says LABEL_0, LABEL_1, ...)."""
    if owners:
        return public
    if not user_file:
        return corpus
    return corpus if public is not None and corpus is not None and set(public) == set(corpus) else None


def export_release(out_dir: Path, model: UedpModel, *, tokenizer: TextTokenizer, checkpoint: BaseCheckpoint | None,
                   summary: Mapping[str, Any], merged: bool = False, labels: Sequence[str] | None = None,
                   datasets: Sequence[str] | None = None, base_model: str = "") -> list[Path]:
    """Write the release folders (module docstring) and return them; none for a family not in EXPORTED.
    `labels`: a classifier's class names (release_label_names); `datasets` and `base_model`: the card's metadata
    (uedp.pipeline.release_options; `datasets` None: the public corpora the summary records)."""
    if model.family not in EXPORTED:
        return []
    labels = _labels(model, labels)
    dtype = saved_dtype(model)
    digest = tokenizer_digest(tokenizer)
    hf_tokenizer = _hf_tokenizer(tokenizer, checkpoint)
    adapted = is_adapted(model)
    card = {"summary": summary, "model": model, "checkpoint": checkpoint, "labels": labels,
            "datasets": public_datasets(summary, checkpoint) if datasets is None else list(datasets),
            "base_model": base_model}
    written: list[Path] = []
    with quiet_transformers(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if adapted:
            folder = Path(out_dir) / ADAPTER_DIR
            _save_adapter(model.hf, folder, base_model=base_model)
            written.append(folder)
        if merged or not adapted:
            folder = Path(out_dir) / MODEL_DIR
            plain = _release_copy(model.hf, dtype=dtype, adapted=adapted)
            plain.config.update({DIGEST_KEY: digest})
            if labels is not None:
                plain.config.id2label = dict(enumerate(labels))
                plain.config.label2id = {name: i for i, name in enumerate(labels)}
            plain.save_pretrained(str(folder))
            written.append(folder)
        for folder in written:
            hf_tokenizer.save_pretrained(str(folder))
            (folder / "README.md").write_text(model_card(**card, adapter=folder.name == ADAPTER_DIR),
                                              encoding="utf-8")
    return written


def saved_dtype(model: UedpModel) -> torch.dtype:
    """The dtype hf_model/ is saved in: `model.release_dtype` (a name or a torch.dtype), float32 if unset."""
    value = getattr(model, "release_dtype", None) or torch.float32
    dtype = value if isinstance(value, torch.dtype) else getattr(torch, str(value), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ConfigError(f"model.options.dtype: the release dtype must be a floating-point torch dtype, got {value!r}")
    return dtype


def _labels(model: UedpModel, labels: Sequence[str] | None) -> list[str] | None:
    """A classifier's label names, checked against its head; None for next_word or when none are known."""
    if model.task != CLASSIFICATION or labels is None:
        return None
    names = [str(name) for name in labels]
    if len(names) != model.num_labels or len(set(names)) != len(names):
        raise ConfigError(f"task.labels: the release names each of the head's {model.num_labels} classes once, got "
                          f"{len(names)} label name(s), {len(set(names))} distinct")
    return names


def _release_copy(hf: Any, *, dtype: torch.dtype, adapted: bool) -> Any:
    """The transformers model hf_model/ saves, in `dtype`: a merged copy of an adapted model, a copy when the run's
    model holds a floating tensor of another dtype, else the run's model itself (then nothing is cast)."""
    if adapted:
        plain = copy.deepcopy(hf).merge_and_unload()
    elif any(t.is_floating_point() and t.dtype != dtype for t in itertools.chain(hf.parameters(), hf.buffers())):
        plain = copy.deepcopy(hf)
    else:
        return hf
    return plain.to(dtype)


def _save_adapter(hf: Any, folder: Path, *, base_model: str) -> None:
    """peft's save_pretrained in float32 (module docstring); adapter_config.json names the Hub base when given."""
    cast = {n for n, p in hf.named_parameters() if p.requires_grad and p.dtype != torch.float32}
    state = {"state_dict": {k: v.float() if k in cast else v for k, v in hf.state_dict().items()}} if cast else {}
    hf.save_pretrained(str(folder), **state)
    if base_model:
        path = folder / "adapter_config.json"
        config = json.loads(path.read_text(encoding="utf-8"))
        config["base_model_name_or_path"] = base_model
        path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def public_datasets(summary: Mapping[str, Any], checkpoint: BaseCheckpoint | None) -> list[str]:
    """The registered public corpora (uedp.public_corpora) the run's public inputs learnt from: the tokenizer's
    (summary `tokenizer`, source public), the public start's (summary `initial_model`) and the one a checkpoint
    this project pretrained records (PUBLIC_CORPUS_KEY). Only registered names: never the private corpus (a
    private-split tokenizer is skipped), nor a text file's path, nor a record this version cannot parse."""
    records = []
    for key in ("tokenizer", "initial_model"):
        entry = summary.get(key)
        if isinstance(entry, Mapping) and entry.get("source") == "public":
            records.append(entry.get("corpus"))
    if checkpoint is not None:
        records.append(recorded_public_corpus_of(checkpoint.path))
    names = [found[0] for r in records if isinstance(r, str) and (found := recorded_public_corpus(r))]
    return list(dict.fromkeys(n for n in names if n != "file"))


def export_public_start(folder: Path, model: UedpModel, *, tokenizer: TextTokenizer, corpus: str,
                        details: Mapping[str, Any]) -> Path:
    """Write a model pretrained on PUBLIC text (uedp.pretraining) as a Hugging Face checkpoint directory that a
    private run starts from with model `hf` (`model.options.path=FOLDER`, `model.options.tokenizer=project`): the
    model (`save_pretrained`), the project's tokenizer, config.json recording that tokenizer's digest
    (DIGEST_KEY) and the public corpus it learnt from (PUBLIC_CORPUS_KEY: the server refuses the checkpoint for
    a run whose private text that corpus is, as it refuses a `model.init` start), and a card saying so."""
    if model.family not in EXPORTED or is_adapted(model):
        raise ConfigError(f"--hf-out: model {model.family!r} has no Hugging Face form (one of {', '.join(EXPORTED)}, "
                          "without LoRA)")
    folder = Path(folder)
    with quiet_transformers(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.hf.config.update({DIGEST_KEY: tokenizer_digest(tokenizer), PUBLIC_CORPUS_KEY: corpus})
        model.hf.save_pretrained(str(folder))
        _hf_tokenizer(tokenizer, None).save_pretrained(str(folder))
    rows = [[k, v] for k, v in details.items()]
    (folder / "README.md").write_text("\n".join([
        "---", "library_name: transformers", "tags: [uedp, public-pretraining]", "---", "",
        f"# A {model.family} model pretrained on public text", "",
        f"Trained on PUBLIC text only ({corpus}), with no private data: a public start for private runs. It spends "
        "no privacy; a private run's guarantee covers what its private training adds.", "",
        table(["", "value"], rows), "", "## Starting a private run from it", "", "```bash",
        f"python -m experiments.run model=hf model.options.path={folder} model.options.tokenizer=project", "```", "",
    ]), encoding="utf-8")
    return folder


def _hf_tokenizer(tokenizer: TextTokenizer, checkpoint: BaseCheckpoint | None) -> Any:
    """The tokenizer to save: the checkpoint's own files, or the run's tokenizer with its special tokens."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if checkpoint is not None and checkpoint.tokenizer == "own":
        return AutoTokenizer.from_pretrained(str(checkpoint.path), local_files_only=True)
    names = {i: t for t, i in tokenizer.get_vocab().items()}
    ids = {role: getattr(tokenizer, f"{role}_id") for role in SPECIAL_ROLES}
    specials = {f"{role}_token": names[i] for role, i in ids.items() if i is not None}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tokenizer.backend.to_str()), **specials)


def model_card(summary: Mapping[str, Any], *, model: UedpModel, checkpoint: BaseCheckpoint | None, adapter: bool,
               labels: Sequence[str] | None = None, datasets: Sequence[str] = (), base_model: str = "") -> str:
    """README.md of a release folder (module docstring): front matter, the privacy summary (summary.json's
    fields) and how to load it. `labels`, `datasets`, `base_model`: as export_release takes them."""
    get = summary.get
    rows = [["mechanism", f"{get('method')} (strategy {get('strategy')})"],
            *[[k, get(k)] for k in ("eps_uedp", "eps_user", "eps_undetected") if k in summary],
            ["claims", ", ".join(get("claims") or []) or None], ["delta", get("delta")],
            ["rounds", get("rounds")], ["noise multiplier z", get("noise_multiplier")],
            ["population (places N)", get("population")], ["private", get("private")],
            ["noised dimension", get("noised_dimension")], ["trainable share", get("trainable_share")]]
    base = (f"`{checkpoint.path}` (SHA-256 of its config and weight files: `{get('base_model', {}).get('digest')}`)"
            if checkpoint is not None and isinstance(get("base_model"), dict) else "random weights (no checkpoint)")
    if base_model:
        base += f", published on the Hugging Face Hub as `{base_model}`"
    architecture = type(transformers_model(model)).__name__  # what save_pretrained writes as architectures[0]
    what = f"{architecture} LoRA adapter" if adapter else architecture
    front = ["---", f"library_name: {'peft' if adapter else 'transformers'}",
             f"pipeline_tag: {PIPELINE_TAGS[model.task]}", "tags: [uedp, differential-privacy, federated-learning]"]
    if datasets:  # JSON strings and lists are YAML flow scalars and sequences
        front.append(f"datasets: {json.dumps(list(datasets))}")
    if base_model:
        front.append(f"base_model: {json.dumps(base_model)}")
    where = "the snippet below gives them to the base" if adapter else "config.json's id2label"
    classes = ([f"Classes, in the head's order ({where}): {', '.join(f'`{n}`' for n in labels)}.", ""]
               if labels else [])
    lines = [
        *front, "---", "",
        f"# {'An' if what[0] in 'AEIOU' else 'A'} {what} trained with UeDP", "",
        f"Trained for task `{model.task}` by federated learning with user-entity differential privacy (uedp), "
        f"starting from {base}.", "", *classes,
        "## Privacy", "", table(["", "value"], rows), "",
        f"Warning: {get('warning')}" if get("warning") else "The guarantee holds as configured.", "",
        "The epsilons bound what the released updates reveal about one user and one entity (eps_uedp), one user "
        "(eps_user), or an entity the detector missed (eps_undetected), at the delta above. The base checkpoint "
        "and the tokenizer are public inputs: the guarantee covers what the private training added to them.", "",
        f"Outside the guarantee: {get('outside_guarantee') or 'nothing listed (see warning)'}.", "",
        "The round-by-round record is ledger.json, and the whole summary summary.json, in the run's folder.", "",
        "## Loading", "", "```python", _snippet(model, checkpoint, adapter=adapter, labels=labels,
                                                   base_model=base_model), "```", "",
    ]
    return "\n".join(lines)


def _snippet(model: UedpModel, checkpoint: BaseCheckpoint | None, *, adapter: bool, labels: Sequence[str] | None,
             base_model: str) -> str:
    """The card's Python code that loads the release (PATH: the run's folder; BASE: a base of random weights
    only the run had)."""
    auto = "AutoModelForCausalLM" if model.task == NEXT_WORD else "AutoModelForSequenceClassification"
    if not adapter:
        return (f"from transformers import AutoTokenizer, {auto}\n\nmodel = {auto}.from_pretrained(\"PATH/hf_model\")\n"
                "tokenizer = AutoTokenizer.from_pretrained(\"PATH/hf_model\")")
    source = json.dumps(base_model or (str(checkpoint.path) if checkpoint is not None else "BASE"))
    if model.task == NEXT_WORD:
        load = f"base = {auto}.from_pretrained({source})  # the public base, as every node loaded it\n"
    else:  # a new head of the task's classes, whatever head the base has (the adapter holds its trained weights)
        names = ([f"labels = {list(labels)!r}  # the task's classes, in the head's order\n"] if labels else [])
        given = ("num_labels=len(labels), id2label=dict(enumerate(labels)),\n"
                 "    label2id={name: i for i, name in enumerate(labels)}, " if labels
                 else f"num_labels={model.num_labels}, ")
        load = (f"{''.join(names)}# the public base, as every node loaded it, with a new head of the task's classes "
                "(the adapter holds its\n# trained weights): ignore_mismatched_sizes for a base whose own head has "
                f"another size\nbase = {auto}.from_pretrained(\n    {source}, {given}ignore_mismatched_sizes=True)\n")
    return (f"from peft import PeftModel\nfrom transformers import AutoTokenizer, {auto}\n\n{load}"
            "model = PeftModel.from_pretrained(base, \"PATH/hf_adapter\")\n"
            "tokenizer = AutoTokenizer.from_pretrained(\"PATH/hf_adapter\")")
