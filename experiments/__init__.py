"""Entry points: the main job, the Hydra runner, sweeps, benchmarks, audits.

Every command here is a thin module in one pattern (like uedp/cli.py and uedp/commands/): its docstring is the
usage, `add_parser(parser)` declares the options, `run(options)` turns them into plain values for the study it
calls (studies/: the work, the tables, the figures) and returns the exit status, and

    if __name__ == "__main__":
        raise SystemExit(main())

with `main = command(__doc__, add_parser, run)`. No study logic lives here. experiments/run.py, Hydra's entry
point, is the one exception: Hydra owns its command line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

AddParser = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], "int | None"]


class UsageError(Exception):
    """Bad input that `run` finds after the parse (options that contradict each other, a value a study rejects):
    `main` reports it as argparse reports a bad option (the usage, the message, exit status 2)."""


def command(doc: str | None, add_parser: AddParser, run: Run) -> Callable[[Sequence[str] | None], int]:
    """`main(argv=None) -> int` of an entry point: its parser (described by `doc`), then `run` on the options,
    which also hold the words parsed (`options.words`: `argv`, or the command line's) for a study's record of the
    command."""

    def main(argv: Sequence[str] | None = None) -> int:
        parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
        add_parser(parser)
        words = list(sys.argv[1:] if argv is None else argv)
        parser.set_defaults(words=words)
        options = parser.parse_args(words)
        try:
            return int(run(options) or 0)
        except UsageError as exc:
            parser.error(str(exc))

    return main
