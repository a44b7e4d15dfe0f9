"""`uedp corpus-stats`: corpus statistics and detector quality against gold.

    uedp corpus-stats --dataset synthetic [--detector auto] [--protected all] [--public none] [-o num_users=50] [--json]
        [--strategy uedp] [--q-e 0.2] [--q-s 0.2] [--k-cap 1] [--m-max 0] [--q-u 0.25] [--rounds 30] [--delta 1e-5]

`--detector auto` (the default) is the detector a run on that dataset uses (entities.detector = auto:
uedp.config.EntityConfig.detector_for: `gold` on the synthetic corpus, `balanced` elsewhere), and the output
names the one it measured. `--public POLICY` (none | places_calendar; entities.public of a run,
uedp.entities.public) leaves the policy's entities out as a run does: they are not protected, so they count
in no entity, sensitive sentence or holder number (a sentence holding only public ones is entity-free);
the output names the policy (JSON key `public`).

Loads the corpus (options with -o KEY=VALUE, values parsed as JSON where possible), detects entities
(cached), and prints users, sentences, sensitive sentences, distinct entities, users per entity (the
holders of each distinct entity: mean, median, p90, p99, max, the share with >= 2 holders, a histogram,
and a table of the same per category) and,
where the corpus has gold entities and the detector is not `gold`, entity-level precision and recall
(overall and per category, with 95% intervals), class-matched overlap recall and precision, and the
sentence flag, false-flag and missed-flag rates. `--json` prints one JSON object.

Entity density: the expected share of its training sentences a sampled client may train on in one round, by
the number of distinct protected entities per sentence (uedp.privacy.trainable: P = q_s for none, (q_e pi)^j
for j, pi = 1 - (1 - 1/m_max)^k_cap with the entity cap, 1 without), over the training split, for mechanism
`--strategy` (a name of uedp.privacy.mechanisms, default uedp: its rates, so user_dp and the noiseless
baselines use every sentence, and f_E, `uedp_naive`, has q_s = 0; its cap, so `uedp_split` has none) at
`--q-e`, `--q-s`, `--k-cap` (0: off) and `--m-max`, defaulting to a run's (uedp.config.PrivacyConfig).
`--m-max 0` (the default, as privacy.m_max = "auto") is the automatic cap a run on this corpus resolves
(uedp.privacy.accounting.safe_m_max for N = the corpus's users, `--q-u`, `--rounds`, `--delta`, defaulting
to a run's). JSON key `trainable`: {mechanism, m_max_automatic, split, setting, sentences, expected, share,
by_entities}; a share below uedp.privacy.trainable.TINY_SHARE is flagged.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from uedp.checks import probability
from uedp.commands.options import parse_options
from uedp.config import AUTO, FederationConfig, PrivacyConfig
from uedp.errors import ConfigError
from uedp.privacy.mechanisms import get, specs
from uedp.privacy.trainable import TINY_SHARE

STRATEGIES = tuple(s.name for s in specs() if not s.local)  # mechanisms that train on the clients' sentences


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("corpus-stats", help="corpus statistics and detector quality",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True, help="loader name: synthetic, shakespeare, bbc_news, ...")
    p.add_argument("--detector", default="auto",
                   help="auto (what a run on the dataset uses: gold on synthetic, balanced elsewhere) | balanced | "
                        "recall | ensemble | spacy+rules | spacy | rules | gold")
    p.add_argument("--protected", default="all", help="protected categories: a group or a list")
    p.add_argument("--public", default="none", metavar="POLICY",
                   help="public-entity policy: none | places_calendar (its entities are not protected: left out)")
    p.add_argument("-o", "--option", action="append", metavar="KEY=VALUE", help="loader option")
    p.add_argument("--n-process", type=int, default=None, help="spaCy worker processes")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    privacy, rounds = PrivacyConfig(), FederationConfig().rounds
    t = p.add_argument_group("trainable share", "the setting whose expected trainable share is reported "
                             "(defaults: a run's)")
    t.add_argument("--strategy", default="uedp", choices=STRATEGIES,
                   help="the mechanism whose rates and cap apply (default uedp)")
    t.add_argument("--q-e", type=float, default=privacy.q_e, help=f"entity sampling probability ({privacy.q_e})")
    t.add_argument("--q-s", type=float, default=privacy.q_s,
                   help=f"extended-entity sampling probability ({privacy.q_s})")
    t.add_argument("--k-cap", type=int, default=privacy.k_cap, help=f"entity cap, 0 = off ({privacy.k_cap})")
    t.add_argument("--m-max", type=int, default=0,
                   help="cohort cap; 0 (the default): the automatic one a run on this corpus resolves")
    t.add_argument("--q-u", type=float, default=privacy.q_u, help=f"with --m-max 0: user sampling ({privacy.q_u})")
    t.add_argument("--rounds", type=int, default=rounds, help=f"with --m-max 0: rounds ({rounds})")
    t.add_argument("--delta", type=float, default=privacy.delta, help=f"with --m-max 0: delta ({privacy.delta:g})")
    p.set_defaults(func=run)


def _check_setting(args: argparse.Namespace) -> None:
    """ConfigError naming the option for a value out of its range (before the corpus loads)."""
    for name in ("q_e", "q_s", "q_u"):
        value = getattr(args, name)
        probability(f"--{name.replace('_', '-')}", value)
    for name in ("k_cap", "m_max"):
        if getattr(args, name) < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if args.rounds < 1:
        raise ConfigError(f"--rounds must be >= 1, got {args.rounds}")
    if not 0.0 < args.delta < 1.0:
        raise ConfigError(f"--delta must lie in (0, 1), got {args.delta}")


def selection_setting(args: argparse.Namespace, num_users: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(trainable_share's q_e, q_s, k_cap, m_max for mechanism --strategy, what the output says of them):
    the mechanism's rates and cap (uedp.privacy.mechanisms), --m-max 0 resolved as a run on a corpus of
    `num_users` users resolves it (only where the cap is on: nothing else here depends on m_max)."""
    spec = get(args.strategy)
    privacy = PrivacyConfig(q_u=args.q_u, q_e=args.q_e, q_s=args.q_s, k_cap=args.k_cap or None,
                            m_max=args.m_max or AUTO, delta=args.delta)
    q_e, q_s = spec.rates(privacy)
    k_cap = spec.k_cap(privacy) if spec.keyed else None
    m_max, automatic = None, False
    if k_cap is not None:
        m_max, automatic = privacy.m_max, privacy.m_max == AUTO
        if automatic:
            from uedp.privacy.accounting import safe_m_max

            m_max = safe_m_max(num_users, privacy.q_u, args.rounds, privacy.delta)
    about = {"mechanism": spec.name, "m_max_automatic": automatic, "split": "train"}
    if automatic:
        about["automatic"] = {"num_users": num_users, "q_u": privacy.q_u, "rounds": args.rounds,
                              "delta": privacy.delta}
    return {"q_e": q_e, "q_s": q_s, "k_cap": k_cap or 0, "m_max": m_max}, about


