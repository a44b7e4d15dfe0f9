"""Experiments 2-4 of docs/results.md (paper Figs. 2, 3a, 3b and our entity-cap study): run the jobs, collect them,
draw the figures. One command per figure; rerunning skips every job that already finished.

    python -m experiments.figures FIGURE [FIGURE ...] [--reps 3] [--workers 2] [--rounds 30]
                                  [--runs outputs/figures] [--out docs/figures] [--dry-run]

FIGURE is one of: utility-synthetic, utility-bbc, utility-shakespeare, qs, kcap, population, public-start
(or `all`).

Every job is one call of the Hydra entry point, `python -m experiments.run runner=local KEY=VALUE ...
replicate=R hydra.run.dir=RUNS/jobs/JOB`; the exact command of each job is in RUNS/FIGURE.jobs.txt. A job
shared by several figures (same overrides up to defaults) runs once.
Replicates are independent private runs (CSPRNG noise, sampling and initialisation). Each figure writes
OUT/FIGURE.png, OUT/FIGURE.csv (one row per job) and OUT/FIGURE.md (mean, standard deviation and n over
replicates per setting). Jobs that failed are listed in the table as FAILED and left out of the plot.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import OverrideType
from hydra.errors import OverrideParseException
from omegaconf import OmegaConf

from uedp.commands.options import parse_options, split_option
from uedp.config import RunConfig
from uedp.errors import ConfigError
from uedp.hydra_schema import default_choices
from uedp.markdown import table
from uedp.plotting import pyplot, save
from uedp.summary import RUN, has_summary, read_summary

ROOT = Path(__file__).resolve().parents[1]
EPSILONS = (4.0, 8.0, 16.0)
CATEGORIES = ("person", "location", "organization", "all")
FIXED_EPS = 8.0
LABELS = {"uedp": "UeDP f_E+", "uedp_naive": "UeDP f_E", "user_dp": "user-level DP", "deid": "de-identification",
          "deid_dp": "de-identification + user-level DP", "fedavg": "FedAvg (noiseless)"}


@dataclass(frozen=True)
class Figure:
    name: str
    title: str
    base: tuple[str, ...]  # overrides every job of the figure shares
    settings: tuple[tuple[str, ...], ...]  # one entry per setting (its own overrides)
    kind: str  # utility | qs | kcap
    replicated: tuple[tuple[str, ...], ...] | None = None  # settings run --reps times (None: every one); others once


def _utility(name: str, title: str, base: tuple[str, ...], categories: Iterable[str],
             epsilons: tuple[float, ...] = EPSILONS) -> Figure:
    settings: list[tuple[str, ...]] = [("strategy=fedavg",)]
    settings += [("strategy=user_dp", f"privacy.target_epsilon={e:g}") for e in epsilons]
    for cat in categories:  # the full epsilon range for all categories together, eps 8 for each one alone
        settings.append(("strategy=deid", f"entities.protected={cat}"))
        settings += [("strategy=uedp", f"entities.protected={cat}", f"privacy.target_epsilon={e:g}")
                     for e in (epsilons if cat == "all" else (FIXED_EPS,))]
    return Figure(name, title, base, tuple(settings), "utility")


# Population scaling (docs/results.md section 7). The rule, fixed before any run: a FIXED EXPECTED COHORT of
# COHORT users per round (q_u = COHORT / N), so every job does the same training work whatever N, and the noise per
# coordinate falls with N only through the accounting (a smaller q_u amplifies more, so z falls); m_max =
# 1.6 x the cohort, the main job's ratio (80 slots for 50 users), so the slot rule permits the same share of
# entity sentences at every N; rounds, beta, q_e, q_s, learning rates: the main job's. delta 1e-5 < 1/N.
# Central evaluation on EVAL_SENTENCES test sentences (a fixed subset) after the last round.
POPULATIONS = (200, 1000, 5000)
COHORT = 100
EVAL_SENTENCES = 2000


def population_setting(n: int, cohort: int = COHORT) -> tuple[str, ...]:
    return (f"dataset.options.num_users={n}", f"privacy.q_u={cohort / n:g}", f"privacy.m_max={int(1.6 * cohort)}",
            f"federation.eval_sentences={EVAL_SENTENCES}", "federation.eval_every=30")


CLIP_CHOSEN = {"user_dp": 1.0, "uedp": 0.5}  # the best beta of each method on the tuning population (seed 1)
SCALE_METHODS = (("strategy=fedavg",), ("strategy=user_dp",), ("strategy=uedp",))
PUBLIC_STARTS = ("outputs/public_start/synthetic.pt", "outputs/public_start/bbc_news.pt")  # uedp/pretraining.py


def _public_start_settings(n: int) -> tuple[tuple[str, ...], ...]:
    """At population n: each method from scratch, and from each public start (model.init)."""
    return tuple((*population_setting(n), *m, *init) for init in ((), *((f"model.init={p}",) for p in PUBLIC_STARTS))
                 for m in SCALE_METHODS)


# The tuning settings of the proved accounting (each calibrated so that every claimed epsilon is 8;
# docs/results.md section 8): the references, UeDP at three q_s, public entities, and the split update at the
# automatic gamma.
I22_SETTINGS = (("strategy=fedavg",), ("strategy=user_dp",), ("strategy=uedp",), ("strategy=uedp", "privacy.q_s=0.5"),
                ("strategy=uedp", "privacy.q_s=1"),
                ("strategy=uedp", "privacy.q_s=1", "entities.public=places_calendar"),
                ("strategy=uedp_split", "privacy.q_s=1"))
GENRES_TUNING = ("dataset=jsonl", "dataset.options.path=outputs/byo/shakespeare-genres-tuning.jsonl",
                 "task=classification")  # python -m experiments.shakespeare_genres --out outputs/byo
GENRES_REPORTED = ("dataset=jsonl", "dataset.options.path=outputs/byo/shakespeare-genres-reported.jsonl",
                   "task=classification")
# The settings chosen on the tuning populations (docs/results.md section 8), run on the reported ones
I22_BBC_CHOSEN = ("strategy=uedp", "privacy.q_s=1", "privacy.q_u=1")
I22_CLASSIFICATION_TUNING = (("strategy=fedavg",), ("strategy=user_dp",), ("strategy=uedp",),
                             ("strategy=uedp", "privacy.q_s=1"), I22_BBC_CHOSEN)

# A small GPT-2 pretrained on PUBLIC text only (the offline stand-in for a downloaded GPT-2):
#   python -m experiments.pretrain --public synthetic --set model.name=gpt2 'model.options={}' \
#       --out outputs/public_start/gpt2-synthetic.pt --hf-out outputs/public_start/gpt2-synthetic
# Private runs start from its Hugging Face directory (model hf, the project's public tokenizer it records).
GPT2_START = "outputs/public_start/gpt2-synthetic"
GPT2_MODEL = ("model=hf", f"model.options.path={GPT2_START}", "model.options.tokenizer=project")
LORA = ("model.lora.r=8",)
GPT2_REFERENCES = (("strategy=fedavg",), ("strategy=user_dp", "privacy.beta=1"))  # the LSTM's chosen clip (7c)
# UeDP on the tuning population (seed 1): the LSTM's chosen clip, a smaller server step, a smaller client step
# (a pretrained start may need smaller steps), every entity-free sentence (q_s 1), LoRA (rank 8) and full
# fine-tuning
GPT2_TUNING = (("strategy=uedp", "privacy.beta=0.5", *LORA),
               ("strategy=uedp", "privacy.beta=0.5", "server.lr=0.3", *LORA),
               ("strategy=uedp", "privacy.beta=0.5", "train.lr=0.1", *LORA),
               ("strategy=uedp", "privacy.beta=0.5", "privacy.q_s=1", *LORA), ("strategy=uedp", "privacy.beta=0.5"))
# the lowest tuning perplexity (7.522; the others 7.527-7.553, full fine-tuning 8.548): applied to LoRA and full
GPT2_UEDP_CHOSEN = ("strategy=uedp", "privacy.beta=0.5", "train.lr=0.1")

# The same small GPT-2 pretrained on OUT-OF-DOMAIN public text (BBC News), the start that helped the LSTM most
# (section 7), then LoRA (rank 8) on the synthetic 5,000 users:
#   python -m experiments.pretrain --public bbc_news --set model.name=gpt2 'model.options={}' \
#       --out outputs/public_start/gpt2-bbc_news.pt --hf-out outputs/public_start/gpt2-bbc_news
GPT2_BBC_START = "outputs/public_start/gpt2-bbc_news"
GPT2_BBC_MODEL = ("model=hf", f"model.options.path={GPT2_BBC_START}", "model.options.tokenizer=project", *LORA)
# UeDP's settings chosen on the tuning population (seed 1) from this start: the in-domain start's choice, the
# default client step, a smaller server step; then (after the first three: the default step was best) larger
# client steps and every entity-free sentence (q_s 1)
GPT2_BBC_TUNING = (GPT2_UEDP_CHOSEN, ("strategy=uedp", "privacy.beta=0.5"),
                   ("strategy=uedp", "privacy.beta=0.5", "server.lr=0.3"),
                   ("strategy=uedp", "privacy.beta=0.5", "train.lr=1"),
                   ("strategy=uedp", "privacy.beta=0.5", "train.lr=2"),
                   ("strategy=uedp", "privacy.beta=0.5", "privacy.q_s=1"),
                   # then the two best together, and a larger step still
                   ("strategy=uedp", "privacy.beta=0.5", "train.lr=2", "privacy.q_s=1"),
                   ("strategy=uedp", "privacy.beta=0.5", "train.lr=4", "privacy.q_s=1"))
GPT2_BBC_UEDP_CHOSEN = GPT2_BBC_TUNING[4]  # client lr 2: the lowest tuning perplexity, 358.1 (the others 369-614)

# The matched guarantee (docs/results.md section 9): user-level DP and
# de-identification + user-level DP calibrated so that one user AND an entity with K other holders stay at
# epsilon 8 (privacy.target_holders = K: uedp.privacy.holders), against UeDP (every claim <= 8, any K for a
# detected entity) and noiseless FedAvg. K: 1, 2, 5, 10 and the corpus's 99th percentile of holders
# (docs/figures/entity-holders.md). Settings: each method's choice on the tuning population (CLIP_CHOSEN;
# BBC News: its defaults), not retuned for the larger noise.
# 20, 40 and 60 were added after the first five jobs, to place the crossover between 10 and 85. De-identification +
# user-level DP at the K around it (at p99 its z diverges user-level DP: same z).
MATCHED_K_5000 = (1, 2, 5, 10, 20, 40, 60, 85)
MATCHED_DEID_K_5000 = (10, 40)
MATCHED_K_BBC = (1, 2, 5, 13)  # 13: the p99 of holders of its 400 articles; 2 and 5 added to place the crossover


def _matched(ks: tuple[int, ...], deid_ks: tuple[int, ...], user_extra: tuple[str, ...],
             uedp: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """User-level DP at every K in `ks`, de-identification + user-level DP at `deid_ks`, then the references
    (jobs run in this order; the largest K first)."""
    return (*((f"strategy={m}", *user_extra, f"privacy.target_holders={k}")
              for m, these in (("user_dp", ks), ("deid_dp", deid_ks)) for k in sorted(these, reverse=True)),
            ("strategy=fedavg",), uedp)


# The frontier (docs/results.md section 9): the same expected cohort of 100 at two populations, user-level DP
# calibrated so that one user AND an entity with K other holders stays at 8, against UeDP and FedAvg. Run and
# cut order, fixed before any run: replicate 0 of FedAvg, UeDP and user-level DP at K = 0 and at the two K
# around the expected crossover (K* ~ 1% of N: 40 and 60 at 5,000; 160 and 240 at 20,000), then the other K
# (20,000: 80 and 340 last, the first cut), then replicates 1 and 2 of the bracketing K, FedAvg and UeDP.
# K = 120 at 5,000 was added after the runs at the tuned learning rate put user-level DP below UeDP at K = 85
FRONTIER_K = {5000: (0, 40, 60, 20, 85, 120), 20000: (0, 160, 240, 80, 340)}
FRONTIER_BRACKET = {5000: (85, 120), 20000: (160, 240)}  # 5,000: (40, 60) until the tuned runs moved it
FRONTIER_UEDP = ("strategy=uedp", "privacy.beta=0.5")


FRONTIER_TUNING_K = {5000: 60}  # the K nearest the crossover expected before any run (the larger of (40, 60))
FRONTIER_LR = (1.0, 0.3, 3.0)  # the server learning rate retuned: 1x (the default), 0.3x, 3x


def _frontier_tuning(n: int) -> Figure:
    """The server learning rate of UeDP and of user-level DP at K = 0 and at the K nearest the expected crossover
    (the larger bracketing K, last: the first tuning to cut), on the TUNING population (generator seed 1)."""
    arms = (FRONTIER_UEDP, ("strategy=user_dp", "privacy.beta=1", "privacy.target_holders=0"),
            ("strategy=user_dp", "privacy.beta=1", f"privacy.target_holders={FRONTIER_TUNING_K[n]}"))
    return Figure(f"frontier-{n}-tuning", f"Server learning rate, tuning population (seed 1), {n:,} users",
                  ("+dataset.options.seed=1", *population_setting(n)),
                  tuple((*a, f"server.lr={lr:g}") for a in arms for lr in FRONTIER_LR), "table")


FRONTIER_PUBLIC_START = "outputs/public_start/bbc_news.pt"  # python -m experiments.pretrain --public bbc_news


# The tuning's choice (frontier-5000-tuning, seed 1): server.lr 1 for UeDP and for user-level DP at K = 0, 0.3
# at K = 60 (672.8 against 2,017 at 1). The other K take the choice of the nearer tuned K, measured as a share
# of N (the noise per unit signal follows K / N): at 5,000 users K 20 takes K = 0's, 40 and 85 take K = 60's;
# at 20,000 users (no tuning population of its own) K 80 takes K = 0's, 160, 240 and 340 K = 60's.
FRONTIER_TUNED = {"crossover_share": 60 / 5000, "lr": 0.3}


def frontier_lr(n: int, k: int) -> float:
    """The server learning rate of user-level DP at K other holders and population n (FRONTIER_TUNED)."""
    share = k / n
    return FRONTIER_TUNED["lr"] if abs(share - FRONTIER_TUNED["crossover_share"]) < share else 1.0


def _frontier(n: int) -> Figure:
    user = tuple(("strategy=user_dp", "privacy.beta=1", f"privacy.target_holders={k}",
                  *((f"server.lr={frontier_lr(n, k):g}",) if frontier_lr(n, k) != 1.0 else ()))
                 for k in FRONTIER_K[n])
    refs = (("strategy=fedavg",), FRONTIER_UEDP)
    settings = (*refs, *user)
    bracket = tuple(u for u in user if int(u[2].split("=")[1]) in FRONTIER_BRACKET[n])
    return Figure(f"frontier-{n}", f"Frontier: an entity with K other holders at eps 8, synthetic, {n:,} users, "
                  f"cohort {COHORT}", population_setting(n), settings, "matched", replicated=(*refs, *bracket))


# The most entity-dense corpus the project has (BBC News: 73% of sentences hold a detected entity; docs/results.md
# section 9): what learns there and what it guarantees, classification at 400 articles, every claim at 8.
# UeDP at its defaults and at the setting chosen on BBC's tuning population (I22_BBC_CHOSEN), with the public
# places-and-calendar policy, and de-identification + user-level DP.
DENSE_BBC = (("strategy=fedavg",), ("strategy=user_dp",), ("strategy=deid_dp",), ("strategy=uedp",), I22_BBC_CHOSEN,
             (*I22_BBC_CHOSEN, "entities.public=places_calendar"))
# Next word on real text (BBC News, 400 articles, the default cohort of 100): the token-level comparison
# (summary.json `final_tokens`), user-level DP at K = 0 and at the p99 of holders of the 400 articles (13).
BBC_NEXT_WORD = (("strategy=fedavg",), ("strategy=user_dp",), ("strategy=uedp",),
                 ("strategy=user_dp", "privacy.target_holders=13"), ("strategy=uedp", "privacy.q_s=1"))
# BBC News next word barely trains from scratch in 30 rounds (noiseless FedAvg 2,003 -> 1,728): the same on
# Shakespeare's first 400 roles (FedAvg 2,000 -> ~680 at 200 roles), p99 of holders 17 (`uedp corpus-stats
# --dataset shakespeare -o max_users=400`)
SHAKESPEARE_NEXT_WORD = (("strategy=fedavg",), ("strategy=user_dp",), ("strategy=uedp",),
                         ("strategy=user_dp", "privacy.target_holders=17"), ("strategy=uedp", "privacy.q_s=1"))


FIGURES: dict[str, Figure] = {
    f.name: f for f in (
        _utility("utility-synthetic", "Synthetic (200 users), next-word prediction", (), CATEGORIES),
        _utility("utility-bbc", "BBC News (400 users), classification",
                 # one article per user = one label per client: many local steps only fit the client's
                 # label (noiseless FedAvg stayed at the majority-class error 0.77 after 30 rounds), so
                 # one local step per round (FedSGD) with a server-side Adam step (FedAdam)
                 ("dataset=bbc_news", "task=classification", "entities.detector=spacy+rules",
                  "train.local_steps=1", "train.batch_size=32", "train.lr=1.0", "server.optimizer=adam",
                  "server.lr=0.01"), ("all",),
                 (4.0, 8.0)),
        _utility("utility-shakespeare", "Shakespeare (200 roles), next-word prediction",
                 ("dataset=shakespeare", "entities.detector=spacy+rules"), ("all",), (4.0, 8.0)),
        # the paper's Fig. 3b fixes eps_uedp: the target bounds it alone (privacy.target_on=uedp), and
        # eps_undetected (by the proved rules of docs/proofs.md) is reported as it grows with q_s
        Figure("qs", f"Effect of q_s at eps_uedp = {FIXED_EPS:g} (synthetic, next-word)",
               (f"privacy.target_epsilon={FIXED_EPS:g}", "privacy.target_on=uedp"),
               (("strategy=uedp_naive",),
                *(("strategy=uedp", f"privacy.q_s={q:g}") for q in (0.0, 0.2, 0.5, 1.0))), "qs"),
        Figure("kcap", f"Entity cap k_cap and entity rate q_e at eps_uedp = {FIXED_EPS:g} (synthetic, next-word)",
               ("strategy=uedp", f"privacy.target_epsilon={FIXED_EPS:g}"),
               tuple([(f"privacy.k_cap={k}",) for k in (1, 2, 4, 0)]
                     + [(f"privacy.q_e={q:g}",) for q in (0.05, 0.8)]), "kcap"),
        Figure("population", f"Synthetic next-word against population N (expected cohort {COHORT}, eps 8)", (),
               tuple((*population_setting(n), *m) for n in POPULATIONS for m in SCALE_METHODS), "population"),
        # the second rule at the largest N: a cohort growing with N (N / 10), the rest as above
        Figure("cohort", "Expected cohort at 5,000 users (synthetic, eps 8)", (),
               tuple((*population_setting(5000, c), *m) for c in (COHORT, 500) for m in SCALE_METHODS), "cohort"),
        # the clip beta at 5,000 users, chosen on a TUNING population (generator seed 1, not the reported seed 0)
        Figure("clip-tuning", "Clip beta at 5,000 users, tuning population (seed 1)", ("+dataset.options.seed=1",),
               (("strategy=fedavg", *population_setting(5000)),
                *((*population_setting(5000), m, f"privacy.beta={b:g}") for m in ("strategy=user_dp", "strategy=uedp")
                  for b in (0.2, 0.5, 1.0))), "table"),
        # the reported population (seed 0) at the beta each method's tuning run chose (clip-tuning)
        Figure("clip-reported", "Clip beta chosen on the tuning population, reported population (5,000 users)", (),
               tuple((*population_setting(5000), f"strategy={m}", f"privacy.beta={b:g}")
                     for m, b in CLIP_CHOSEN.items()), "table"),
        Figure("public-start", "Public starts (synthetic, 5,000 users, eps 8)", (), _public_start_settings(5000),
               "public_start"),
        # Every epsilon a UeDP run reports (eps_uedp AND eps_undetected) calibrated to 8 under the
        # proved accounting (docs/proofs.md); q_s, public entities and the split update, each chosen on a
        # TUNING population, then run on the reported one (docs/results.md section 8).
        Figure("i22-synthetic-tuning", "Synthetic next word, 200 users, tuning population (seed 1), eps 8",
               ("+dataset.options.seed=1",), I22_SETTINGS, "table"),
        Figure("i22-bbc-tuning", "BBC News classification, tuning population, eps 8",
               ("dataset=bbc_news", "task=classification", "+dataset.options.population=tuning"),
               (*I22_SETTINGS[:6], ("strategy=uedp", "privacy.q_s=1", "privacy.q_u=0.5"),
                ("strategy=uedp", "privacy.q_s=1", "privacy.q_u=1"),
                ("strategy=uedp", "privacy.q_s=1", "federation.rounds=100"),
                ("strategy=uedp_split", "privacy.q_s=1", "privacy.q_e=0.5")), "table"),
        Figure("i22-genres-tuning", "Shakespeare genres (bring-your-own JSONL), tuning owners, eps 8",
               GENRES_TUNING, I22_CLASSIFICATION_TUNING, "table"),
        Figure("i22-genres-reported", "Shakespeare genres (bring-your-own JSONL), reported owners, eps 8",
               GENRES_REPORTED, (("strategy=fedavg",), ("strategy=user_dp",), ("strategy=uedp", "privacy.q_s=1")),
               "table"),  # q_s 1 at the default cohort: BBC's choice (q_u 1) was ~1 min a round here, stopped
        # FedAvg and user-level DP on the reported BBC population are section 6's runs (their accounting is
        # the same under the proved rules)
        Figure("i22-bbc-reported", "BBC News classification, reported population, eps 8",
               ("dataset=bbc_news", "task=classification"), (I22_BBC_CHOSEN,), "table"),
        # FedAvg and user-level DP at 5,000 reported users are the clip-reported figure's runs
        Figure("i22-5000-reported", "Synthetic next word, 5,000 users, reported population (seed 0), eps 8",
               population_setting(5000), (("strategy=uedp", "privacy.beta=0.5"),), "table"),
        Figure("gpt2-tuning", "GPT-2 from a public start, 5,000 users, tuning population (seed 1), eps 8",
               ("+dataset.options.seed=1", *population_setting(5000), *GPT2_MODEL), GPT2_TUNING, "table"),
        Figure("gpt2-reported", "GPT-2 from a public start, 5,000 users, reported population (seed 0), eps 8",
               (*population_setting(5000), *GPT2_MODEL),
               tuple((*m, *lora) for lora in (LORA, ()) for m in (*GPT2_REFERENCES, GPT2_UEDP_CHOSEN)), "table"),
        Figure("gpt2-bbc-tuning", "GPT-2 from an out-of-domain public start (BBC News), LoRA, 5,000 users, tuning "
               "population (seed 1), eps 8", ("+dataset.options.seed=1", *population_setting(5000), *GPT2_BBC_MODEL),
               GPT2_BBC_TUNING, "table"),
        Figure("gpt2-bbc-start", "GPT-2 from an out-of-domain public start (BBC News), LoRA, 5,000 users, reported "
               "population (seed 0), eps 8", (*population_setting(5000), *GPT2_BBC_MODEL),
               (*GPT2_REFERENCES, GPT2_BBC_UEDP_CHOSEN), "table", replicated=(GPT2_BBC_UEDP_CHOSEN,)),
        Figure("matched-5000", "Matched guarantee: an entity with K other holders at eps 8 (synthetic, 5,000 users)",
               population_setting(5000), _matched(MATCHED_K_5000, MATCHED_DEID_K_5000, ("privacy.beta=1",),
                                                  ("strategy=uedp", "privacy.beta=0.5")), "matched"),
        Figure("matched-bbc", "Matched guarantee: an entity with K other holders at eps 8 (BBC News classification)",
               ("dataset=bbc_news", "task=classification"),
               _matched(MATCHED_K_BBC, (13,), (), I22_BBC_CHOSEN), "matched"),
        _frontier(5000),
        _frontier(20000),
        _frontier_tuning(5000),
        # what recovers the context UeDP cannot train on: the frontier's arms at K = 0 from an out-of-domain
        # public start (section 7's best), token-level metrics in summary.json
        Figure("frontier-public-start", "From a public start (BBC News), 5,000 users, cohort 100",
               (*population_setting(5000), f"model.init={FRONTIER_PUBLIC_START}"),
               (("strategy=fedavg",), FRONTIER_UEDP, ("strategy=user_dp", "privacy.beta=1")), "table"),
        Figure("dense-bbc", "The entity-dense corpus: BBC News classification (400 articles), every claim at 8",
               ("dataset=bbc_news", "task=classification"), DENSE_BBC, "table",
               replicated=(DENSE_BBC[1], DENSE_BBC[2], *DENSE_BBC[4:])),
        Figure("bbc-next-word", "Real text, next word: BBC News (400 articles), every claim at 8",
               ("dataset=bbc_news",), BBC_NEXT_WORD, "table"),
        Figure("shakespeare-next-word", "Real text, next word: Shakespeare (400 roles), every claim at 8",
               ("dataset=shakespeare", "dataset.options.max_users=400"), SHAKESPEARE_NEXT_WORD, "table"),
        Figure("i22-5000-tuning", "Synthetic next word, 5,000 users, tuning population (seed 1), eps 8",
               ("+dataset.options.seed=1", *population_setting(5000)),
               (("strategy=fedavg",), ("strategy=user_dp", "privacy.beta=1"),
                ("strategy=uedp", "privacy.beta=0.5"), ("strategy=uedp", "privacy.beta=0.5", "privacy.q_s=1"),
                ("strategy=uedp", "privacy.beta=0.5", "privacy.q_s=1", "entities.public=places_calendar"),
                ("strategy=uedp_split", "privacy.beta=0.5", "privacy.q_s=1"),
                ("strategy=uedp_split", "privacy.beta=0.5", "privacy.q_s=1", "privacy.gamma=0.0125"),
                ("strategy=uedp_split", "privacy.beta=0.5", "privacy.q_s=1", "privacy.gamma=0.05"),
                ("strategy=uedp_split", "privacy.beta=0.5")), "table"),
    )
}


# -- running ---------------------------------------------------------------------------------------------

@cache
def _entry_point_defaults() -> tuple[dict[str, str], dict[str, Any]]:
    """(default option of each config group, RunConfig's default of each key) as the Hydra entry point uses
    them: keys that conf/config.yaml sets for the entry point itself (federation.out_dir) are left out."""
    own = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "config.yaml"))
    assert isinstance(own, dict)
    own_keys = {f"{g}.{k}" for g, node in own.items() if g not in ("defaults", "hydra") and isinstance(node, dict)
                for k in node}
    return default_choices(), {k: v for k, v in RunConfig().to_flat().items() if k not in own_keys}


def restates_default(override: str, overrides: tuple[str, ...] = ()) -> bool:
    """Whether the Hydra override `override` sets what the job would get without it: a config group's default
    option (strategy=uedp), or RunConfig's default value of a key (privacy.target_epsilon=8, privacy.q_s=0.2)
    whose group keeps its default option in `overrides` (the job's overrides: a preset such as
    strategy=uedp_naive or task=classification has values of its own)."""
    choices, values = _entry_point_defaults()
    try:
        parsed = OverridesParser.create().parse_override(override)
    except OverrideParseException:
        return False
    if parsed.type is not OverrideType.CHANGE or parsed.package is not None or parsed.is_sweep_override():
        return False
    key = parsed.key_or_group
    if key in choices:
        return parsed.value() == choices[key]
    group = key.split(".", 1)[0]
    chosen = [v for k, v in map(split_option, overrides) if k == group]
    if key not in values or (group in choices and chosen and chosen[-1] != choices[group]):
        return False
    try:  # RunConfig's coercion: 8 is 8.0 for a float key, 1 is not true
        return RunConfig.from_flat({key: parsed.value()}).to_flat()[key] == values[key]
    except ConfigError:
        return False


def job_id(overrides: tuple[str, ...], rep: int) -> str:
    """Overrides that restate a default are dropped, so a setting shared by several figures (UeDP, all
    categories, eps 8, q_s 0.2, k_cap 1, q_e 0.2) runs once and every figure reads the same job."""
    kept = tuple(o for o in overrides if not restates_default(o, overrides))
    digest = hashlib.blake2b(" ".join(sorted(kept)).encode(), digest_size=4).hexdigest()
    slug = "_".join(split_option(o)[1] for o in kept).replace("/", "-")[:60] or "default"
    return f"{slug}-{digest}-r{rep}"


def jobs(fig: Figure, reps: int, extra: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every job of the figure, replicate 0 of every setting first (in the figure's order: its run and cut
    order), then the further replicates of the settings `fig.replicated` names (all, if None)."""
    return [{"id": job_id((*fig.base, *s, *extra), r), "setting": s, "rep": r,
             "overrides": [*fig.base, *s, *extra, f"replicate={r}"]}
            for r in range(reps) for s in fig.settings
            if r == 0 or fig.replicated is None or s in fig.replicated]


def command(job: dict[str, Any], run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "experiments.run", "runner=local", *job["overrides"],
            f"hydra.run.dir={run_dir / job['id']}"]


def run_jobs(fig: Figure, todo: list[dict[str, Any]], run_dir: Path, workers: int) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir.parent / f"{fig.name}.jobs.txt").write_text("".join(" ".join(command(j, run_dir)[1:]) + "\n"
                                                             for j in todo))
    pending = [j for j in todo if not has_summary(run_dir / j["id"])]
    print(f"{fig.name}: {len(todo)} jobs, {len(todo) - len(pending)} already done, {len(pending)} to run "
          f"({workers} at a time)", flush=True)
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"), "OMP_NUM_THREADS": "1"}

    def one(job: dict[str, Any]) -> tuple[dict[str, Any], float, int]:
        out = run_dir / job["id"]
        out.mkdir(parents=True, exist_ok=True)
        (out / "error.json").unlink(missing_ok=True)
        t0 = time.perf_counter()
        with (out / "job.log").open("w") as log:
            rc = subprocess.run(command(job, run_dir), cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT).returncode
        return job, time.perf_counter() - t0, rc

    def report(job: dict[str, Any], secs: float, rc: int) -> None:
        nonlocal done
        done += 1
        row = read_job(run_dir / job["id"])
        result = (f"{row['metric']}={row['value']:.4g} eps_uedp={row['eps_uedp']:.3g} eps_user={row['eps_user']:.3g}"
                  if "value" in row else f"FAILED ({row.get('status', f'rc {rc}')})")
        print(f"[{fig.name} {done}/{len(pending)}] {' '.join(job['setting'])} rep={job['rep']}: {result} "
              f"({secs:.0f} s)", flush=True)

    done = 0
    if pending:  # the first job alone fills the shared caches (corpus, annotations, tokenizer)
        report(*one(pending[0]))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for fut in as_completed([pool.submit(one, j) for j in pending[1:]]):
            report(*fut.result())


