"""Write one JSONL file per data owner, each in its own directory, for a federation in which every owner
keeps their own text (`federation.data = "owners"`; README, "Data owners' own files").

    python -m experiments.owner_files OUT [--dataset synthetic] [-o num_users=3 ...] [--split train]

writes OUT/owner-000/data.jsonl, OUT/owner-001/data.jsonl, ... (the project's JSONL format: one
{"user", "text", "split", "label"?} object per sentence; only the owner's training sentences by default)
and OUT/owners.txt, the public list of invited owners (one name per line: its length is the population N).
Each SuperNode is then started with node config `data-path="OUT/owner-00i/data.jsonl"` and reads only
that file. This tool exists for demos and tests, where one corpus stands in for many owners; a real owner
writes their own file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from uedp.commands.options import parse_options
from uedp.data.loaders import materialize

OWNERS_FILE = "owners.txt"
DATA_FILE = "data.jsonl"


def owner_dir(out: Path, i: int) -> Path:
    return out / f"owner-{i:03d}"


def write_owner_files(out: Path, *, dataset: str, options: dict, splits: tuple[str, ...] = ("train",),
                      max_owners: int | None = None) -> list[Path]:
    """One DATA_FILE per user of the corpus (at most `max_owners`), and OWNERS_FILE; returns the files."""
    _, corpus = materialize(dataset, **options)
    names = corpus.label_names
    table = corpus.table.to_pylist()
    users = corpus.users()[:max_owners] if max_owners else corpus.users()
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, user in enumerate(users):
        rows = [r for r in table if r["user"] == user and r["split"] in splits]
        path = owner_dir(out, i) / DATA_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as fh:
            for r in rows:
                record = {"user": f"owner-{i:03d}", "text": r["text"], "split": r["split"]}
                if names is not None and r["label"] is not None:
                    record["label"] = names[r["label"]]
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        paths.append(path)
    (out / OWNERS_FILE).write_text("".join(f"owner-{i:03d}\n" for i in range(len(users))))
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--dataset", default="synthetic")
    ap.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                    help="loader option (JSON value), e.g. -o num_users=3")
    ap.add_argument("--split", action="append", default=None, help="splits to write (default: train)")
    ap.add_argument("--max-owners", type=int, default=None)
    args = ap.parse_args(argv)
    paths = write_owner_files(args.out, dataset=args.dataset, options=parse_options(args.option),
                              splits=tuple(args.split or ("train",)), max_owners=args.max_owners)
    print(f"{len(paths)} owners: {paths[0].parent.parent}/owner-*/{DATA_FILE}; invited owners in "
          f"{args.out / OWNERS_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
