"""Bring your own model: any Hugging Face checkpoint (model hf) or a clear refusal, LoRA on the update
the mechanism releases, and the release in Hugging Face format.

Tiny checkpoints (a 1-layer GPT-2, a Llama-style and a BERT-style model of width 16, each with its own byte-level
BPE tokenizer: tests/tiny_checkpoints.py) are saved to temporary directories; each trains one round of UeDP
in-process (run_server over runtime.local_grid.LocalGrid), with LoRA and with every weight trained. Offline:
local paths only (tests/conftest.py sets HF_HUB_OFFLINE)."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from runtime.local_grid import LocalGrid, set_local_task_identity
from server.app import run_server
from tests.helpers import compose_run_config, operator_rows, tiny_config
from tests.tiny_checkpoints import tiny_checkpoint
from uedp.config import LoraConfig, RunConfig
from uedp.errors import ConfigError
from uedp.models import build_model, get_weights, set_weights
from uedp.models.base import parameter_counts
from uedp.models.checkpoints import BaseCheckpointMismatch, base_digest, check_base
from uedp.owners import model_shape, shipped_tokenizer, tokenizer_payload
from uedp.pipeline import ModelShape, load_manifest, new_model, owner_task, prepare, run_tokenizer
from uedp.tokenization import load_hf_tokenizer, tokenizer_digest

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    return {kind: tiny_checkpoint(root / kind, kind) for kind in ("gpt2", "llama", "bert")}


def _config(out: Path, path: Path, *, task: str = "next_word", lora: dict | None = None, **options: Any) -> RunConfig:
    return tiny_config(out, model={"name": "hf", "options": {"path": str(path), **options}, "lora": lora or {}},
                       task={"name": task}, federation={"rounds": 1, "eval_every": 1})


def _every_user(cfg: RunConfig, users: int | None = None) -> RunConfig:
    """q_u = 1: a one-round test that needs replies gets every user (at q_u 0.5 it samples none 1 time in 256);
    `users` of them, if given (4 at q_u 1 cost what 8 at q_u 0.5 did)."""
    if users is not None:
        options = {**cfg.dataset.option_dict(), "num_users": users}
        cfg = dataclasses.replace(cfg, dataset=dataclasses.replace(cfg.dataset, options=json.dumps(options)))
    return dataclasses.replace(cfg, privacy=dataclasses.replace(cfg.privacy, q_u=1.0))


class Runs:
    """One UeDP round per (checkpoint, task, LoRA rank), run once for the module."""

    def __init__(self, root: Path, checkpoints: dict[str, Path]) -> None:
        self.root, self.checkpoints, self.done = root, checkpoints, {}

    def __call__(self, kind: str, task: str, r: int, **lora: Any) -> tuple[RunConfig, dict[str, Any]]:
        key = (kind, task, r, tuple(sorted(lora.items())))
        if key not in self.done:
            cfg = _config(self.root / "-".join(map(str, key[:3])), self.checkpoints[kind], task=task,
                          lora={"r": r, **lora} if r else None)
            set_local_task_identity()
            log = io.StringIO()
            summary = run_server(LocalGrid(cfg, 8), cfg, stream=log)
            self.done[key] = cfg, {**summary, "log": log.getvalue()}
        return self.done[key]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, checkpoints) -> Runs:
    return Runs(tmp_path_factory.mktemp("runs"), checkpoints)


def _final_model(cfg: RunConfig) -> torch.nn.Module:
    """The run's final model: built as the run built it, with model.pt's weights."""
    model = new_model(cfg, load_manifest(cfg))
    set_weights(model, torch.load(Path(cfg.federation.out_dir) / "model.pt", weights_only=False)["weights"])
    return model.eval()


# -- the tokenizer: the checkpoint's own, special ids read from it -------------------------------------------------
def test_special_ids_are_read_from_the_tokenizer_and_survive_every_copy(checkpoints, tmp_path):
    """GPT-2 and Llama tokenizers declare no pad token: padding is their eos (the attention mask hides it); ids come
    from the tokenizer's attributes, not from token names, and stay the same in the run's manifest and in the
    tokenizer an owners-mode server ships."""
    gpt2, llama, bert = (load_hf_tokenizer(checkpoints[k]) for k in ("gpt2", "llama", "bert"))
    assert (gpt2.pad_id, gpt2.bos_id, gpt2.eos_id) == (0, 0, 0)
    assert (llama.pad_id, llama.bos_id, llama.eos_id, llama.unk_id) == (2, 1, 2, 0)  # <unk> <s> </s>
    assert (bert.pad_id, bert.cls_id, bert.sep_id) == (0, 2, 3)
    shipped = shipped_tokenizer(tokenizer_payload(llama))
    assert shipped.special_ids == llama.special_ids and shipped.pad_id == 2
    cfg = _config(tmp_path, checkpoints["llama"])
    manifest = prepare(cfg)
    assert manifest.special_ids == llama.special_ids and manifest.tokenizer_info["source"] == "pretrained"
    assert manifest.text_tokenizer().pad_id == 2 and manifest.tokenizer_digest == tokenizer_digest(llama)
    assert "with its eos token (id 2)" in manifest.tokenizer_info["padding"]  # summary.json says so


# -- one UeDP round per checkpoint, LoRA and full fine-tuning -------------------------------------------------------
CASES = [("gpt2", "next_word", 4), ("gpt2", "next_word", 0), ("llama", "next_word", 4), ("llama", "next_word", 0),
         ("bert", "classification", 4), ("bert", "classification", 0), ("llama", "classification", 4)]


@pytest.mark.parametrize(("kind", "task", "r"), CASES, ids=[f"{k}-{t}-r{r}" for k, t, r in CASES])
def test_a_checkpoint_trains_one_uedp_round(runs, kind, task, r):
    cfg, summary = runs(kind, task, r)
    out = Path(cfg.federation.out_dir)
    ledger = json.loads((out / "ledger.json").read_text())["rounds"]
    assert len(ledger) == 1 and ledger[0]["method"] == "uedp" and summary["private"]
    assert 0 < summary["eps_uedp"] < float("inf") and np.isfinite(summary["final"][summary["metric"]])
    model = new_model(cfg, load_manifest(cfg))
    trainable, total = parameter_counts(model)
    sent = sum(w.size for w in get_weights(model))
    assert summary["noised_dimension"] == trainable == sent  # what is trained is what is sent and noised
    assert summary["trainable_share"] == pytest.approx(trainable / total)  # the same quotient of integer counts
    assert f"the noised dimension {trainable:,}" in summary["log"]
    assert summary["base_model"]["digest"] == base_digest(runs.checkpoints[kind])
    if r:
        assert summary["trainable_share"] < 0.1 and summary["base_model"]["lora"]["r"] == r
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        assert all("lora_" in n or "modules_to_save" in n for n in names), names
        assert any("modules_to_save" in n for n in names) == (task == "classification")  # the new head trains
    else:
        assert summary["trainable_share"] == 1.0 and summary["base_model"]["lora"] is None
    assert (out / ("hf_adapter" if r else "hf_model") / "README.md").is_file()


# the release's loading (every card snippet, the same logits): tests/test_release.py
def test_a_release_of_the_projects_tokenizer_starts_a_run_with_tokenizer_project(runs, tmp_path):
    """A GPT-2 trained from scratch with the project's public tokenizer is released with that tokenizer's digest
    in its config.json: model hf accepts it with tokenizer "project"; a checkpoint that records none is refused,
    naming both digests."""
    cfg = tiny_config(tmp_path / "scratch", model={"name": "gpt2", "options": {"n_layer": 1, "n_embd": 16}},
                      federation={"rounds": 1, "eval_every": 1})
    set_local_task_identity()
    run_server(LocalGrid(cfg, 8), cfg, stream=io.StringIO())
    release = tmp_path / "scratch" / "hf_model"
    project, _ = run_tokenizer(cfg, None)
    assert json.loads((release / "config.json").read_text())["uedp_tokenizer_digest"] == tokenizer_digest(project)
    again = _config(tmp_path / "again", release, tokenizer="project")
    tokenizer, info = run_tokenizer(again, None)
    assert info["source"] == "public" and tokenizer_digest(tokenizer) == tokenizer_digest(project)
    new_model(again, ModelShape(tokenizer.vocab_size, tokenizer.pad_id, None, tokenizer_digest(tokenizer)))
    foreign = _config(tmp_path / "foreign", runs.checkpoints["gpt2"], tokenizer="project")
    own = tokenizer_digest(load_hf_tokenizer(runs.checkpoints["gpt2"]))
    with pytest.raises(ConfigError, match=f"records none \\(its own tokenizer's digest is {own}\\)"):
        run_tokenizer(foreign, None)


def test_owners_keep_their_files_and_get_the_checkpoints_tokenizer(checkpoints, runs, tmp_path):
    """federation.data = owners with a checkpoint: the server ships the checkpoint's tokenizer (its special ids
    with it) and reads no private text; each owner encodes its own file with it and builds the model from its own
    copy of the base (the same directory here), whose tokenizer and digest it checks."""
    from runtime.local_grid import run_local
    from uedp.owner_files import write_owner_files

    runs("llama", "next_word", 4)  # the module's runs share the accounting of these privacy settings
    paths = write_owner_files(tmp_path / "owners", dataset="synthetic",
                              options={"num_users": 4, "min_sentences": 20, "max_sentences": 30})
    cfg = tiny_config(tmp_path / "run", model={"name": "hf", "options": {"path": str(checkpoints["llama"])},
                                               "lora": {"r": 4}},
                      entities={"detector": "rules"}, federation={"data": "owners", "num_nodes": 4, "rounds": 1,
                                                                  "eval_every": 1, "wait_timeout": 0.0},
                      privacy={"q_u": 1.0})  # every owner trains: at q_u 0.5 one round samples none 1 time in 16
    summary = run_local(cfg, data_paths=[str(p) for p in paths])
    row = operator_rows(tmp_path / "run")[0]
    assert row["sampled"] > 0 and row["ok"] == row["replies"] == row["sampled"] - row["missing"] > 0
    assert summary["tokenizer"]["source"] == "pretrained" and summary["base_model"]["lora"]["r"] == 4
    assert (tmp_path / "run" / "hf_adapter" / "adapter_model.safetensors").is_file()


# -- refusals ---------------------------------------------------------------------------------------------------
def test_the_gpt2_and_bert_entries_refuse_another_architecture_and_size_options(checkpoints):
    llama = load_hf_tokenizer(checkpoints["llama"])
    with pytest.raises(ConfigError, match=r"model 'gpt2' builds gpt2 models, but .* holds a 'llama' checkpoint .*use "
                                          r"model 'hf'"):
        build_model("gpt2", task="next_word", vocab_size=llama.vocab_size, pad_id=0,
                    pretrained=str(checkpoints["llama"]))
    with pytest.raises(ConfigError, match=r"model 'bert' builds bert models, but .* holds a 'gpt2' checkpoint"):
        build_model("bert", task="classification", num_labels=2, vocab_size=300, pad_id=0,
                    pretrained=str(checkpoints["gpt2"]))
    with pytest.raises(ConfigError, match=r"option\(s\) n_embd, n_layer are fixed by the checkpoint"):
        build_model("gpt2", task="next_word", vocab_size=300, pad_id=0, pretrained=str(checkpoints["gpt2"]),
                    n_layer=2, n_embd=64)
    with pytest.raises(ConfigError, match=r"option\(s\) hidden_size are fixed by the checkpoint"):
        build_model("bert", task="classification", num_labels=2, vocab_size=300, pad_id=0,
                    pretrained=str(checkpoints["bert"]), hidden_size=16)
    model = build_model("gpt2", task="next_word", vocab_size=300, pad_id=0, pretrained=str(checkpoints["gpt2"]))
    assert model.hf.config.n_embd == 16  # the checkpoint's size


def _edited(source: Path, target: Path, edit: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]) -> Path:
    """A copy of checkpoint `source` in `target` whose model.safetensors is `edit` of the original's tensors."""
    from safetensors.torch import load_file, save_file

    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    save_file(edit(load_file(target / "model.safetensors")), target / "model.safetensors", metadata={"format": "pt"})
    return target


