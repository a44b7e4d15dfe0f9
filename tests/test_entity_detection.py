"""studies/entity_detection.py and its command: per gold entity, mentions detected with the exact key, holders K
and K', and the epsilon of each method (uedp.privacy.holders.holders_epsilon)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from studies.entity_detection import Entity, gold_corpus, gold_entities
from uedp.entities.detectors import DETECTORS, build_annotations
from uedp.privacy.accounting import mechanism, safe_m_max
from uedp.privacy.holders import holders_epsilon

ROOT = Path(__file__).parents[1]


def _write(path: Path, rows: list[tuple[str, str, list[tuple[str, str]]]]) -> None:
    """A gold set: (user, text, [(surface, CATEGORY)...]), spans found by position of first unused occurrence."""
    lines = []
    for user, text, spans in rows:
        entities, at = [], 0
        for surface, category in spans:
            start = text.index(surface, at)
            entities.append([start, start + len(surface), category])
            at = start + len(surface)
        lines.append(json.dumps({"user": user, "text": text, "split": "valid", "entities": entities}))
    path.write_text("\n".join(lines) + "\n")


def test_entities_count_mentions_detected_with_the_exact_key_and_holders_with_a_miss(tmp_path: Path) -> None:
    _write(tmp_path / "tiny.jsonl", [
        ("a", "Ann Lee met Bo in Paris", [("Ann Lee", "PERSON"), ("Bo", "PERSON"), ("Paris", "GPE")]),
        ("b", "ann lee wrote", [("ann lee", "PERSON")]),
        ("b", "Ann Lee and ANN LEE", [("Ann Lee", "PERSON"), ("ANN LEE", "PERSON")]),
        ("c", "nothing here", []),
    ])
    corpus = gold_corpus("tiny", tmp_path)
    rows = corpus.table.sort_by("sid")
    texts = rows.column("text").to_pylist()
    stub = {  # the detector: Ann Lee in line 1 and once in line 3, Paris as LOC (another key), a false positive
        "Ann Lee met Bo in Paris": [(0, 7, "PERSON"), (18, 23, "LOC")],
        "ann lee wrote": [],
        "Ann Lee and ANN LEE": [(12, 19, "PERSON")],
        "nothing here": [(0, 7, "PERSON")],
    }
    found = build_annotations(rows.column("sid").to_pylist(), texts, [stub[t] for t in texts],
                              identity={"detector": "stub"}, source="stub")
    gold = DETECTORS.create("gold").annotate(corpus)
    tally = gold_entities(corpus, gold, found)
    # "ann lee" and "ANN LEE" share the key: 4 mentions, the sentence of line 3 holds the key (both detected),
    # line 2 misses it (user b holds a missed mention); Paris found as LOC is missed, but a near miss
    assert tally.entities == [Entity("GPE:paris", "GPE", 1, 0, 1, 1), Entity("PERSON:ann lee", "PERSON", 4, 3, 2, 1),
                              Entity("PERSON:bo", "PERSON", 1, 0, 1, 1)]
    assert (tally.mentions, tally.detected, tally.near_missed) == (6, 3, 1)
    assert tally.by_category == {"GPE": (1, 0), "PERSON": (5, 3)} and tally.recall("PERSON") == 0.6
    assert [e.detection for e in tally.entities] == ["never", "partly", "never"]
    only_persons = gold_entities(corpus, gold, found, protected="PERSON")
    assert [e.key for e in only_persons.entities] == ["PERSON:ann lee", "PERSON:bo"] and only_persons.mentions == 5


def test_command_writes_the_tables_and_each_epsilon_is_holders_epsilon(tmp_path: Path) -> None:
    # the `rules` detector finds the phone number after "call"/"text" only, and e-mail addresses
    _write(tmp_path / "tiny.jsonl", [
        ("a", "call 555-0147 tonight, ann", [("555-0147", "PHONE"), ("ann", "PERSON")]),
        ("b", "it was 555-0147 back then", [("555-0147", "PHONE")]),
        ("c", "text 555-0147 or mail x@example.com", [("555-0147", "PHONE"), ("x@example.com", "EMAIL")]),
        ("c", "x@example.com and X@example.com", [("x@example.com", "EMAIL"), ("X@example.com", "EMAIL")]),
    ])
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "experiments.entity_detection", "--sets", "tiny", "--detector",
                           "rules", "--gold-dir", str(tmp_path), "--out", str(out), "--vdi", "0.05"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "entity-detection.json").read_text())
    tiny = result["sets"]["tiny"]
    got = {e["key"]: (e["mentions"], e["detected"], e["holders"], e["missed_holders"]) for e in tiny["entities"]}
    assert got == {"PHONE:555-0147": (3, 2, 3, 1), "PERSON:ann": (1, 0, 1, 1), "EMAIL:x@example.com": (3, 3, 1, 0)}
    assert tiny["detection"] == {"never": 1, "partly": 1, "always": 1} and tiny["mention_recall"] == 5 / 7
    s = result["settings"]
    assert (s["num_users"], s["rounds"], s["z"], s["user_q_u"], s["vdi"]) == (400, 30, 3.288, 0.25, 0.05)
    assert abs(s["user_dp_z"] - 1.13) < 0.01  # eps_user 8 at q_u 0.25 (docs/figures/i22-bbc-tuning.md: 1.13)
    uedp = [(mechanism("uedp", z=3.288, q_u=1.0, q_e=0.2, q_s=1.0, m_max=safe_m_max(400, 1.0, 30, 1e-5),
                       k_cap=1), 30)]
    user = [(mechanism("user_dp", z=s["user_dp_z"], q_u=0.25, m_max=None), 30)]
    for e in tiny["entities"]:
        k, missed = e["holders"], e["missed_holders"]
        direct = holders_epsilon(uedp, k, delta=1e-5, num_users=400, missed=missed, value_discretization_interval=0.05)
        assert e["eps_uedp"] == direct.epsilon, e["key"]
        direct_user = holders_epsilon(user, k, delta=1e-5, num_users=400, value_discretization_interval=0.05)
        assert e["eps_user_dp"] == direct_user.epsilon and e["eps_fedavg"] is None, e["key"]  # null: inf
    by_key = {e["key"]: e for e in tiny["entities"]}
    assert by_key["EMAIL:x@example.com"]["eps_uedp"] < by_key["PHONE:555-0147"]["eps_uedp"]  # eps_uedp < mixed
    assert math.isfinite(by_key["PHONE:555-0147"]["eps_uedp"])
    assert tiny["bands"]["fedavg"]["inf"] == 3 and sum(tiny["bands"]["uedp"].values()) == 3
    text = (out / "entity-detection.md").read_text()
    assert "| tiny | 4 | 3 | 7 | 5 (0.71) | 0 | 3 |" in text and text.rstrip().endswith("--vdi 0.05`")
    assert "| tiny | UeDP |" in proc.stdout
