"""Empirical privacy audit: `python -m experiments.audit [--quick] [--out outputs/audit]`.

Also `python -m experiments.audit mechanism ...` (crafted updates: studies/audit_mechanism.py) and
`python -m experiments.audit local ...` (crafted documents for the local mechanisms: studies/audit_local.py).
What it does, and how to read its output: studies/audit.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import UsageError, audit_local, audit_mechanism, command
from studies.audit import audit, check_request
from uedp.audit.variants import VARIANTS
from uedp.errors import ConfigError

SUB_COMMANDS = {"mechanism": audit_mechanism, "local": audit_local}


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="small CI version (10 users, tiny model)")
    parser.add_argument("--out", type=Path, default=Path("outputs/audit"))
    parser.add_argument("--candidates", type=int, default=None, help="candidates per secret")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--reanalyse", action="store_true",
                        help="recompute the verdicts, report and plot of the audit in --out (no training)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="audit another configuration: group.key=value or group.options.key=value "
                             "(e.g. privacy.q_u=0.5, dataset.options.copies=16); repeatable")
    sub = parser.add_subparsers(dest="audit", metavar="{mechanism,local}",
                                help="the crafted-update audit of the mechanism, or the crafted-document audit of "
                                     "the local mechanisms (CLV, ADePT on our model)")
    for name, module in SUB_COMMANDS.items():
        module.add_parser(sub.add_parser(name, description=module.__doc__,
                                         formatter_class=argparse.RawDescriptionHelpFormatter))


def run(options: argparse.Namespace) -> int:
    if options.audit:
        return SUB_COMMANDS[options.audit].run(options)
    variants = tuple(v for v in options.variants.split(",") if v)
    try:
        overrides = check_request(quick=options.quick, variants=variants, out=options.out, settings=options.overrides)
    except ConfigError as exc:  # a bad variant, key or value fails before any training
        raise UsageError(str(exc)) from exc
    print(audit(quick=options.quick, out=options.out, variants=variants, num_candidates=options.candidates,
                overrides=overrides, command=("python -m experiments.audit " + " ".join(options.words)).strip(),
                again=options.reanalyse))
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