def run(args: argparse.Namespace) -> int:
    from uedp.categories import resolve_categories
    from uedp.config import EntityConfig
    from uedp.data.loaders import materialize
    from uedp.entities.annotations import annotate
    from uedp.entities.public import check_policy
    from uedp.entities.stats import corpus_stats

    protected = resolve_categories(args.protected)
    check_policy(args.public)  # a bad policy fails before the corpus loads
    _check_setting(args)
    detector = EntityConfig(detector=args.detector).detector_for(args.dataset)  # the runs' one rule for auto
    t0 = time.perf_counter()
    _, corpus = materialize(args.dataset, **parse_options(args.option))
    t1 = time.perf_counter()
    extra = {"n_process": args.n_process} if args.n_process else {}
    annotations = annotate(corpus, detector, **extra)
    t2 = time.perf_counter()
    setting, about = selection_setting(args, len(corpus.users()))
    measured = corpus_stats(corpus, annotations, protected, detector=detector, public=args.public,
                            selection=setting)
    measured["trainable"] = {**about, **measured["trainable"]}
    stats = {"dataset": args.dataset, **measured, "detector_option": args.detector}
    stats["seconds"] = {"load": round(t1 - t0, 3), "detect": round(t2 - t1, 3)}
    if args.json:
        print(json.dumps(stats, sort_keys=True))
    else:
        print(render(stats), file=sys.stdout)
    return 0


