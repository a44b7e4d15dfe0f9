"""`uedp corpus-stats`: corpus statistics and detector quality against gold.

    uedp corpus-stats --dataset synthetic [--detector auto] [--protected all] [--public none] [-o num_users=50] [--json]

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
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from uedp.commands.options import parse_options


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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from uedp.categories import resolve_categories
    from uedp.config import EntityConfig
    from uedp.data.loaders import materialize
    from uedp.entities.annotations import annotate
    from uedp.entities.public import check_policy
    from uedp.entities.stats import corpus_stats

    protected = resolve_categories(args.protected)
    check_policy(args.public)  # a bad policy fails before the corpus loads
    detector = EntityConfig(detector=args.detector).detector_for(args.dataset)  # the runs' one rule for auto
    t0 = time.perf_counter()
    _, corpus = materialize(args.dataset, **parse_options(args.option))
    t1 = time.perf_counter()
    extra = {"n_process": args.n_process} if args.n_process else {}
    annotations = annotate(corpus, detector, **extra)
    t2 = time.perf_counter()
    measured = corpus_stats(corpus, annotations, protected, detector=detector, public=args.public)
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
    lines.append(f"time                 load {stats['seconds']['load']}s  detect {stats['seconds']['detect']}s")
    return "\n".join(lines)