# -- collecting ------------------------------------------------------------------------------------------

def read_job(path: Path) -> dict[str, Any]:
    error = path / "error.json"
    if has_summary(path):
        s = read_summary(path, require=RUN)
        return {"strategy": s["strategy"], "estimator": s.get("estimator"), "rounds": s["rounds"],
                "z": s["noise_multiplier"], "eps_uedp": s["eps_uedp"], "eps_user": s["eps_user"],
                "eps_undetected": s["eps_undetected"], "metric": s["metric"], "value": s["final"][s["metric"]],
                "initial": s["initial"][s["metric"]], "seconds": s.get("seconds"),
                **({"eps_holders": s["holders"]["epsilon"]} if s.get("holders") else {})}
    if error.is_file():
        return {"status": "FAILED: " + json.loads(error.read_text())["error"]}
    return {"status": "not run"}


def collect(fig: Figure, todo: list[dict[str, Any]], run_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for j in todo:
        rows.append({"setting": " ".join(j["setting"]), "rep": j["rep"], **read_job(run_dir / j["id"])})
    return rows


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean, standard deviation and n over replicates, per setting (first-seen order)."""
    out = []
    for setting in dict.fromkeys(r["setting"] for r in rows):
        group = [r for r in rows if r["setting"] == setting]
        ok = [r for r in group if "value" in r]
        agg: dict[str, Any] = {"setting": setting, **parse_options(setting.split(), value=str)}
        agg["n"] = len(ok)
        agg["failed"] = sum(str(r.get("status", "")).startswith("FAILED") for r in group)  # not run: neither
        if ok:
            vals = [r["value"] for r in ok]
            agg.update({"metric": ok[0]["metric"], "mean": statistics.fmean(vals),
                        "sd": (statistics.stdev(vals) if len(vals) > 1 else 0.0)
                        if all(map(math.isfinite, vals)) else math.nan,  # a diverged run (inf) has no sd
                        "z": statistics.fmean(r["z"] for r in ok),
                        **{k: statistics.fmean(r[k] for r in ok) for k in ("eps_uedp", "eps_user", "eps_undetected")},
                        **({"eps_holders": statistics.fmean(r["eps_holders"] for r in ok)}
                           if all("eps_holders" in r for r in ok) else {}),
                        "initial": statistics.fmean(r["initial"] for r in ok)})
        out.append(agg)
    return out


def method_label(setting: dict[str, Any]) -> str:
    return LABELS.get(str(setting.get("strategy", "uedp")), str(setting.get("strategy", "uedp")))


def markdown(summary: list[dict[str, Any]]) -> str:
    cols = ["method", "setting", "n", "failed", "z", "eps_uedp", "eps_user", "eps_undetected", "mean", "sd"]
    if any("eps_holders" in s for s in summary):  # the epsilon for an entity with target_holders other holders
        cols.insert(cols.index("mean"), "eps_holders")
    metric = next((s["metric"] for s in summary if "metric" in s), "metric")
    head = [c if c not in ("mean", "sd") else f"{metric} {c}" for c in cols]
    rows = [{**s, "method": method_label(s),
             "setting": " ".join(p for p in s["setting"].split() if not p.startswith("strategy="))} for s in summary]
    return table(head, [[r.get(c) for c in cols] for r in rows])


# -- plotting --------------------------------------------------------------------------------------------

def _finite(s: dict[str, Any]) -> bool:
    """A setting with a plottable mean (a diverged model's inf perplexity is in the table, not the plot)."""
    return "mean" in s and math.isfinite(s["mean"])


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
    metric = next((s["metric"] for s in summary if "metric" in s), "metric")
    fedavg = next((s for s in summary if s.get("strategy") == "fedavg"), {})
    user = sorted((float(s["privacy.target_epsilon"]), s) for s in summary
                  if s.get("strategy") == "user_dp" and _finite(s))
    for ax, cat in zip(axes[0], cats):
        uedp = sorted((float(s["privacy.target_epsilon"]), s) for s in summary
                      if s.get("strategy") == "uedp" and s.get("entities.protected") == cat and _finite(s))
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
    pts = sorted((float(s["privacy.q_s"]), s) for s in summary if "privacy.q_s" in s and _finite(s))
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
    finite = [s["mean"] for s in caps if _finite(s)]
    top = max(finite) * 1.15 if finite else 1.0
    a1.bar(xs, [s["mean"] if _finite(s) else top for s in caps], yerr=[s["sd"] if _finite(s) else 0 for s in caps],
           capsize=3, color=["tab:orange" if _finite(s) else "lightgray" for s in caps])
    for x, s in zip(xs, caps):
        label = f"z={s['z']:.3g}" + ("" if _finite(s) else "\ndiverged (inf)")
        a1.annotate(label, (x, s["mean"] if _finite(s) else top), fontsize=7, ha="center", va="bottom",
                    xytext=(0, 4), textcoords="offset points")
    a1.set_xlabel("entity cap k_cap (q_e = 0.2)")
    a1.set_ylabel("test perplexity (mean ± sd)")
    qes = sorted([(float(s["privacy.q_e"]), s) for s in summary if "privacy.q_e" in s and _finite(s)]
                 + ([(0.2, base)] if _finite(base) else []))
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
        if _finite(s):
            out.setdefault(str(s.get("strategy")), []).append((s.get(key), s))
    return out


def gap_rows(summary: list[dict[str, Any]], key: str) -> list[list[Any]]:
    """Per value of `key` (population, start): each method's mean and its ratio to noiseless FedAvg's."""
    rows = []
    for value in dict.fromkeys(s.get(key) for s in summary):
        group = {str(s.get("strategy")): s for s in summary if s.get(key) == value and _finite(s)}
        base = group.get("fedavg", {}).get("mean")
        row: list[Any] = [value if value is not None else "scratch"]
        for m in SCALE_COLORS:
            mean = group.get(m, {}).get("mean")
            row.append("-" if mean is None else f"{mean:.4g}" + (f" ({mean / base:.2f}x)" if base and m != "fedavg"
                                                                   else ""))
        inits = [s["initial"] for s in group.values() if "initial" in s]
        row.append(f"{statistics.fmean(inits):.4g}" if inits else "-")
        rows.append(row)
    return rows


def gap_table(summary: list[dict[str, Any]], key: str, first: str) -> str:
    metric = next((s["metric"] for s in summary if "metric" in s), "metric")
    return table([first, f"FedAvg {metric}", "user-level DP (x FedAvg)", "UeDP (x FedAvg)",
                  "before private training"], gap_rows(summary, key), fmt=str)


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
        means = [next((s for s in summary if s.get("model.init") == init and s.get("strategy") == m and _finite(s)),
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
                     if s.get("strategy") == m and "privacy.target_holders" in s and _finite(s))
        if pts:
            ax.errorbar([k for k, _ in pts], [s["mean"] for _, s in pts], yerr=[s["sd"] for _, s in pts], fmt="o-",
                        color=color, capsize=3, label=method_label({"strategy": m}))
    for m, color in (("uedp", "tab:red"), ("fedavg", "tab:gray")):
        _ref(ax, next((s for s in summary if s.get("strategy") == m and _finite(s)), {}),
             method_label({"strategy": m}), color)
    ax.set_xscale("log")
    ax.set_yscale("log")  # a diverged model's perplexity is orders of magnitude above the rest
    ax.set_xlabel("K: the entity's other holders covered at the target epsilon")
    ax.set_ylabel(f"test {next((s['metric'] for s in summary if 'metric' in s), 'metric')} (mean ± sd)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    save(figure, path, title=fig.title)


PLOTS = {"utility": plot_utility, "qs": plot_qs, "kcap": plot_kcap, "population": plot_population,
         "public_start": plot_public_start, "matched": plot_matched}
GAP_TABLES = {"population": ("dataset.options.num_users", "N"), "public_start": ("model.init", "initial model"),
              "cohort": ("privacy.q_u", "q_u (expected cohort q_u N)")}


def write_outputs(fig: Figure, rows: list[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(rows)
    cols = list(dict.fromkeys(k for r in rows for k in r))
    with (out / f"{fig.name}.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    text = markdown(summary)
    if fig.kind in GAP_TABLES:
        text += "\n\n" + gap_table(summary, *GAP_TABLES[fig.kind])
    (out / f"{fig.name}.md").write_text(text + "\n")
    if any(_finite(s) for s in summary) and fig.kind in PLOTS:  # the cohort study is a table only
        PLOTS[fig.kind](fig, summary, out / f"{fig.name}.png")
    return summary