def test_missing_or_mismatched_weights_are_refused_naming_them_unless_allowed(checkpoints, tmp_path, capsys):
    gone = ["lm_head.weight", "model.layers.0.self_attn.q_proj.weight"]
    broken = _edited(checkpoints["llama"], tmp_path / "broken", lambda w: {k: v for k, v in w.items() if k not in gone})
    tok = load_hf_tokenizer(broken)
    build = dict(task="next_word", vocab_size=tok.vocab_size, pad_id=tok.pad_id, path=str(broken))
    with pytest.raises(ConfigError) as refused:
        build_model("hf", **build)
    message = str(refused.value)
    assert str(broken) in message and "would start at random" in message and "allow_missing" in message
    assert f"missing {', '.join(gone)} (2)" in message
    capsys.readouterr()
    build_model("hf", **build, allow_missing=True)
    err = capsys.readouterr().err
    assert "WARNING" in err and "start at random (allow_missing: true)" in err and all(k in err for k in gone)
    key = "model.layers.0.mlp.up_proj.weight"
    reshaped = _edited(checkpoints["llama"], tmp_path / "reshaped", lambda w: {**w, key: w[key][:-1]})
    with pytest.raises(ConfigError, match=f"another shape {key} \\(1\\)"):
        build_model("hf", **{**build, "path": str(reshaped)})
    with pytest.raises(ConfigError, match="broken'.* weights the model needs are not in its files"):
        build_model("gpt2", task="next_word", vocab_size=300, pad_id=0, pretrained=str(_edited(
            checkpoints["gpt2"], tmp_path / "broken", lambda w: {k: v for k, v in w.items() if "c_fc.w" not in k})))


