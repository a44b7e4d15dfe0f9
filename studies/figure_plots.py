"""A figure's plot, by its kind (`PLOTS`): utility against the target epsilon per protected category
(`plot_utility`), against q_s (`plot_qs`), against k_cap and q_e (`plot_kcap`), against the population
(`plot_population`), per public start (`plot_public_start`) and against K, the other holders of an entity
(`plot_matched`). Each plots a figure's summary (studies/figure_tables.py): mean and standard deviation over
replicates, settings without a finite mean left out.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from studies.figure_settings import COHORT, EPSILONS, Figure
from studies.figure_tables import finite_mean, method_label, metric_of
from uedp.plotting import pyplot, save


def _ref(ax, s: dict[str, Any], label: str, color: str) -> None:
    if "mean" not in s:
        return
    ax.axhline(s["mean"], linestyle="--", color=color, linewidth=1)
    ax.annotate(f"{label}: {s['mean']:.4g}", (0.01, s["mean"]), xycoords=("axes fraction", "data"), fontsize=7,
                va="bottom", color=color)


def plot_utility(fig: Figure, summary: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    cats = list(dict.fromkeys(s["entities.protected"] for s in summary if "entities.protected" in s))
    figure, axes = plt.subplots(1, len(cats), figsize=(4.2 * len(cats) + 0.8, 4.2), sharey=True, squeeze=False)
    metric = metric_of(summary)
    fedavg = next((s for s in summary if s.get("strategy") == "fedavg"), {})
    user = sorted((float(s["privacy.target_epsilon"]), s) for s in summary
                  if s.get("strategy") == "user_dp" and finite_mean(s))
    for ax, cat in zip(axes[0], cats):
        uedp = sorted((float(s["privacy.target_epsilon"]), s) for s in summary
                      if s.get("strategy") == "uedp" and s.get("entities.protected") == cat and finite_mean(s))
        for pts, label, color in ((uedp, "UeDP f_E+ (eps_uedp)", "tab:orange"),
                                  (user, "user-level DP (eps_user; no entity guarantee)", "black")):
            if pts:
                ax.errorbar([e for e, _ in pts], [s["mean"] for _, s in pts], yerr=[s["sd"] for _, s in pts],
                            marker="o", capsize=3, label=label, color=color)
        _ref(ax, fedavg, "FedAvg, no DP", "tab:green")
        _ref(ax, next((s for s in summary if s.get("strategy") == "deid" and s.get("entities.protected") == cat), {}),
             "de-identification, no guarantee", "tab:purple")
        initial = next((s["initial"] for s in summary if "initial" in s), None)
        if initial is not None:
            _ref(ax, {"mean": initial}, "untrained", "gray")
        ax.set_xscale("log", base=2)
        ticks = sorted({e for e, _ in uedp + user}) or list(EPSILONS)
        ax.set_xticks(ticks, [f"{e:g}" for e in ticks])
        ax.minorticks_off()
        ax.set_title(f"protected: {cat}", fontsize=9)
        ax.set_xlabel("target epsilon (each method calibrated to its own claim)", fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel(f"test {metric} (mean ± sd over replicates)")
    if metric == "perplexity":
        axes[0][0].set_yscale("log")
    axes[0][0].legend(fontsize=7, loc="upper right")
    save(figure, path, title=fig.title)


def plot_qs(fig: Figure, summary: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    figure, ax = plt.subplots(figsize=(7, 4.5))
    pts = sorted((float(s["privacy.q_s"]), s) for s in summary if "privacy.q_s" in s and finite_mean(s))
    ax.errorbar([q for q, _ in pts], [s["mean"] for _, s in pts], yerr=[s["sd"] for _, s in pts], marker="o",
                capsize=3, color="tab:orange", label="UeDP f_E+ (test perplexity)")
    _ref(ax, next((s for s in summary if s.get("strategy") == "uedp_naive"), {}), "UeDP f_E (q_s unused)",
         "tab:blue")
    ax.set_xlabel("q_s (sampling rate of extended entities: sentences with no detected entity)")
    ax.set_ylabel("test perplexity (mean ± sd)")
    ax.grid(True, alpha=0.3)
    twin = ax.twinx()
    twin.plot([q for q, _ in pts], [s["eps_undetected"] for _, s in pts], "s:", color="tab:green",
              label="eps_undetected (right axis)")
    twin.set_ylabel("eps_undetected", color="tab:green")
    lines = ax.get_legend_handles_labels()
    tl = twin.get_legend_handles_labels()
    ax.legend(lines[0] + tl[0], lines[1] + tl[1], fontsize=7)
    save(figure, path, title=fig.title)


def plot_kcap(fig: Figure, summary: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    figure, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.2))
    base = next((s for s in summary if s.get("privacy.k_cap") == "1"), {})
    caps = [s for s in summary if "privacy.k_cap" in s and "mean" in s]
    xs = [s["privacy.k_cap"] if s["privacy.k_cap"] != "0" else "none" for s in caps]
    finite = [s["mean"] for s in caps if finite_mean(s)]
    top = max(finite) * 1.15 if finite else 1.0
    a1.bar(xs, [s["mean"] if finite_mean(s) else top for s in caps],
           yerr=[s["sd"] if finite_mean(s) else 0 for s in caps], capsize=3,
           color=["tab:orange" if finite_mean(s) else "lightgray" for s in caps])
    for x, s in zip(xs, caps):
        label = f"z={s['z']:.3g}" + ("" if finite_mean(s) else "\ndiverged (inf)")
        a1.annotate(label, (x, s["mean"] if finite_mean(s) else top), fontsize=7, ha="center", va="bottom",
                    xytext=(0, 4), textcoords="offset points")
    a1.set_xlabel("entity cap k_cap (q_e = 0.2)")
    a1.set_ylabel("test perplexity (mean ± sd)")
    qes = sorted([(float(s["privacy.q_e"]), s) for s in summary if "privacy.q_e" in s and finite_mean(s)]
                 + ([(0.2, base)] if finite_mean(base) else []))
    a2.errorbar([q for q, _ in qes], [s["mean"] for _, s in qes], yerr=[s["sd"] for _, s in qes], marker="o",
                capsize=3, color="tab:orange")
    for q, s in qes:
        a2.annotate(f"z={s['z']:.3g}", (q, s["mean"]), fontsize=7, xytext=(4, 4), textcoords="offset points")
    a2.set_xscale("log")
    a2.set_xticks([q for q, _ in qes], [f"{q:g}" for q, _ in qes])
    a2.minorticks_off()
    a2.set_xlabel("entity sampling rate q_e (k_cap = 1)")
    a2.set_ylabel("test perplexity (mean ± sd)")
    for ax in (a1, a2):
        ax.grid(True, alpha=0.3)
    save(figure, path, title=fig.title)


SCALE_COLORS = {"fedavg": "tab:green", "user_dp": "black", "uedp": "tab:orange"}


def _by_method(summary: list[dict[str, Any]], key: str) -> dict[str, list[tuple[Any, dict[str, Any]]]]:
    """{strategy: [(setting[key], setting summary) ...]} over the settings with a finite mean."""
    out: dict[str, list[tuple[Any, dict[str, Any]]]] = {}
    for s in summary:
        if finite_mean(s):
            out.setdefault(str(s.get("strategy")), []).append((s.get(key), s))
    return out


def plot_population(fig: Figure, summary: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    figure, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    key = "dataset.options.num_users"
    lines = _by_method(summary, key)
    fedavg = {int(n): s["mean"] for n, s in lines.get("fedavg", [])}
    for m, pts in lines.items():
        pts = sorted((int(n), s) for n, s in pts)
        color = SCALE_COLORS.get(m)
        a1.errorbar([n for n, _ in pts], [s["mean"] for _, s in pts], yerr=[s["sd"] for _, s in pts], marker="o",
                    capsize=3, color=color, label=method_label({"strategy": m}))
        if m != "fedavg":
            ratio = [(n, s["mean"] / fedavg[n]) for n, s in pts if n in fedavg]
            a2.plot([n for n, _ in ratio], [r for _, r in ratio], "o-", color=color,
                    label=method_label({"strategy": m}))
    for ax in (a1, a2):
        ax.set_xscale("log")
        ticks = sorted({int(n) for pts in lines.values() for n, _ in pts})
        ax.set_xticks(ticks, [f"{n:,}" for n in ticks])
        ax.minorticks_off()
        ax.set_xlabel(f"population N (users; expected cohort {COHORT} per round)")
        ax.grid(True, alpha=0.3)
    a1.set_yscale("log")
    a1.set_ylabel("test perplexity (mean ± sd over replicates)")
    a2.axhline(1.0, color="tab:green", linestyle="--", linewidth=1)
    a2.set_ylabel("perplexity / noiseless FedAvg's at the same N")
    a1.legend(fontsize=7)
    a2.legend(fontsize=7)
    save(figure, path, title=fig.title)


def _start_label(init: Any) -> str:
    return "scratch" if init is None else Path(str(init)).stem


def plot_public_start(fig: Figure, summary: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    figure, ax = plt.subplots(figsize=(8, 4.5))
    starts = list(dict.fromkeys(s.get("model.init") for s in summary))
    width = 0.8 / (len(SCALE_COLORS) + 1)
    for j, m in enumerate(SCALE_COLORS):
        means = [next((s for s in summary if s.get("model.init") == init and s.get("strategy") == m and finite_mean(s)),
                      None) for init in starts]
        ax.bar([i + j * width for i in range(len(starts))], [s["mean"] if s else 0 for s in means],
               yerr=[s["sd"] if s else 0 for s in means], width=width, capsize=3, color=SCALE_COLORS[m],
               label=method_label({"strategy": m}))
    inits = [[s["initial"] for s in summary if s.get("model.init") == init and "initial" in s] for init in starts]
    public_only = [statistics.fmean(v) if v and init is not None else 0 for init, v in zip(starts, inits)]
    ax.bar([i + len(SCALE_COLORS) * width for i in range(len(starts))], public_only, width=width, color="tab:gray",
           label="public only (no private training)")
    ax.set_xticks([i + width * len(SCALE_COLORS) / 2 for i in range(len(starts))], [_start_label(i) for i in starts])
    ax.set_yscale("log")
    ax.set_ylabel("test perplexity (mean ± sd)")
    ax.set_xlabel("initial model (scratch: random; others: pretrained on that public text)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    save(figure, path, title=fig.title)


def plot_matched(fig: Figure, summary: list[dict[str, Any]], path: Path) -> None:
    """Utility against K (privacy.target_holders): one line per method calibrated so that one user and an
    entity with K other holders stay at the target; the references (UeDP, FedAvg) as horizontal lines."""
    plt = pyplot()
    figure, ax = plt.subplots(figsize=(7, 4.5))
    colors = {"user_dp": "tab:blue", "deid_dp": "tab:purple"}
    for m, color in colors.items():
        pts = sorted((int(s["privacy.target_holders"]), s) for s in summary
                     if s.get("strategy") == m and "privacy.target_holders" in s and finite_mean(s))
        if pts:
            ax.errorbar([k for k, _ in pts], [s["mean"] for _, s in pts], yerr=[s["sd"] for _, s in pts], fmt="o-",
                        color=color, capsize=3, label=method_label({"strategy": m}))
    for m, color in (("uedp", "tab:red"), ("fedavg", "tab:gray")):
        _ref(ax, next((s for s in summary if s.get("strategy") == m and finite_mean(s)), {}),
             method_label({"strategy": m}), color)
    ax.set_xscale("log")
    ax.set_yscale("log")  # a diverged model's perplexity is orders of magnitude above the rest
    ax.set_xlabel("K: the entity's other holders covered at the target epsilon")
    ax.set_ylabel(f"test {metric_of(summary)} (mean ± sd)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    save(figure, path, title=fig.title)


PLOTS = {"utility": plot_utility, "qs": plot_qs, "kcap": plot_kcap, "population": plot_population,
         "public_start": plot_public_start, "matched": plot_matched}
