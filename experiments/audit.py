"""Empirical privacy audit: `python -m experiments.audit [--quick] [--out outputs/audit]`.

Also `python -m experiments.audit mechanism ...` (crafted updates: studies/audit_mechanism.py) and
`python -m experiments.audit local ...` (crafted documents for the local mechanisms: studies/audit_local.py).
What it does, and how to read its output: studies/audit.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uedp.audit  # noqa: E402,F401 - registers audit_synthetic
from studies.audit import check_request, reanalyse, report, run_audit
from uedp.audit.variants import VARIANTS  # noqa: E402
from uedp.errors import ConfigError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["mechanism"]:  # the crafted-update audit of the mechanism
        from experiments.audit_mechanism import main as mechanism_main

        return mechanism_main(argv[1:])
    if argv[:1] == ["local"]:  # the crafted-document audit of the local mechanisms (CLV, ADePT on our model)
        from experiments.audit_local import main as local_main

        return local_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m experiments.audit", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small CI version (10 users, tiny model)")
    parser.add_argument("--out", type=Path, default=Path("outputs/audit"))
    parser.add_argument("--candidates", type=int, default=None, help="candidates per secret")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--reanalyse", action="store_true",
                        help="recompute the verdicts, report and plot of the audit in --out (no training)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="audit another configuration: group.key=value or group.options.key=value "
                             "(e.g. privacy.q_u=0.5, dataset.options.copies=16); repeatable")
    args = parser.parse_args(argv)
    variants = tuple(v for v in args.variants.split(",") if v)
    try:
        overrides = check_request(quick=args.quick, variants=variants, out=args.out, settings=args.overrides)
    except ConfigError as exc:  # a bad variant, key or value fails before any training
        parser.error(str(exc))
    command = ("python -m experiments.audit " + " ".join(argv)).strip()
    if args.reanalyse:  # the verdicts and report of a finished audit, from its results.json
        results = reanalyse(args.out)
        command = results.get("command", command)
    else:
        results = run_audit(quick=args.quick, out=args.out, variants=variants, num_candidates=args.candidates,
                            overrides=overrides, command=command)
    report(args.out, results, command)
    print((args.out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