def test_a_foreign_tokenizer_of_the_same_size_is_refused(checkpoints, tmp_path):
    """An owner whose node holds the checkpoint with another tokenizer of the same size, or a server that ships a
    tokenizer that is not the checkpoint's: the ids would index the wrong embedding rows. Refused naming both
    digests."""
    own = load_hf_tokenizer(checkpoints["llama"])
    foreign_dir = Path(shutil.copytree(checkpoints["llama"], tmp_path / "foreign"))
    spec = json.loads((foreign_dir / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    a, b = "The", "he"  # two tokens of the same vocabulary, their ids swapped: same size, other ids
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (foreign_dir / "tokenizer.json").write_text(json.dumps(spec))
    foreign = load_hf_tokenizer(foreign_dir)
    assert foreign.vocab_size == own.vocab_size and foreign.encode("The") != own.encode("The")
    cfg = _config(tmp_path, checkpoints["llama"])
    with pytest.raises(ConfigError, match=f"the run's tokenizer has digest {tokenizer_digest(foreign)}, the "
                                          f"checkpoint's is {tokenizer_digest(own)}"):
        new_model(cfg, model_shape(foreign, owner_task(cfg)))
    new_model(cfg, model_shape(own, owner_task(cfg)))


def test_a_node_whose_base_differs_refuses_to_train(checkpoints, tmp_path):
    """The server sends its base digest with every training message; a node with another copy of the base (one
    weight changed) refuses (its error names the digests), so the round gets no update from it."""
    key = "transformer.h.0.mlp.c_fc.bias"
    other = _edited(checkpoints["gpt2"], tmp_path / "other", lambda w: {**w, key: w[key] + 1.0})
    ours, theirs = base_digest(checkpoints["gpt2"]), base_digest(other)
    with pytest.raises(BaseCheckpointMismatch, match=f"has digest {theirs}, the server trains from {ours}"):
        check_base("hf", {"path": str(other)}, ours)
    server = _every_user(_config(tmp_path / "server", checkpoints["gpt2"], lora={"r": 2}))
    node = _every_user(_config(tmp_path / "server", other, lora={"r": 2}))
    set_local_task_identity()
    run_server(LocalGrid(node, 8), server, stream=io.StringIO())
    row = operator_rows(tmp_path / "server")[0]
    assert row["sampled"] > 0 and row["failed"] == row["sampled"] and row["replies"] == row["ok"] == 0
    # a node's own copy elsewhere (node config model-path): the same files, so it trains
    copy = shutil.copytree(checkpoints["gpt2"], tmp_path / "copy")
    federation = dataclasses.replace(server.federation, out_dir=str(tmp_path / "ok"))
    server = dataclasses.replace(server, federation=federation)
    run_server(NodePathGrid(node, 8, model_path=str(copy)), server, stream=io.StringIO())
    row = operator_rows(tmp_path / "ok")[0]
    assert row["sampled"] > 0 and row["ok"] == row["sampled"] and row["failed"] == 0


class NodePathGrid(LocalGrid):
    """The in-process grid whose nodes name their own copy of the checkpoint (node config model-path)."""

    def __init__(self, cfg: RunConfig, num_nodes: int, *, model_path: str) -> None:
        super().__init__(cfg, num_nodes)
        self.model_path = model_path

    def context(self, node: int):
        context = super().context(node)
        context.node_config["model-path"] = self.model_path
        return context


# -- LoRA: the update is the adapters', clipped --------------------------------------------------------------
def test_an_adapter_update_above_beta_is_clipped_to_beta(checkpoints, tmp_path):
    """The client round of a LoRA model returns the adapters only; the client mod clips that update, taken whole,
    to beta (w_u = 1), as any model's: the accounting is unchanged (docs/proofs.md section 1)."""
    from client.update import client_update
    from uedp.config import ClientTrainConfig
    from uedp.flower.mod import bound_update, model_update
    from uedp.privacy.clipping import update_norm
    from uedp.protocol import RoundInstructions
    from uedp.training import LocalTraining

    cfg = _config(tmp_path, checkpoints["gpt2"], lora={"r": 4})
    prepare(cfg)
    weights = get_weights(new_model(cfg, load_manifest(cfg), seed=0))
    ins = RoundInstructions(round=1, mechanism="user_dp", q_e=0.5, q_s=0.5, k_cap=0, m_max=6, slot=-1, beta=0.05,
                            w_u=1.0, private=True)
    training = LocalTraining.from_config(ClientTrainConfig(lr=50.0, local_epochs=2, batch_size=8))
    new, _ = client_update(cfg, 1, weights, ins, training)
    raw = model_update(new, weights)
    assert len(raw) == 2  # lora_A and lora_B of the one layer's c_attn: nothing of the base is sent
    assert update_norm(raw) > 0.05  # the adapters moved beyond the clip
    # a float32 clip, nudged by (1 - 1e-6) at most to stay below beta (uedp.privacy.clipping): rel 1e-5
    assert update_norm(bound_update(raw, ins)) == pytest.approx(0.05, rel=1e-5)


def test_lora_settings_are_checked():
    with pytest.raises(ConfigError, match="model.lora needs a transformers model"):
        new_model(tiny_config(Path("x"), model={"lora": {"r": 4}}), ModelShape(300, 0, None))
    with pytest.raises(ConfigError, match="model.lora.dropout must lie in"):
        RunConfig.from_flat({"model.lora.r": 2, "model.lora.dropout": 1.0})
    with pytest.raises(ConfigError, match="model.init .* use one of the two"):
        RunConfig.from_flat({"model.lora.r": 2, "model.init": "start.pt"})
    assert LoraConfig(target_modules=" q_proj, v_proj ").modules() == ["q_proj", "v_proj"]


def test_hydra_presets_restate_the_lora_defaults_and_take_overrides():
    import dataclasses

    from omegaconf import OmegaConf

    conf = Path(__file__).parents[1] / "conf" / "model"
    for preset in ("hf", "gpt2", "bert"):
        assert OmegaConf.to_container(OmegaConf.load(conf / f"{preset}.yaml"))["lora"] == \
            dataclasses.asdict(LoraConfig()), preset
    cfg = compose_run_config(["model=hf", "model.options.path=/models/x", "model.lora.r=8",
                              "model.lora.target_modules='q_proj,v_proj'"])
    # the preset restates build_hf's defaults of the other options, so that they take plain overrides
    import inspect

    from uedp.models.hf import build_hf

    defaults = {k: p.default for k, p in inspect.signature(build_hf).parameters.items()}
    restated = {k: v for k, v in cfg.model.option_dict().items() if k != "path"}
    assert restated == {k: defaults[k] for k in ("tokenizer", "allow_missing", "special_tokens",
                                                 "gradient_checkpointing")}
    assert cfg.model.lora.r == 8
    assert compose_run_config(["model=hf", "model.options.path=/m", "model.options.tokenizer=project"]
                              ).model.option_dict()["tokenizer"] == "project"
    assert cfg.model.lora.modules() == ["q_proj", "v_proj"]
    with pytest.raises(ConfigError, match="missing value for model.options.path"):
        compose_run_config(["model=hf"])


@pytest.mark.e2e
def test_a_lora_run_in_the_flower_simulation(checkpoints, tmp_path):
    """The same LoRA round in Flower's simulation (Ray actors as nodes): each actor loads the base from the
    checkpoint directory, checks its digest, trains and sends the adapters; the release is the adapter."""
    from runtime.simulate import simulate

    cfg = _every_user(_config(tmp_path / "sim", checkpoints["llama"], lora={"r": 4}), users=4)
    summary = simulate(cfg)
    row = operator_rows(tmp_path / "sim")[0]
    assert row["sampled"] > 0 and row["ok"] == row["sampled"] and row["failed"] == 0
    assert summary["trainable_share"] < 0.1 and summary["base_model"]["lora"]["r"] == 4
    assert (tmp_path / "sim" / "hf_adapter" / "adapter_model.safetensors").is_file()