def render(stats: dict) -> str:
    upe = stats["users_per_entity"]
    lines = [
        f"dataset              {stats['dataset']}   (detector {stats['detector']}"
        f"{' = auto, as runs on it' if stats.get('detector_option') == 'auto' else ''}, "
        f"protected {','.join(stats['protected'])}, public {stats['public']})",
        f"users                {stats['users']}   (dropped without sentences: {stats['dropped_users']})",
        f"sentences            {stats['sentences']}   "
        + "  ".join(f"{k}={v}" for k, v in stats["splits"].items()),
        f"sensitive sentences  {stats['sensitive_sentences']}   ({100 * stats['sensitive_fraction']:.1f}%)",
        f"distinct entities    {stats['entities']}   "
        + "  ".join(f"{k}={v}" for k, v in stats["entities_per_category"].items() if v),
        f"users per entity     mean {upe['mean']:.2f}  median {upe['median']:g}  p90 {upe['p90']}  p99 {upe['p99']}  "
        f"max {upe['max']}  share >= 2 {upe['share_2plus']:.3f}   "
        + "  ".join(f"[{k}]={v}" for k, v in upe["histogram"].items()),
        f"entities / sentence  {stats['entities_per_sentence']:.2f}   "
        f"(per sensitive sentence {stats['entities_per_sensitive_sentence']:.2f})",
    ]
    if upe["per_category"]:
        lines.append(f"  holders  {'category':<9} {'entities':>8} {'median':>7} {'p90':>5} {'p99':>5} {'max':>6} "
                     f"{'share >= 2':>10}")
        for name, h in upe["per_category"].items():
            lines.append(f"           {name:<9} {h['entities']:8d} {h['median']:7g} {h['p90']:5d} {h['p99']:5d} "
                         f"{h['max']:6d} {h['share_2plus']:10.3f}")
    if "recall" in stats:
        ci, ov, fl = stats["ci95"], stats["overlap"], stats["flags"]

        def iv(x: list[float]) -> str:
            return f"[{x[0]:.3f}, {x[1]:.3f}]"

        lines.append(f"vs gold              recall {stats['recall']:.3f} {iv(ci['recall'])}  precision "
                     f"{stats['precision']:.3f} {iv(ci['precision'])}   (strict; 95% Wilson intervals)")
        lines.append(f"  overlap, class-matched: recall {ov['recall']:.3f} {iv(ov['ci95']['recall'])}  precision "
                     f"{ov['precision']:.3f} {iv(ov['ci95']['precision'])}")
        lines.append(f"  sentences flagged {fl['flag_rate']:.3f} (gold {fl['gold_flag_rate']:.3f})  false-flag rate "
                     f"{fl['false_flag_rate']:.3f} {iv(fl['ci95']['false_flag_rate'])} of {fl['gold_free']} "
                     f"entity-free  missed-flag rate {fl['missed_flag_rate']:.3f}")
        lines.append(f"  {'class':<10} {'recall':>7} {'precision':>9} {'tp':>6} {'fp':>6} {'fn':>6}")
        for name, q in sorted(stats["per_category"].items()):
            lines.append(f"  {name:<10} {q['recall']:7.3f} {q['precision']:9.3f} "
                         f"{q['tp']:6d} {q['fp']:6d} {q['fn']:6d}")
    if "trainable" in stats:
        lines.extend(render_trainable(stats["trainable"]))
    lines.append(f"time                 load {stats['seconds']['load']}s  detect {stats['seconds']['detect']}s")
    return "\n".join(lines)


def render_trainable(t: dict[str, Any]) -> list[str]:
    """The trainable-share table: one row per number of distinct entities per sentence, then all."""
    s = t["setting"]
    cap = "off"
    if s["k_cap"]:
        cap = f"{s['k_cap']}  m_max {s['m_max']}"
        if t.get("m_max_automatic"):
            a = t["automatic"]
            cap += f" (automatic: N {a['num_users']}, q_u {a['q_u']:g}, {a['rounds']} rounds, delta {a['delta']:g})"
    lines = ["trainable            expected share a sampled client may train on, by entities per sentence",
             f"  ({t['mechanism']}: q_e {s['q_e']:g}  q_s {s['q_s']:g}  k_cap {cap}; {t['split']} split)",
             f"  {'entities':>8} {'sentences':>10} {'P(selectable)':>14} {'expected':>11} {'of all':>9}"]
    for r in t["by_entities"]:
        lines.append(f"  {r['entities']:8d} {r['sentences']:10d} {r['probability']:14.4g} {r['expected']:11.4g} "
                     f"{100 * r['share']:8.3g}%")
    low = f"   below {100 * TINY_SHARE:g}%: a sampled client barely trains" if t["share"] < TINY_SHARE else ""
    lines.append(f"  {'all':>8} {t['sentences']:10d} {'':14} {t['expected']:11.4g} {100 * t['share']:8.3g}%{low}")
    return lines
