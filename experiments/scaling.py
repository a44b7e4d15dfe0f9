"""Scale and deployment overhead (docs/performance.md), measured side by side in one run.

    python -m experiments.scaling users [--users 100 1000 5000] [--rounds 4] [--out docs/figures/scaling]
    python -m experiments.scaling overhead [--nodes 3] [--rounds 4] [--out docs/figures/overhead]

What it does, and how to read its output: studies/scaling.py.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from studies.scaling import bench_overhead, bench_users, markdown


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["users", "overhead"])
    ap.add_argument("--users", type=int, nargs="+", default=[100, 1000, 5000])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--work", type=Path, default=None, help="run directories (default: a temporary one)")
    ap.add_argument("--baseline-rev", default=None, metavar="REV",
                    help="overhead: also run the real processes with the code at git revision REV (a worktree)")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="uedp-scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.what == "users":
        rows = bench_users(args.users, args.rounds, work)
    else:
        rows = bench_overhead(args.nodes, args.rounds, work, baseline_rev=args.baseline_rev)
    out = args.out or Path("docs/figures") / ("scaling" if args.what == "users" else "overhead")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    out.with_suffix(".md").write_text(markdown(rows) + "\n")
    print(markdown(rows))
    return 0 if all(r.get("status", "ok") == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
