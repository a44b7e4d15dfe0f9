"""De-identification (deid, and deid_dp under user-level DP): placeholders replace protected entities before the
client trains."""

from __future__ import annotations

import math

import client.update
from client.update import client_update
from runtime.local_grid import run_local
from tests.helpers import tiny_config
from uedp.config import PrivacyConfig
from uedp.data.store import read_user_rows
from uedp.entities.deid import deidentify
from uedp.pipeline import load_manifest, load_tokenizer, load_user_data, prepare
from uedp.privacy import mechanisms
from uedp.privacy.ledger import Ledger
from uedp.privacy.mechanisms import spec_for


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


def test_deid_dp_spec_is_user_dp_on_deidentified_text():
    spec, user = mechanisms.get("deid_dp"), mechanisms.get("user_dp")
    assert spec_for("deid_dp", "f_E+") is spec and spec.strategy == "deid_dp" and spec.deidentify
    assert (spec.rule, spec.adjacency, spec.claims, spec.private, spec.summary_method) == (
        "user_dp", "user", ("user",), True, "user_dp")
    assert spec.rates(PrivacyConfig(q_e=0.3, q_s=0.4)) == (1.0, 1.0)
    # everything but the name, the config strategy, the de-identification and the words is user_dp's
    same = ("estimator", "rule", "adjacency", "keyed", "truncate", "entity_cap", "local", "split", "aliases",
            "summary_method")
    assert [getattr(spec, f) for f in same] == [getattr(user, f) for f in same] and not user.deidentify


def test_deid_dp_run_is_private_user_dp_on_deidentified_text(tmp_path, monkeypatch):
    """strategy=deid_dp: clipped, noised and accounted as user_dp (the same eps_user at the same z, rounds and
    q_u), and every client round reads de-identified data (a user_dp run, the control, reads the raw text)."""
    seen: list[tuple[str, bool, bool]] = []

    def spy(cfg, node, weights, ins, training):
        seen.append((ins.spec.name, ins.private, ins.beta > 0))
        return client_update(cfg, node, weights, ins, training)

    loads: list[bool] = []

    def load(cfg, partition_id, *, deidentified=False):
        loads.append(deidentified)
        return load_user_data(cfg, partition_id, deidentified=deidentified)

    monkeypatch.setattr(client.update, "load_user_data", load)
    privacy = {"q_u": 0.5, "noise_multiplier": 1.0}
    runs = {}
    for name in ("deid_dp", "user_dp"):
        seen.clear(), loads.clear()
        runs[name] = run_local(tiny_config(tmp_path / name, strategy={"name": name}, privacy=privacy,
                                           federation={"rounds": 2, "eval_every": 2}), client_fn=spy)
        assert seen and set(seen) == {(name, True, True)}  # private instructions: clip beta > 0
        assert loads and set(loads) == {name == "deid_dp"}
    s, ref = runs["deid_dp"], runs["user_dp"]
    assert s["strategy"] == "deid_dp" and s["method"] == "user_dp" and s["private"] is True
    assert s["sigma"] > 0 and math.isfinite(s["eps_user"]) and s["eps_user"] == ref["eps_user"]
    assert s["eps_uedp"] == float("inf")  # user-level DP claims no entity epsilon
    ledger = Ledger.load(tmp_path / "deid_dp" / "ledger.json")
    assert len(ledger) == 2 and {(r.rule, r.q_e, r.q_s, r.k_cap, r.m_max) for r in ledger.records} == {
        ("user_dp", 1.0, 1.0, None, None)}
