"""The app's ServerApp. UeDP adds the strategy wrapper around FedAvg, its run store and the budget stop."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from uedp.flower import PrivacyBudgetExhausted, RunStore, UserEntityDP, base_records, read_places  # UeDP
from uedp_hf_app.task import load_model, perplexity, trainable

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    out = Path(str(cfg["out-dir"]))
    model, tokenizer = load_model(str(cfg["model-dir"]), int(cfg["lora-r"]))
    eval_texts = [json.loads(x)["text"] for x in Path(str(cfg["eval-path"])).read_text().splitlines()
                  if x.strip()] if cfg["eval-path"] else []

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        if not eval_texts:  # central evaluation on PUBLIC text only: never the owners' data
            return None
        model.load_state_dict(arrays.to_torch_state_dict(), strict=False)
        return MetricRecord({"perplexity": perplexity(model, tokenizer, eval_texts, int(cfg["max-len"]))})

    # UeDP: a deployment's places are the owners' registered keys (a file: `uedp fingerprint KEY.pub ...`); a
    # simulation's are its N nodes, by node id (refused on a deployment's grid)
    places = read_places(str(cfg["places"])) if cfg["places"] else int(cfg["num-owners"])  # UeDP
    strategy = UserEntityDP.from_run_config(  # UeDP: FedAvg applies the noisy mean of the clipped updates
        FedAvg(), cfg, places=places, num_rounds=int(cfg["num-server-rounds"]), store=RunStore(out),
        records=base_records(str(cfg["model-dir"])))  # UeDP: every node checks it trains from this base
    arrays = ArrayRecord(trainable(model))
    try:
        result = strategy.start(grid, arrays, int(cfg["num-server-rounds"]),
                                train_config=ConfigRecord({"lr": float(cfg["local-lr"]),
                                                           "epochs": int(cfg["local-epochs"])}),
                                evaluate_fn=evaluate)
        arrays = result.arrays
    except PrivacyBudgetExhausted:  # UeDP: the next round would have passed the target: keep the last model
        arrays = strategy.report.arrays
    model.load_state_dict(arrays.to_torch_state_dict(), strict=False)
    model.save_pretrained(out / "model")
    tokenizer.save_pretrained(out / "model")
    spent = strategy.privacy_spent()  # UeDP: the ledger's epsilons, one per claim
    (out / "privacy.json").write_text(json.dumps({**strategy.accountant.epsilons(), "claims": spent.claims,  # UeDP
                                                  "rounds": spent.num_releases,  # UeDP
                                                  "component": sys.modules["uedp"].__file__}, indent=1))  # UeDP
    print(f"privacy spent after {spent.num_releases} rounds: "  # UeDP
          + ", ".join(f"{k} = {v:.3f}" for k, v in spent.claims.items()) + f" at delta = {spent.delta:g}")  # UeDP
