"""What limits each method, per population (docs/results.md section 7): how much of a sampled client's text it
uses per round, how large the noise is against one clipped update, and what it reaches WITHOUT noise.

    python -m experiments.limits [--populations 200 1000 5000] [--users 400] [--keys 20]
                                 [--noise-free 5000] [--runs outputs/figures] [--out docs/figures]

What it does, and how to read its output: studies/limits.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from studies.figures import COHORT, POPULATIONS
from studies.limits import measure, noise_free, noise_to_clip, population_config
from uedp.markdown import table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--populations", type=int, nargs="+", default=list(POPULATIONS))
    ap.add_argument("--users", type=int, default=400)
    ap.add_argument("--keys", type=int, default=20)
    ap.add_argument("--noise-free", type=int, nargs="*", default=[5000], metavar="N",
                    help="populations at which to run user-level DP and UeDP without noise (slow: a full run each)")
    ap.add_argument("--runs", type=Path, default=Path("outputs/figures"))
    ap.add_argument("--out", type=Path, default=Path("docs/figures"))
    args = ap.parse_args(argv)
    results = []
    for n in args.populations:
        cfg = population_config(n)
        r = {"N": n, "q_u": cfg.privacy.q_u, **measure(cfg, users=args.users, keys=args.keys)}
        for m in ("user_dp", "uedp"):
            r[f"noise_to_clip_{m}"] = noise_to_clip(args.runs, n, m)
            r[f"noise_free_{m}"] = noise_free(args.runs, n, m) if n in args.noise_free else None
        results.append(r)
        print(json.dumps(r), flush=True)

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    rows = [[f"{r['N']:,}", f"{r['q_u']:g}", f"{r['sentences_per_user']:.1f}", f"{r['entity_free_share']:.1%}",
             "100%", f"{r['uedp_used']:.1%}", f"{r['uedp_used_entity_free']:.1%} + {r['uedp_used_entity']:.2%}",
             f"{COHORT * r['sentences_per_user']:.0f} / {COHORT * r['sentences_per_user'] * r['uedp_used']:.0f}",
             fmt(r["noise_to_clip_user_dp"]), fmt(r["noise_to_clip_uedp"]), fmt(r["noise_free_user_dp"]),
             fmt(r["noise_free_uedp"])] for r in results]
    text = table(["N", "q_u", "train sentences per user", "entity-free share", "FedAvg / user-level DP use",
                  "UeDP uses", "UeDP: entity-free + entity sentences", "sentences per round (user DP / UeDP)",
                  "noise / clip, user-level DP", "noise / clip, UeDP",
                  "perplexity without noise, user-level DP", "same, UeDP"], rows, fmt=str)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "limits.json").write_text(json.dumps(results, indent=1))
    (args.out / "limits.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
