"""A public start: the run's model pretrained on PUBLIC text (uedp/pretraining.py), saved for a private run to
start from (`model.init=OUT`), its training record beside it (OUT with suffix .json), and optionally exported as
a Hugging Face checkpoint directory (uedp.models.export.export_public_start).
"""

from __future__ import annotations

import json
from pathlib import Path

from uedp.config import RunConfig
from uedp.models.export import export_public_start
from uedp.models.public_start import save_public_start
from uedp.pipeline import pretrain_run
from uedp.pretraining import pretrain, public_text


def public_start(cfg: RunConfig, public: str, *, public_users: int, epochs: int, lr: float, batch_size: int,
                 out: Path | None = None, hf_out: Path | None = None) -> list[str]:
    """Pretrain `cfg`'s model and tokenizer on the public corpus `public` (synthetic: `public_users` personas),
    write it to OUT (default outputs/public_start/PUBLIC.pt) and OUT.json, and with `hf_out` the Hugging Face
    checkpoint directory; returns one line per file written, saying how a run starts from it."""
    texts, description = public_text(public, public_users=public_users)
    model, tokenizer, history = pretrain(pretrain_run(cfg), texts, epochs=epochs, lr=lr, batch_size=batch_size)
    out = out or Path(f"outputs/public_start/{Path(public).stem}.pt")
    details = {"epochs": epochs, "optimizer": "adam", "lr": lr, "batch_size": batch_size,
               "sentences": len(texts), "held_out_perplexity": history[-1]["perplexity"]}
    save_public_start(out, model, model_name=cfg.model.name, model_options=cfg.model.option_dict(),
                      tokenizer=tokenizer, corpus=description, details=details)
    out.with_suffix(".json").write_text(json.dumps({"corpus": description, **details, "history": history}, indent=1))
    written = [f"wrote {out} (start a run from it with model.init={out})"]
    if hf_out:
        folder = export_public_start(hf_out, model, tokenizer=tokenizer, corpus=description, details=details)
        written.append(f"wrote {folder} (start a run from it with model=hf model.options.path={folder} "
                       "model.options.tokenizer=project)")
    return written
