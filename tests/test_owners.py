"""federation.data = owners: each owner reads only its own file, the server reads no private text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import uedp.data.loaders as loaders
import uedp.pipeline as pipeline
import uedp.prepare.users as prepared_users
from runtime.local_grid import run_local
from tests.helpers import operator_rows, tiny_config
from uedp.errors import ConfigError, CorpusError
from uedp.owner_files import OWNERS_FILE, write_owner_files
from uedp.owners import owner_data, read_owner_file, shipped_tokenizer, tokenizer_payload
from uedp.pipeline import owner_task, run_tokenizer


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    """4 owners' files (synthetic users) and a server-owned evaluation file from other personas."""
    root = tmp_path_factory.mktemp("owners")
    paths = write_owner_files(root / "owners", dataset="synthetic",
                              options={"num_users": 4, "min_sentences": 20, "max_sentences": 30})
    other = write_owner_files(root / "eval", dataset="synthetic", splits=("test",),
                              options={"num_users": 3, "min_sentences": 20, "max_sentences": 30, "seed": 7})
    return {"owners": [str(p) for p in paths], "eval": str(other[0]), "root": root}


def _cfg(out: Path, files: dict, **groups):
    base = {"federation": {"data": "owners", "num_nodes": 4, "eval_data": files["eval"], "rounds": 2,
                           "eval_every": 2, "out_dir": str(out), "wait_timeout": 0.0},
            "entities": {"detector": "rules"}, "privacy": {"q_u": 1.0, "m_max": 6}}
    for group, values in groups.items():
        base.setdefault(group, {}).update(values)
    return tiny_config(out, **base)


def test_owner_files_each_in_its_own_directory(files):
    dirs = {Path(p).parent for p in files["owners"]}
    assert len(dirs) == 4
    assert (files["root"] / "owners" / OWNERS_FILE).read_text().split() == [d.name for d in sorted(dirs)]
    users = {json.loads(line)["user"] for line in Path(files["owners"][1]).read_text().splitlines()}
    assert users == {"owner-001"}


def test_one_file_keeps_users_splits_labels_and_gold_spans(tmp_path):
    """--one-file writes a corpus in the JSONL format that loads back to the same sentences and spans."""
    from uedp.data.loaders import load_corpus
    from uedp.owner_files import write_one_file

    options = {"num_users": 3, "min_sentences": 5, "max_sentences": 8}
    path = tmp_path / "all.jsonl"
    write_one_file(path, dataset="synthetic", options=options, splits=("train", "valid", "test"))
    original = load_corpus("synthetic", **options).table.to_pylist()
    back = load_corpus("jsonl", path=path, sentence_split=False).table.to_pylist()
    fields = ("user", "text", "split", "gold")
    assert [[r[f] for f in fields] for r in back] == [[r[f] for f in fields] for r in original]
    assert any(r["gold"] for r in back)


def test_a_run_where_the_server_reads_no_private_text(files, tmp_path, monkeypatch):
    """3 of 4 invited owners connected; nothing in the process may materialize or prepare a corpus (the
    owners read their files with the JSONL reader); the absent owner is sampled and contributes zero."""
    def refused(*args, **kwargs):
        raise AssertionError("a corpus was prepared: the server must read no private text")

    monkeypatch.setattr(pipeline, "prepare", refused)
    monkeypatch.setattr(loaders, "materialize", refused)
    s = run_local(_cfg(tmp_path / "run", files), data_paths=files["owners"][:3])
    assert s["rounds"] == 2 and s["private"] and s["population"] == 4
    assert s["tokenizer"]["source"] == "public" and "perplexity" in s["final"]
    rows = operator_rows(tmp_path / "run")  # the counts: the operator log's, never metrics.jsonl's
    assert [(r["sampled"], r["replies"], r["missing"]) for r in rows] == [(4, 3, 1), (4, 3, 1)]
    assert "operator logs" in s["metrics_note"]


def test_no_evaluation_file_means_no_evaluation(files, tmp_path):
    s = run_local(_cfg(tmp_path / "run", files, federation={"eval_data": "", "rounds": 1}),
                  data_paths=files["owners"])
    assert s["initial"] == {} and s["final"] == {} and s["rounds"] == 1


def test_owner_preparation_is_cached_on_its_disk(files, tmp_path, monkeypatch):
    cfg = _cfg(tmp_path / "run", files)
    tok, _ = run_tokenizer(cfg, None)
    first = owner_data(files["owners"][0], tok, owner_task(cfg))
    monkeypatch.setattr(prepared_users, "annotate_cached", lambda *a, **k: pytest.fail("detected again"))
    again = owner_data(files["owners"][0], tok, owner_task(cfg))
    assert again.user == first.user == "owner-000" and again.entities == first.entities
    assert (again.encoded.ids == first.encoded.ids).all() and len(first.sids) > 0


def test_shipped_tokenizer_round_trip_and_digest(files, tmp_path):
    tok, _ = run_tokenizer(_cfg(tmp_path, files), None)
    payload = tokenizer_payload(tok)
    assert shipped_tokenizer(payload).encode("Hello Paris") == tok.encode("Hello Paris")
    with pytest.raises(ValueError, match="SHA-256"):
        shipped_tokenizer({**payload, "json": payload["json"] + b" "})


def test_classification_labels_map_to_the_public_label_set(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps({"user": "me", "text": f"Sentence {i}.", "label": lab, "split": "train"})
                              for i, lab in enumerate(["tech", "sport", "tech"])) + "\n")
    cfg = tiny_config(tmp_path, task={"name": "classification", "labels": "business,sport,tech"},
                      federation={"data": "owners", "num_nodes": 2}, entities={"detector": "rules"})
    corpus = read_owner_file(path, owner_task(cfg))
    assert corpus.label_names == ["business", "sport", "tech"]
    assert corpus.table.column("label").to_pylist() == [2, 1, 2]  # not the file's own order (sport, tech)
    bad = tiny_config(tmp_path, task={"name": "classification", "labels": "business,tech"},
                      federation={"data": "owners", "num_nodes": 2}, entities={"detector": "rules"})
    with pytest.raises(CorpusError, match="'sport' are not in task.labels"):
        read_owner_file(path, owner_task(bad))


@pytest.mark.parametrize("groups, match", [
    ({"federation": {"data": "owners", "num_nodes": 0}}, "num_nodes"),
    ({"federation": {"data": "owners", "num_nodes": 3}, "privacy": {"paper_z": True}}, "paper_z"),
    ({"federation": {"data": "owners", "num_nodes": 3}, "entities": {"detector": "gold"}}, "gold"),
    ({"federation": {"data": "owners", "num_nodes": 3}, "tokenizer": {"source": "private_split"}}, "public"),
    ({"federation": {"data": "owners", "num_nodes": 3}, "task": {"name": "classification"}}, "task.labels"),
    ({"federation": {"data": "everyone"}}, "must be one of"),
    ({"federation": {"eval_data": "x.jsonl"}}, "eval_data"),
])
def test_owners_mode_refuses_what_would_need_private_text(tmp_path, groups, match):
    groups = {"entities": {"detector": "rules"}, **groups}
    with pytest.raises(ConfigError, match=match):
        tiny_config(tmp_path, **groups)
