"""DP-BART (local DP) beside UeDP and user-level DP on the same data, through the same server loop.

    python -m experiments.dp_bart [--dataset synthetic] [--task classification] [--epsilons 100 1000 10000]
                                  [--variants clv pr pr+ adept] [--pr-plus-epsilons 1000] [--replicates 1]
                                  [--out docs/figures]

Runs in-process (runner=local: the same server loop and client code as a Flower run, without Ray), each job
in OUT/dp_bart-DATASET-TASK/<name>/:
- `dp_bart` (strategy=dp_bart: every owner rewrites its training sentences once, the server trains on the
  pooled rewrites for rewrite.epochs epochs) for each variant and per-document epsilon (PR+ only at
  --pr-plus-epsilons: one rewriter trained per epsilon; `adept`: the ADePT mechanism on our model, norm clip,
  docs/proofs.md section 10), and at epsilon 1e9 (no meaningful noise: the rewriter's own loss of information);
- `uedp` and `user_dp` at their central target epsilon (8, the main job's), and noiseless `fedavg` on the
  original text;
- `central-original`: noiseless CENTRAL training on the pooled original training sentences with the same
  model, epochs and optimizer as a dp_bart job (not private; a reference only). DP-BART trains centrally on
  pooled text for rewrite.epochs epochs, the federated methods for federation.rounds rounds of sampled
  users: their numbers differ by training procedure too, and this job separates what the rewriting costs
  (dp_bart against central-original) from what federated training costs (fedavg against central-original).
Then, on 1,000 training sentences with gold entities (synthetic corpus) or detected ones, the rewrites' BLEU
against the originals and the fraction of entity strings that survive, per setting. Writes
OUT/dp_bart-DATASET-TASK.md/.json/.png. Local per-document epsilon and central eps_uedp are different
units: the table gives each job's own guarantee (per document, per user over rewrite.max_documents
documents, per entity in f documents) and never puts them on one axis. With --replicates R, each CLV and PR+
setting runs R times (jobs NAME, NAME-r1, ...: rewrite.replicate = k, so every owner rewrites again with
fresh noise, and the downstream model starts from a new initialisation); a second table gives each
setting's mean and range, the plot the mean with the range as bars. Classification jobs all use the
project's classification default model (uedp.config.CLASSIFICATION_MODEL: frozen MiniLM, linear head).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.local_grid import run_local
from uedp.config import CLASSIFICATION_MODEL, RunConfig
from uedp.markdown import table as md_table
from uedp.plotting import pyplot, save
from uedp.rewriting.mechanism import MECHANISM_NAMES
from uedp.summary import has_summary, read_summary, write_summary

NO_NOISE = 1e9  # per-document epsilon whose noise is negligible next to the clip bound
CENTRAL_EPSILON = 8.0
CENTRAL = "central-original"  # the job name of the noiseless central reference on the original text


@dataclass(frozen=True)
class Comparison:
    """What one comparison runs (experiments.dp_bart's options): the corpus (`path`: a JSONL corpus's file), the
    task, the per-document epsilons of each variant (`pr_epsilons`, `adept_epsilons`: None for `epsilons`; PR+
    only at `pr_plus_epsilons`), the users, the replicates of each CLV and PR+ setting, where the tables go
    (`out`) and where the jobs run (`runs`)."""

    dataset: str
    task: str
    epsilons: tuple[float, ...]
    variants: tuple[str, ...]
    pr_plus_epsilons: tuple[float, ...]
    users: int
    replicates: int
    out: Path
    runs: Path
    path: str = ""
    pr_epsilons: tuple[float, ...] | None = None
    adept_epsilons: tuple[float, ...] | None = None

    def config(self, out: Path, **groups: dict[str, Any]) -> RunConfig:
        """The RunConfig of a job on this comparison's corpus and task, writing to `out`."""
        return _config(out, self.dataset, self.task, self.path, self.users, **groups)

    @property
    def command(self) -> str:
        """The experiments.dp_bart command line that runs this comparison."""
        path = f"--path {self.path} " if self.path else ""
        extra = "".join(f" --{flag} " + _numbers(values) for flag, values in (
            ("pr-epsilons", self.pr_epsilons), ("adept-epsilons", self.adept_epsilons)) if values)
        return (f"python -m experiments.dp_bart --dataset {self.dataset} {path}--users {self.users} "
                f"--task {self.task} --epsilons {_numbers(self.epsilons)} --variants {' '.join(self.variants)} "
                f"--pr-plus-epsilons {_numbers(self.pr_plus_epsilons)}{extra} --replicates {self.replicates}")


