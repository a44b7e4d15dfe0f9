"""The release in Hugging Face format: what people load with transformers (or peft) after a run.

`export_release(out_dir, model, ...)` writes, for models of the families in EXPORTED (hf, gpt2, bert), beside
model.pt:
- without adapters: `out_dir/hf_model/`, the model (`save_pretrained`) and its tokenizer;
- with LoRA adapters (model.lora): `out_dir/hf_adapter/`, the adapter (peft's `save_pretrained`: the adapters and
  a classifier's trained head) and the tokenizer; and with model.lora.export_merged also `out_dir/hf_model/`,
  the base with the adapter merged into it (a copy: the run's model is left as it is).
Each folder has a model card (README.md) with the privacy summary, from summary.json: the mechanism, the
epsilons and delta, whether the run is private, what is outside the guarantee, and the base it started from.
The server writes it after summary.json and model.pt, so after the ledger (saved each round before its model
exists): the release never comes before its privacy record.

The tokenizer is the checkpoint's own (copied with AutoTokenizer) or, for a model trained with the project's
tokenizer, that tokenizer as a `PreTrainedTokenizerFast` with its special tokens. The saved config.json records
the run tokenizer's digest (`uedp_tokenizer_digest`, uedp.models.public_start.tokenizer_digest), so that the
folder can start another run with model hf and tokenizer "project" (uedp.models.checkpoints).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from uedp.errors import ConfigError
from uedp.markdown import table
from uedp.models.base import UedpModel
from uedp.models.checkpoints import DIGEST_KEY, PUBLIC_CORPUS_KEY, Checkpoint, quiet_transformers
from uedp.models.lora import is_adapted
from uedp.tokenization import SPECIAL_ROLES, TextTokenizer, tokenizer_digest

EXPORTED = ("hf", "gpt2", "bert")  # model families released in Hugging Face format
MODEL_DIR, ADAPTER_DIR = "hf_model", "hf_adapter"


def export_release(out_dir: Path, model: UedpModel, *, tokenizer: TextTokenizer, checkpoint: Checkpoint | None,
                   summary: Mapping[str, Any], merged: bool = False) -> list[Path]:
    """Write the release folders (module docstring) and return them; none for a family not in EXPORTED."""
    if model.family not in EXPORTED:
        return []
    digest = tokenizer_digest(tokenizer)
    hf_tokenizer = _hf_tokenizer(tokenizer, checkpoint)
    adapted = is_adapted(model)
    written: list[Path] = []
    with quiet_transformers(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if adapted:
            folder = Path(out_dir) / ADAPTER_DIR
            model.hf.save_pretrained(str(folder))
            written.append(folder)
        if merged or not adapted:
            folder = Path(out_dir) / MODEL_DIR
            plain = copy.deepcopy(model.hf).merge_and_unload() if adapted else model.hf
            plain.config.update({DIGEST_KEY: digest})
            plain.save_pretrained(str(folder))
            written.append(folder)
        for folder in written:
            hf_tokenizer.save_pretrained(str(folder))
            (folder / "README.md").write_text(model_card(summary, model=model, checkpoint=checkpoint,
                                                         adapter=folder.name == ADAPTER_DIR), encoding="utf-8")
    return written


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


def _hf_tokenizer(tokenizer: TextTokenizer, checkpoint: Checkpoint | None) -> Any:
    """The tokenizer to save: the checkpoint's own files, or the run's tokenizer with its special tokens."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if checkpoint is not None and checkpoint.tokenizer == "own":
        return AutoTokenizer.from_pretrained(str(checkpoint.path), local_files_only=True)
    names = {i: t for t, i in tokenizer.get_vocab().items()}
    ids = {role: getattr(tokenizer, f"{role}_id") for role in SPECIAL_ROLES}
    specials = {f"{role}_token": names[i] for role, i in ids.items() if i is not None}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tokenizer.backend.to_str()), **specials)


def model_card(summary: Mapping[str, Any], *, model: UedpModel, checkpoint: Checkpoint | None,
               adapter: bool) -> str:
    """README.md of a release folder: the privacy summary (summary.json's fields) and how to load it."""
    get = summary.get
    rows = [["mechanism", f"{get('method')} (strategy {get('strategy')})"],
            *[[k, get(k)] for k in ("eps_uedp", "eps_user", "eps_undetected") if k in summary],
            ["claims", ", ".join(get("claims") or []) or None], ["delta", get("delta")],
            ["rounds", get("rounds")], ["noise multiplier z", get("noise_multiplier")],
            ["population (places N)", get("population")], ["private", get("private")],
            ["noised dimension", get("noised_dimension")], ["trainable share", get("trainable_share")]]
    base = (f"`{checkpoint.path}` (SHA-256 of its config and weight files: `{get('base_model', {}).get('digest')}`)"
            if checkpoint is not None and isinstance(get("base_model"), dict) else "random weights (no checkpoint)")
    library = "peft" if adapter else "transformers"
    what = "LoRA adapter" if adapter else "model"
    auto, extra = (("AutoModelForCausalLM", "") if model.task == "next_word"
                   else ("AutoModelForSequenceClassification", f", num_labels={model.num_labels}"))
    source = checkpoint.path if checkpoint is not None else "BASE"
    load = (f"from peft import PeftModel\nfrom transformers import {auto}\n\n"
            f"base = {auto}.from_pretrained(\"{source}\"{extra})  # the public base, as every node loaded it\n"
            "model = PeftModel.from_pretrained(base, \"PATH/hf_adapter\")" if adapter else
            f"from transformers import AutoTokenizer, {auto}\n\nmodel = {auto}.from_pretrained(\"PATH/hf_model\")\n"
            "tokenizer = AutoTokenizer.from_pretrained(\"PATH/hf_model\")")
    lines = [
        "---", f"library_name: {library}", "tags: [uedp, differential-privacy, federated-learning]", "---", "",
        f"# A {model.family} {what} trained with UeDP", "",
        f"Trained for task `{model.task}` by federated learning with user-entity differential privacy (uedp), "
        f"starting from {base}.", "",
        "## Privacy", "", table(["", "value"], rows), "",
        f"Warning: {get('warning')}" if get("warning") else "The guarantee holds as configured.", "",
        "The epsilons bound what the released updates reveal about one user and one entity (eps_uedp), one user "
        "(eps_user), or an entity the detector missed (eps_undetected), at the delta above. The base checkpoint "
        "and the tokenizer are public inputs: the guarantee covers what the private training added to them.", "",
        f"Outside the guarantee: {get('outside_guarantee') or 'nothing listed (see warning)'}.", "",
        "The round-by-round record is ledger.json, and the whole summary summary.json, in the run's folder.", "",
        "## Loading", "", "```python", load, "```", "",
    ]
    return "\n".join(lines)
