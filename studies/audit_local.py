"""The crafted-document audit of the local mechanisms (uedp.audit.local; docs/audit.md, "The crafted-document audit
of the local mechanisms"):

    python -m experiments.audit local [--claims 1 2 4] [--trials 200000] [--out docs/figures]

For each variant (the sound ADePT mechanism on our model and DP-BART-CLV, Gaussian and Laplace; the broken
"adept-published" with ADePT's published sensitivity C) and each claimed per-document epsilon: the auditor's
crafted pair of encoder outputs through the real `privatize`, `--trials` releases per document (seeded: an
audit, not a private run), the realized gap of the clipped outputs, the true epsilon of the noise on that gap
(computed independently), and the 95% lower bound. Reading it: a sound row's bound stays below its claim; a broken
row is certified above its claim wherever the trials can resolve it (the resolution limit is ~ln(trials / 7.4)).
Writes OUT/audit_local.md and .json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from uedp.audit.local import LOCAL_VARIANTS, audit_variant
from uedp.markdown import table as md_table


def run_study(claims: list[float], *, trials: int, out: Path, seed: int = 0, delta: float = 1e-5) -> dict[str, Any]:
    t0 = time.monotonic()
    rows = []
    for claim in claims:
        for name in LOCAL_VARIANTS:
            r = audit_variant(name, epsilon=claim, delta=delta, trials=trials, seed=seed)
            rows.append({"variant": name, "sound": r.sound, "noise": r.noise, "claim": claim, "true_eps": r.true_eps,
                         "gap_l2": r.gap_l2, "gap_l1": r.gap_l1, "eps_lb": r.bound.eps_lb,
                         "resolution_limit": r.bound.resolution_limit, "verdict": r.verdict})
            print(f"{name:24s} claim {claim:g}: true {r.true_eps:.3f}, lower bound {r.bound.eps_lb:.3f} "
                  f"({r.verdict})", flush=True)
    results = {"rows": rows, "trials": trials, "seed": seed, "delta": delta, "seconds": time.monotonic() - t0,
               "shape": "length 3, dim 8, clip (C) 1.0"}
    out.mkdir(parents=True, exist_ok=True)
    (out / "audit_local.json").write_text(json.dumps(results, indent=1) + "\n")
    table = md_table(
        ["variant", "noise", "claimed eps", "realized gap L2 / L1", "true eps of the pair", "95% lower bound",
         "verdict"],
        [[r["variant"] + ("" if r["sound"] else " (BROKEN: sensitivity C)"), r["noise"], f"{r['claim']:g}",
          f"{r['gap_l2']:.4g} / {r['gap_l1']:.4g}", f"{r['true_eps']:.3f}", f"{r['eps_lb']:.3f}", r["verdict"]]
         for r in rows])
    claims_text = " ".join(f"{c:g}" for c in claims)
    (out / "audit_local.md").write_text(
        f"# Crafted-document audit of the local mechanisms\n\n{table}\n\n"
        f"{trials:,} releases per document and row through the real `privatize` (seed {seed}: an audit, "
        f"reproducible, not private), delta {delta:g} for the Gaussian rows; documents of length 3 x dim 8, C = 1. "
        f"Resolution limit at this many trials: {rows[0]['resolution_limit']:.2f}.\n\n"
        f"Command: `python -m experiments.audit local --claims {claims_text} --trials {trials} --seed {seed} "
        f"--out {out}` ({results['seconds']:.0f} s)\n")
    return results