def _numbers(values: tuple[float, ...]) -> str:
    return " ".join(f"{e:g}" for e in values)


def _dataset_options(dataset: str, path: str, users: int) -> dict[str, Any]:
    if dataset == "jsonl":
        if not path:
            raise ValueError("--dataset jsonl needs --path FILE (a bring-your-own JSONL corpus)")
        return {"path": path}
    return {"max_users": 2 * users} if dataset == "bbc_news" else {"num_users": users}


def _config(out: Path, dataset: str, task: str, path: str = "", users: int = 200, **groups: dict[str, Any]
            ) -> RunConfig:
    options = json.dumps(_dataset_options(dataset, path, users))
    nested: dict[str, Any] = {"dataset": {"name": dataset, "options": options},
        "task": {"name": task, "max_len": 64 if task == "classification" else 32},
        "entities": {"detector": "auto"}, "federation": {"out_dir": str(out)}}
    if task == "classification":  # the project's classification default (frozen MiniLM + linear head) for
        # every job: the dp_bart downstream model, central-original and the federated references alike
        nested["model"] = {"name": CLASSIFICATION_MODEL.name, "options": CLASSIFICATION_MODEL.options}
    for group, values in groups.items():
        nested.setdefault(group, {}).update(values)
    return RunConfig.from_nested(nested)


REPLICATED = ("clv", "pr+")  # the variants run --replicates times (fresh rewrite noise, new downstream model)


def replicate_of(name: str) -> tuple[str, int]:
    """(the job's setting, its replicate): "dp_bart-clv-eps1000-r2" -> ("dp_bart-clv-eps1000", 2); 0 unsuffixed."""
    base, _, k = name.rpartition("-r")
    return (base, int(k)) if base and k.isdigit() else (name, 0)


def jobs(comparison: Comparison) -> list[tuple[str, dict[str, Any]]]:
    """Each job's name and config groups. A replicate k > 0 of a setting is job NAME-rk with rewrite.replicate =
    k: every owner rewrites again (fresh noise, its own cache entry) and the downstream model starts from a
    fresh initialisation (a CSPRNG draw, as in every private run)."""
    out: list[tuple[str, dict[str, Any]]] = []
    for variant in comparison.variants:
        epsilons = {"pr+": comparison.pr_plus_epsilons, "pr": comparison.pr_epsilons,
                    "adept": comparison.adept_epsilons}.get(variant) or comparison.epsilons
        for eps in epsilons:
            for k in range(comparison.replicates if variant in REPLICATED else 1):
                out.append((f"dp_bart-{variant}-eps{eps:g}" + (f"-r{k}" if k else ""), {
                    "strategy": {"name": "dp_bart"},
                    "rewrite": {"variant": variant, "epsilon": float(eps), "replicate": k}}))
    out.append((f"dp_bart-clv-eps{NO_NOISE:g}", {"strategy": {"name": "dp_bart"},
                                                  "rewrite": {"variant": "clv", "epsilon": NO_NOISE}}))
    for strategy in ("uedp", "user_dp"):
        out.append((strategy, {"strategy": {"name": strategy}, "privacy": {"target_epsilon": CENTRAL_EPSILON}}))
    out.append(("fedavg", {"strategy": {"name": "fedavg"}}))
    out.append((CENTRAL, {"strategy": {"name": "fedavg"}}))
    return out


