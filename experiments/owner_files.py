"""Write one JSONL file per data owner, each in its own directory, for a federation in which every owner
keeps their own text (`federation.data = "owners"`; docs/deployment.md, "Data owners' own files").

    python -m experiments.owner_files OUT [--dataset synthetic] [-o num_users=3 ...] [--split train]

    python -m experiments.owner_files --one-file FILE.jsonl [--dataset synthetic] [-o ...] [--split ...]
                                      [--one-label-per-owner] [--no-entities]

What it does, and how to read its output: uedp/owner_files.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import UsageError, command
from uedp.commands.options import parse_options
from uedp.owner_files import DATA_FILE, OWNERS_FILE, write_one_file, write_owner_files


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("out", type=Path, nargs="?", help="directory of the owners' directories")
    ap.add_argument("--one-file", type=Path, default=None, help="write all users to this one JSONL file")
    ap.add_argument("--dataset", default="synthetic")
    ap.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                    help="loader option (JSON value), e.g. -o num_users=3")
    ap.add_argument("--split", action="append", default=None, help="splits to write (default: train)")
    ap.add_argument("--max-owners", type=int, default=None)
    ap.add_argument("--one-label-per-owner", action="store_true",
                    help="--one-file: keep only each user's most frequent label (classification corpora)")
    ap.add_argument("--no-entities", action="store_true", help="--one-file: leave out hand-labelled entities")


def run(options: argparse.Namespace) -> int:
    if (options.out is None) == (options.one_file is None):
        raise UsageError("give OUT (one directory per owner) or --one-file FILE, not both")
    splits = tuple(options.split or ("train",))
    if options.one_file is not None:
        n = write_one_file(options.one_file, dataset=options.dataset, options=parse_options(options.option),
                           splits=splits, one_label=options.one_label_per_owner, entities=not options.no_entities)
        print(f"{n} sentences in {options.one_file}")
        return 0
    paths = write_owner_files(options.out, dataset=options.dataset, options=parse_options(options.option),
                              splits=splits, max_owners=options.max_owners)
    print(f"{len(paths)} owners: {paths[0].parent.parent}/owner-*/{DATA_FILE}; invited owners in "
          f"{options.out / OWNERS_FILE}")
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
