"""Hardening: a private (UeDP) run's outputs hold no canary secret, canary text or corpus entity string.

Every file the run writes (out_dir, recursively, binary files read as bytes) and its captured stdout and
stderr are searched. The prepared corpus and annotation caches under UEDP_CACHE_DIR hold the data by
design (the data owners' files) and are not outputs of the run. The run's tokenizer (the default, trained
on public text) has learnt nothing of the canaries: no half of a secret is a token.
"""

from __future__ import annotations

import io
from pathlib import Path

from runtime.local_grid import LocalGrid, set_local_task_identity
from tests.helpers import tiny_config
from uedp.data.store import load_corpus_dir
from uedp.pipeline import load_manifest, load_tokenizer, prepare


def _needles(cfg) -> set[str]:
    corpus = load_corpus_dir(load_manifest(cfg).corpus_dir)
    needles: set[str] = set()
    for c in corpus.meta["canaries"]:
        needles |= {c["secret"], c["text"], c["prefix"].split("'")[0]}
    table = corpus.table
    texts, golds = table.column("text").to_pylist(), table.column("gold").to_pylist()
    for text, gold in list(zip(texts, golds))[::7]:  # a sample of every 7th sentence's gold entities
        for g in gold or []:
            surface = text[g["start"]:g["end"]]
            if len(surface) >= 6:  # short strings ("May 3") could occur by chance in binary data
                needles.add(surface)
    return needles


def _leaks(blobs: dict[str, bytes], needles: set[str]) -> list[tuple[str, str]]:
    return [(where, n) for where, data in blobs.items() for n in needles
            if n.encode() in data or n.encode("utf-16-le") in data]


def test_private_run_outputs_hold_no_secret_or_entity(tmp_path, capfd):
    out = tmp_path / "run"
    cfg = tiny_config(out, dataset={"options": {"num_users": 8, "min_sentences": 20, "max_sentences": 30,
                                                "canary_users": [1, 2, 4, 8]}},
                      strategy={"name": "uedp"})
    set_local_task_identity()
    from server.app import run_server

    stream = io.StringIO()
    summary = run_server(LocalGrid(cfg, len(prepare(cfg).users)), cfg, stream=stream)
    assert summary["private"] and summary["tokenizer"]["source"] == "public"
    captured = capfd.readouterr()
    needles = _needles(cfg)
    assert len(needles) > 20  # the search has something to find
    files = [p for p in Path(out).rglob("*") if p.is_file()]
    assert {"model.pt", "ledger.json", "summary.json", "config.json"} <= {p.name for p in files}
    blobs = {str(p): p.read_bytes() for p in files}
    blobs["<stream>"] = stream.getvalue().encode()
    blobs["<stdout>"] = captured.out.encode()
    blobs["<stderr>"] = captured.err.encode()
    assert _leaks(blobs, needles) == []
    vocab = set(load_tokenizer(load_manifest(cfg).tokenizer).get_vocab())
    for c in load_corpus_dir(load_manifest(cfg).corpus_dir).meta["canaries"]:
        first, second = c["secret"].split("-")
        assert not {f"Ġ{first}", second} & vocab, c["secret"]


def test_the_search_would_find_a_leak(tmp_path):
    """The needle search itself works: a file holding a canary secret is caught."""
    cfg = tiny_config(tmp_path / "x", dataset={"options": {"num_users": 8, "min_sentences": 20,
                                                           "max_sentences": 30, "canary_users": [1]}})
    prepare(cfg)
    needles = _needles(cfg)
    secret = next(n for n in needles if n.count("-") == 1 and n.replace("-", "").isdigit())
    blobs = {"clean": b"round 1 sampled=4", "leaky": b"\x00\x01" + secret.encode("utf-16-le") + b"\x02"}
    assert _leaks(blobs, needles) == [("leaky", secret)]
