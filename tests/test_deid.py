"""The de-identification baseline: placeholders replace protected entities before the client trains."""

from __future__ import annotations

from runtime.local_grid import run_local
from tests.helpers import tiny_config
from uedp.data.store import read_user_rows
from uedp.entities.deid import deidentify
from uedp.pipeline import load_manifest, load_tokenizer, load_user_data, prepare


def test_deidentify_replaces_protected_spans_only():
    text = "Call David Lee at 555-123-4567 in Paris."
    spans = [{"start": 5, "end": 14, "category": "PERSON"}, {"start": 18, "end": 30, "category": "PHONE"},
             {"start": 34, "end": 39, "category": "GPE"}]
    assert deidentify(text, spans, frozenset({"PERSON", "PHONE"})) == "Call [PERSON] at [PHONE] in Paris."
    overlapping = [{"start": 5, "end": 14, "category": "PERSON"}, {"start": 11, "end": 18, "category": "ORG"}]
    assert deidentify(text, overlapping, frozenset({"PERSON", "ORG"})) == "Call [PERSON] at 555-123-4567 in Paris."
    assert deidentify(text, [], frozenset({"PERSON"})) == text


def test_deidentified_client_data_holds_no_entity_string(tmp_path):
    cfg = tiny_config(tmp_path, strategy={"name": "deid"})
    prepare(cfg)
    manifest = load_manifest(cfg)
    tok = load_tokenizer(manifest.tokenizer)
    for pid in range(3):
        rows = read_user_rows(manifest.corpus_dir, manifest.users[pid], split="train").to_pylist()
        surface = {r["text"][g["start"]:g["end"]] for r in rows for g in r["gold"]}
        assert surface  # the user has entities
        data = load_user_data(cfg, pid, deidentified=True)
        decoded = [tok.decode(ids[mask.bool()].tolist()) for ids, mask in zip(data.encoded.ids, data.encoded.mask)]
        joined = "\n".join(decoded)
        assert not [s for s in surface if s in joined]
        assert "[PERSON]" in joined
        raw = load_user_data(cfg, pid)
        assert any(s in "\n".join(tok.decode(ids[m.bool()].tolist()) for ids, m in zip(raw.encoded.ids,
                                                                                      raw.encoded.mask))
                   for s in surface)  # control: without de-identification the strings are there


def test_deid_run_is_noiseless_and_reported_as_such(tmp_path):
    s = run_local(tiny_config(tmp_path, strategy={"name": "deid"}, federation={"rounds": 2, "eval_every": 2}))
    assert s["strategy"] == "deid" and s["method"] == "noiseless" and not s["private"]
    assert s["eps_uedp"] == float("inf")
