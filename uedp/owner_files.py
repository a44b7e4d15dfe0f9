"""Write one JSONL file per data owner, each in its own directory, for a federation in which every owner
keeps their own text (`federation.data = "owners"`; docs/deployment.md, "Data owners' own files").

    python -m experiments.owner_files OUT [--dataset synthetic] [-o num_users=3 ...] [--split train]

writes OUT/owner-000/data.jsonl, OUT/owner-001/data.jsonl, ... (the project's JSONL format: one
{"user", "text", "split", "label"?, "entities"?} object per sentence; only the owner's training sentences
by default; "entities" are the corpus's gold spans where it has them)
and OUT/owners.txt, the public list of invited owners (one name per line: its length is the population N).
Each SuperNode is then started with node config `data-path="OUT/owner-00i/data.jsonl"` and reads only
that file. This tool exists for demos and tests, where one corpus stands in for many owners; a real owner
writes their own file.

    python -m experiments.owner_files --one-file FILE.jsonl [--dataset synthetic] [-o ...] [--split ...]
                                      [--one-label-per-owner] [--no-entities]

writes every user's sentences to one file instead (user names kept): a corpus in the JSONL format, e.g.
the fixture tests/assets/my_corpus.jsonl of README's "Your own corpus". `--one-label-per-owner` keeps only
each user's most frequent label (a classification corpus with one label per owner), `--no-entities` drops
the generator's hand-labelled entities (the detector finds them, as in a bring-your-own corpus).
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

from uedp.data.loaders import materialize

OWNERS_FILE = "owners.txt"
DATA_FILE = "data.jsonl"


def owner_dir(out: Path, i: int) -> Path:
    return out / f"owner-{i:03d}"


def _record(row: dict, user: str, names: list[str] | None, *, entities: bool = True) -> str:
    record = {"user": user, "text": row["text"], "split": row["split"]}
    if names is not None and row["label"] is not None:
        record["label"] = names[row["label"]]
    if entities and row["gold"] is not None:
        record["entities"] = [[g["start"], g["end"], g["category"]] for g in row["gold"]]
    return json.dumps(record, ensure_ascii=False) + "\n"


def one_label_per_user(rows: list[dict]) -> list[dict]:
    """Each user's rows of its most frequent label only (ties: the smallest label): one label per owner, as
    in BBC News (one article per owner) or a per-author corpus."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in rows:
        counts[r["user"]][r["label"]] += 1
    top = {u: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for u, c in counts.items()}
    return [r for r in rows if r["label"] == top[r["user"]]]


def write_one_file(path: Path, *, dataset: str, options: dict, splits: tuple[str, ...], one_label: bool = False,
                   entities: bool = True) -> int:
    """Every user's sentences of the given splits in one JSONL file; returns the number of lines. `one_label`:
    only each user's most frequent label (one_label_per_user); `entities=False`: no hand-labelled entities
    (a bring-your-own corpus as most owners have it: the detector finds them)."""
    _, corpus = materialize(dataset, **options)
    rows = corpus.table.to_pylist()
    if one_label:
        rows = one_label_per_user(rows)
    rows = [r for r in rows if r["split"] in splits]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(_record(r, r["user"], corpus.label_names, entities=entities) for r in rows),
                    encoding="utf-8")
    return len(rows)


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
        path.write_text("".join(_record(r, f"owner-{i:03d}", names) for r in rows), encoding="utf-8")
        paths.append(path)
    (out / OWNERS_FILE).write_text("".join(f"owner-{i:03d}\n" for i in range(len(users))))
    return paths
