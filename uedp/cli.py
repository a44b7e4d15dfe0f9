"""The `uedp` command. Each sub-command lives in its own module under uedp/commands/ and provides
`add_parser(subparsers)` (which sets `func`) ; errors of bad input (UedpError) print one line and exit 2."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from uedp.errors import UedpError

COMMANDS = ("uedp.commands.corpus_stats", "uedp.commands.epsilon", "uedp.commands.fingerprint", "uedp.commands.rewrite")


def _version() -> str:
    """`uedp --version`: this package's version and the Flower and dp-accounting it runs with."""
    from uedp.versions import package_version

    return (f"uedp {package_version('uedp')} (flwr {package_version('flwr')}, dp-accounting "
            f"{package_version('dp-accounting')}, torch {package_version('torch')})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="uedp", description="User-entity DP for federated language models")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        importlib.import_module(module).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UedpError as exc:
        print(f"uedp {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