def central_reference(cfg: RunConfig) -> dict[str, Any]:
    """Noiseless central training on the pooled ORIGINAL training sentences of every user, as server/local_dp.py
    trains on the pooled rewrites (same model, rewrite.epochs epochs, train.* optimizer); summary.json in
    federation.out_dir. Not private: it is the reference that isolates what the rewriting costs."""
    from server.local_dp import all_cores, pooled_epochs
    from uedp.pipeline import load_split, model_spec, server_data

    out = Path(cfg.federation.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = server_data(cfg)
    model = data.new_model(model_spec(cfg))
    train = load_split(cfg, "train")
    final: dict[str, float] = {}
    with all_cores():
        for _epoch, _loss, _steps, metrics in pooled_epochs(model, train, data.test, cfg):
            final = metrics
    summary = {"strategy": CENTRAL, "rounds": cfg.rewrite.epochs, "documents": len(train), "final": final,
               "eps_uedp": math.inf, "eps_user": math.inf, "private": False,
               "warning": "not private: central training on the original text (reference)"}
    write_summary(out, summary, kind="reference")
    return summary


def stem_of(comparison: Comparison) -> str:
    """The comparison's name: dp_bart-DATASET[-uUSERS]-TASK (a JSONL corpus by its file's stem)."""
    dataset = Path(comparison.path).stem if comparison.dataset == "jsonl" else comparison.dataset
    other = comparison.users != 200 and comparison.dataset != "jsonl"  # another corpus
    users = f"-u{comparison.users}" if other else ""
    return f"dp_bart-{dataset}{users}-{comparison.task}"


TIMING = "timing.json"  # in the comparison's run directory: each finished job's wall-clock seconds


def reported(comparison: Comparison) -> dict[str, Any]:
    """The comparison's last written report (OUT/STEM.json: results, survival, timing, rewriter_training_s), or
    {}: what --report-only falls back on for a job whose run directory is gone (another machine, a clean
    checkout)."""
    path = comparison.out / f"{stem_of(comparison)}.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def run_jobs(comparison: Comparison, root: Path, prior: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Run every job not finished yet (a finished one is read back: rewriting again would spend again). With
    `prior` (--report-only), run nothing: a job without a run directory is taken from the prior report, or
    left out (and named as not finished in the output)."""
    results: dict[str, dict[str, Any]] = {}
    timing_path = root / TIMING
    timing = json.loads(timing_path.read_text()) if timing_path.is_file() else {}
    for name, groups in jobs(comparison):
        job = root / name
        if has_summary(job):  # finished before: reuse (rewriting again would spend again)
            results[name] = read_summary(job)
            continue
        if prior is not None:
            if name in prior.get("results", {}):
                results[name] = prior["results"][name]
            else:
                print(f"== {name}: not finished (skipped: --report-only)", flush=True)
            continue
        t0 = time.monotonic()
        print(f"== {name}", flush=True)
        cfg = comparison.config(job, **groups)
        results[name] = central_reference(cfg) if name == CENTRAL else run_local(cfg)
        timing[name] = round(time.monotonic() - t0, 1)
        root.mkdir(parents=True, exist_ok=True)
        timing_path.write_text(json.dumps(timing, indent=1) + "\n")
        print(f"   done in {timing[name]:.0f} s", flush=True)
    return results


def prior_survival(prior: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The survival rows of a prior report, each with its rewriter's training seconds put back (write_outputs
    stores them apart)."""
    training = prior.get("rewriter_training_s", {})
    return {n: {**v, **({"rewriter_training_s": training[n]} if n in training else {})}
            for n, v in prior.get("survival", {}).items()}


def write_outputs(comparison: Comparison, results: dict[str, dict[str, Any]], surv: dict[str, dict[str, Any]],
                  root: Path, *, seconds: float, prior: dict[str, Any] | None = None) -> str:
    """OUT/STEM.md (tables, compute time, the command), .json and .png; returns the markdown. The jobs' timing
    comes from the run directory, or from `prior` (a report written before) for the jobs it lacks."""
    stem = stem_of(comparison)
    timing_path = root / TIMING
    timing = {**(prior or {}).get("timing", {}),
              **(json.loads(timing_path.read_text()) if timing_path.is_file() else {})}
    training = {n: v.pop("rewriter_training_s") for n, v in surv.items() if "rewriter_training_s" in v}
    train_text = "; ".join(f"{n}: {s:.0f} s" for n, s in training.items())
    missing = [n for n, _ in jobs(comparison) if n not in results]
    unsampled = [n for n in results if n.startswith("dp_bart-") and not replicate_of(n)[1] and n not in surv]
    text = (f"{render(comparison, results, surv)}\n\n"
            f"Compute: {sum(timing.values()):.0f} s over the {len(timing)} timed jobs "
            f"(each job's seconds in {root / TIMING}; the first job of a variant includes training its rewriter); "
            f"rewriter training, from each rewriter's own log (a PR+ one includes its CLV and PR stages): "
            f"{train_text or 'n/a'}. "
            + ("This call: --report-only (nothing run; jobs without a run directory read from the previous report)."
               if prior is not None else f"This call: {seconds:.0f} s (finished jobs reused).")
            + (f" NOT FINISHED (not in the tables): {', '.join(missing)}." if missing else "")
            + (f" No rewrite sample (BLEU and entity survival '-'; run without --report-only): "
               f"{', '.join(unsampled)}." if unsampled else "")
            + f"\n\nCommand: `{comparison.command}`\n")
    comparison.out.mkdir(parents=True, exist_ok=True)
    (comparison.out / f"{stem}.md").write_text(text)
    (comparison.out / f"{stem}.json").write_text(json.dumps(
        {"results": results, "survival": surv, "timing": timing, "rewriter_training_s": training},
        indent=1, default=str))
    plot(comparison, results, comparison.out / f"{stem}.png")
    return text


def compare(comparison: Comparison, *, report_only: bool = False) -> str:
    """The whole comparison: run the jobs not finished yet in RUNS/STEM (with `report_only`, none: the finished
    ones, else the previous report in OUT), measure the rewrites' survival, write OUT/STEM.md/.json/.png; returns
    the markdown."""
    t0 = time.monotonic()
    root = comparison.runs / stem_of(comparison)
    prior = reported(comparison) if report_only else None
    results = run_jobs(comparison, root, prior)
    surv = prior_survival(prior) if prior is not None else survival(comparison, list(results))
    return write_outputs(comparison, results, surv, root, seconds=time.monotonic() - t0, prior=prior)


def survival(comparison: Comparison, names: list[str], sample: int = 1000) -> dict[str, dict[str, float]]:
    """BLEU and entity survival of each DP-BART setting on `sample` training sentences holding entities."""
    import numpy as np

    from uedp.data.loaders import materialize
    from uedp.entities.annotations import annotate_cached
    from uedp.pipeline import rewriter_corpus
    from uedp.privacy.noise import secure_generator
    from uedp.rewriting.evaluation import corpus_bleu, entity_survival
    from uedp.rewriting.rewrite import mechanism_for, rewrite_texts, rewriter_for

    base = comparison.config(Path("unused"))
    _, corpus = materialize(base.dataset.name, **base.loader_options())
    _, ann = annotate_cached(corpus, base.detector())
    rows = corpus.table.to_pylist()
    spans = {r["sid"]: [(e["start"], e["end"], e["category"]) for e in (e_row or [])]
             for r, e_row in zip(ann.to_pylist(), ann.column("entities").to_pylist())}
    train = [r for r in rows if r["split"] == "train" and spans.get(r["sid"])]
    pick = np.random.default_rng(0).choice(len(train), size=min(sample, len(train)), replace=False)
    texts = [train[i]["text"] for i in sorted(pick)]
    ents = [spans[train[i]["sid"]] for i in sorted(pick)]
    out = {}
    for name in names:
        if not name.startswith("dp_bart-") or replicate_of(name)[1]:  # one rewrite sample per setting
            continue
        _, variant, eps = name.split("-", 2)
        cfg = comparison.config(Path("unused"), strategy={"name": "dp_bart"},
                                rewrite={"variant": variant, "epsilon": float(eps[3:])})
        settings = cfg.rewrite_settings()
        rewriter = rewriter_for(settings, rewriter_corpus(cfg), progress=False)
        rng, _ = secure_generator(None)
        rewrites = rewrite_texts(texts, rewriter, mechanism_for(rewriter, settings), rng)
        out[name] = {"bleu": corpus_bleu(rewrites, texts), **entity_survival(texts, rewrites, ents),
                     "example": [texts[0], rewrites[0]],
                     "rewriter_training_s": sum(float(stage.get("seconds", 0.0)) for stage in rewriter.log)}
    return out


def figure_table(comparison: Comparison, results: dict[str, dict[str, Any]], metric: str) -> str:
    """The Fig. 3 numbers as one table: a row per variant, a column per per-document epsilon, each cell the mean
    of `metric` over the setting's replicates (and their min - max when more than one); under it, what each
    epsilon means per user and per entity (the same for every variant: one mechanism calibration per epsilon)."""
    cells: dict[tuple[str, float], list[float]] = {}
    local_at: dict[float, dict[str, Any]] = {}
    for name, s in results.items():
        if not name.startswith("dp_bart-") or s.get("eps_local_document", NO_NOISE) >= NO_NOISE:
            continue
        variant = name.split("-")[1]
        eps = float(s["eps_local_document"])
        cells.setdefault((variant, eps), []).append(float(s["final"].get(metric, math.nan)))
        local_at.setdefault(eps, s.get("local") or {})
    epsilons = sorted(local_at)
    if not epsilons:
        return ""

    def cell(values: list[float] | None) -> str:
        if not values:
            return "-"
        mean = sum(values) / len(values)
        return f"{mean:.3f}" + (f" ({min(values):.3f}-{max(values):.3f})" if len(values) > 1 else "")

    rows = [[MECHANISM_NAMES[v], *[cell(cells.get((v, e))) for e in epsilons]] for v in comparison.variants]
    rows.append(["per user (PLD, over the cap)", *[f"{local_at[e].get('epsilon_user', math.nan):.4g}"
                                                    for e in epsilons]])
    rows.append(["entity in 4 documents", *[f"{(local_at[e].get('epsilon_entity') or {}).get('4', math.nan):.4g}"
                                             for e in epsilons]])
    refs = [f"{label} {results[n]['final'].get(metric, math.nan):.3f}" for n, label in (
        (CENTRAL, "original text (central training)"), (f"dp_bart-clv-eps{NO_NOISE:g}", "no-noise CLV rewrites"))
        if n in results]
    return (md_table([f"{metric} at per-document eps", *[f"{e:g}" for e in epsilons]], rows)
            + ("\n\nAt eps = infinity: " + "; ".join(refs) + "." if refs else ""))


def render(comparison: Comparison, results: dict[str, dict[str, Any]], surv: dict[str, dict[str, float]]) -> str:
    metric = "macro_f1" if comparison.task == "classification" else "perplexity"
    rows = []
    for name, s in results.items():
        local = s.get("local") or {}
        ent = local.get("epsilon_entity") or {}
        guarantee = (f"local: {local['epsilon_document']:g} per document; {local['epsilon_user']:.4g} per user "
                     f"({local['documents_per_user']} docs); entity in 4 / 32 docs: {ent.get('4', math.nan):.4g} / "
                     f"{ent.get('32', math.nan):.4g}" if local else
                     "none (noiseless)" if s["eps_uedp"] == math.inf and s["eps_user"] == math.inf else
                     f"central: eps_uedp {s['eps_uedp']:.3g}, eps_user {s['eps_user']:.3g}")
        sv = surv.get(name, {})
        rows.append([name, guarantee, f"{s['final'].get(metric, math.nan):.4g}",
                     f"{s['final'].get('error', math.nan):.3f}" if metric == "macro_f1" else "-",
                     f"{sv['bleu']:.1f}" if sv else "-", f"{sv['fraction']:.3f}" if sv else "-",
                     "yes" if s["private"] else f"no ({s.get('warning') or 'no guarantee'})"])
    head = ["job", "guarantee (its own units)", metric, "error", "BLEU of rewrites", "entity survival", "private"]
    figure = figure_table(comparison, results, metric)
    text = (f"The figure's numbers (mean over replicates, min-max in brackets):\n\n{figure}\n\nEvery job:\n\n"
            if figure else "") + md_table(head, rows)
    spread = replicate_rows(results, metric)
    if spread:
        text += "\n\nReplicates (fresh rewrite noise and a new downstream model each):\n\n" + md_table(
            ["setting", "replicates", f"{metric} mean", f"{metric} min - max", "error mean"],
            [[n, str(c), f"{m:.4g}", f"{lo:.4g} - {hi:.4g}", f"{e:.3f}"] for n, c, m, lo, hi, e in spread])
    return text


def replicate_rows(results: dict[str, dict[str, Any]], metric: str) -> list[tuple[str, int, float, float, float,
                                                                                    float]]:
    """Per setting run more than once: (setting, replicates, mean, min, max of `metric`, mean error)."""
    groups: dict[str, list[dict[str, float]]] = {}
    for name, s in results.items():
        groups.setdefault(replicate_of(name)[0], []).append(s["final"])
    out = []
    for name, finals in groups.items():
        if len(finals) > 1:
            values = [f.get(metric, math.nan) for f in finals]
            errors = [f.get("error", math.nan) for f in finals]
            out.append((name, len(finals), sum(values) / len(values), min(values), max(values),
                        sum(errors) / len(errors)))
    return out


def plot(comparison: Comparison, results: dict[str, dict[str, Any]], path: Path) -> None:
    metric = "macro_f1" if comparison.task == "classification" else "perplexity"
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for variant in comparison.variants:
        by_eps: dict[float, list[float]] = {}
        for n, s in results.items():
            if n.startswith(f"dp_bart-{variant}-") and s["eps_local_document"] < NO_NOISE:
                by_eps.setdefault(s["eps_local_document"], []).append(s["final"][metric])
        if by_eps:
            xs = sorted(by_eps)
            mean = [sum(by_eps[x]) / len(by_eps[x]) for x in xs]
            low = [m - min(by_eps[x]) for m, x in zip(mean, xs)]
            high = [max(by_eps[x]) - m for m, x in zip(mean, xs)]
            ax.errorbar(xs, mean, yerr=[low, high], marker="o", capsize=3,
                        label=f"{MECHANISM_NAMES[variant]}" + (" (bars: replicates' range)" if variant in REPLICATED
                                                                 else ""))
    styles = {"uedp": "UeDP (central eps_uedp 8)", "user_dp": "user-level DP (central eps_user 8)",
              "fedavg": "noiseless FedAvg, original text", f"dp_bart-clv-eps{NO_NOISE:g}": "no-noise rewrites",
              CENTRAL: "noiseless central training, original text"}
    for (name, label), ls in zip(styles.items(), ("-", "--", ":", "-.", (0, (1, 4)))):
        if name in results:
            ax.axhline(results[name]["final"][metric], linestyle=ls, color="grey", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("DP-BART: local epsilon per document (not comparable with the central epsilons)")
    ax.set_ylabel(metric)
    ax.set_title(f"{comparison.dataset}, {comparison.task}")
    ax.legend(fontsize=7)
    save(fig, path)
