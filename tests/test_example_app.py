"""The example Flower app of its own (examples/uedp-hf-app: its own ServerApp, ClientApp, config keys and a
Hugging Face causal LM loaded with from_pretrained from a local directory), run with `flwr run` against the
INSTALLED package: a wheel built from the repository, installed with --no-deps into a fresh venv, from a
temporary directory outside the checkout.

The venv and the wheel: tests/installed.py (flwr==1.42.0 installed into the venv, NETWORK: PyPI or pip's
cache; every other dependency reused from this environment). The only `uedp` there is the wheel's, which the
app records (privacy.json's "component").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.installed import ROOT, venv_with
from tests.local_superlink import local_flwr_env, stop_superlinks

EXAMPLE = ROOT / "examples" / "uedp-hf-app"
USERS = {
    "ana": ["Ana wrote to bob@example.com about the meeting.", "The weather was fine today.",
            "Call me at +44 20 7946 0018 tomorrow.", "We walked along the river.", "A quiet evening at home."],
    "ben": ["Ben sent the notes to ana@example.org yesterday.", "The train was late again.",
            "My number is +1 415 555 0100.", "Coffee first, then work.", "The garden needs water."],
    "cy": ["cy@example.net shared the photos.", "It rained all afternoon.", "Lunch was soup and bread.",
           "The library closes at six.", "Text +33 1 23 45 67 89 when you land."],
    "dee": ["The bus was full this morning.", "Write to dee@example.com for the tickets.",
            "A long walk by the sea.", "The cat slept all day.", "Dinner with friends tonight."],
}


def tiny_checkpoint(directory: Path) -> Path:
    """A 1-layer GPT-2 and a word-level tokenizer of the example's words, saved with save_pretrained."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    words = sorted({w for texts in USERS.values() for t in texts for w in pre_tokenizers.Whitespace()
                    .pre_tokenize_str(t) for w in [w[0]]})
    vocab = {w: i for i, w in enumerate(["<pad>", "<unk>", "</s>", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="</s>")
    fast.save_pretrained(directory)
    config = GPT2Config(vocab_size=len(vocab), n_positions=64, n_embd=16, n_layer=1, n_head=2,
                        pad_token_id=0, eos_token_id=2, bos_token_id=2)
    GPT2LMHeadModel(config).save_pretrained(directory)
    return directory


@pytest.mark.e2e
def test_the_example_app_runs_on_the_installed_package(tmp_path, uedp_wheel):
    venv = venv_with(tmp_path, "1.42.0", uedp_wheel).parent.parent
    model_dir = tiny_checkpoint(tmp_path / "checkpoint")
    data = tmp_path / "owners.jsonl"
    data.write_text("".join(json.dumps({"user": u, "text": t}) + "\n" for u, texts in USERS.items() for t in texts))
    public = tmp_path / "public.jsonl"  # central evaluation on text that is no owner's
    public.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("The bus was late.", "A walk by the sea.")))
    app = shutil.copytree(EXAMPLE, tmp_path / "work" / "uedp-hf-app")  # outside the checkout
    out = tmp_path / "out"
    overrides = tmp_path / "run-config.toml"
    overrides.write_text(
        f'model-dir = "{model_dir}"\ndata-path = "{data}"\neval-path = "{public}"\nout-dir = "{out}"\n'
        'detector = "rules"\nnum-server-rounds = 2\nnum-owners = 4\nlora-r = 2\n'
        "uedp.privacy.q_u = 1.0\nuedp.privacy.target_epsilon = 20.0\n")
    home = tmp_path / "flwr-home"
    env = local_flwr_env(home, PATH=f"{venv / 'bin'}:{os.environ.get('PATH', '')}", HF_HUB_OFFLINE="1",
                         TRANSFORMERS_OFFLINE="1", PYTHONPATH="", UEDP_CACHE_DIR=str(tmp_path / "cache"))
    t0 = time.monotonic()
    try:
        proc = subprocess.run([str(venv / "bin" / "flwr"), "run", str(app), "--stream", "--run-config",
                               str(overrides), "--federation-config", "num-supernodes=4 client-resources-num-cpus=1"],
                              cwd=tmp_path / "work", env=env, capture_output=True, text=True, timeout=420)
    finally:
        stop_superlinks(home)
    log = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, log
    output = proc.stdout + proc.stderr  # what `flwr run` shows: the ServerApp's output
    assert "uedp (uedp): z=" in output, log  # the wrapper's set-up line reaches it
    assert "privacy spent after 2 rounds: eps_uedp = " in output, log  # the app's last line
    assert "'replies'" not in output and "'missing'" not in output  # no count of who took part
    assert len([line for line in output.splitlines() if "[ROUND 2/2]" in line]) == 1  # every line once
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["component"].startswith(str(venv)), privacy["component"]  # the wheel's uedp, not the checkout's
    assert privacy["rounds"] == 2 and 0 < privacy["eps_uedp"] <= 20.0 and privacy["eps_undetected"] <= 20.0
    assert privacy["claims"] == {"eps_uedp": privacy["eps_uedp"], "eps_undetected": privacy["eps_undetected"]}
    rows = [json.loads(x) for x in (out / "operator.jsonl").read_text().splitlines()[1:]]
    assert [r["replies"] for r in rows] == [4, 4]  # every owner's update counted (the probe passed: the mod)
    ledger = json.loads((out / "ledger.json").read_text())
    assert [r["round"] for r in ledger["rounds"]] == [1, 2] and ledger["rounds"][0]["method"] == "uedp"
    from peft import AutoPeftModelForCausalLM

    assert (out / "model" / "adapter_config.json").is_file()  # lora-r: the release is the adapter
    AutoPeftModelForCausalLM.from_pretrained(out / "model", local_files_only=True)  # it loads back on its base
    print(f"example app: {time.monotonic() - t0:.1f} s with flwr run")


def test_the_documented_diff_is_the_example_apps():
    """docs/flower-component.md's diff from a plain FedAvg app: every hunk's new side is a contiguous block of
    the example's file, so the page shows the code that runs (the e2e test above)."""
    import re

    text = (ROOT / "docs" / "flower-component.md").read_text()
    (diff,) = re.findall(r"```diff\n(.*?)```", text, flags=re.S)
    files = re.split(r"^--- a/.*\n\+\+\+ b/(.*)\n", diff, flags=re.M)[1:]
    assert len(files) == 4  # two files: (name, hunks) pairs
    for name, body in zip(files[::2], files[1::2]):
        lines = (EXAMPLE / name).read_text().splitlines()
        for hunk in re.split(r"^@@.*@@\n", body, flags=re.M)[1:]:
            new = [x[1:] for x in hunk.splitlines() if x[:1] in (" ", "+")]
            assert any(lines[i:i + len(new)] == new for i in range(len(lines))), (name, new[:3])
