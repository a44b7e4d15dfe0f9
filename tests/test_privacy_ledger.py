"""The privacy ledger: records, ordering, persistence, resume, epsilons from the ledger, budget stop."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from uedp.errors import ConfigError
from uedp.privacy.accounting import epsilons_of
from uedp.privacy.ledger import Ledger, RoundRecord


def record(t: int, **changes) -> RoundRecord:
    base = dict(round=t, rule="uedp", q_u=0.1, q_e=0.3, q_s=0.1, m_max=40, k_cap=2, beta=0.5, w_max=1.0,
                z=1.2, denominator=4.0)  # fmt: skip
    return RoundRecord(**{**base, **changes})


def test_record_holds_public_parameters_only() -> None:
    r = record(1)
    names = {f.name for f in dataclasses.fields(RoundRecord)}
    assert names == {"round", "rule", "q_u", "q_e", "q_s", "m_max", "k_cap", "beta", "w_max", "z", "denominator",
                     "gamma", "noise"}
    # the file keeps its keys: the public denominator is saved as "Z", the accounting rule as "method" (FILE_KEYS)
    assert list(r.to_dict()) == ["round", "method", "q_u", "q_e", "q_s", "m_max", "k_cap", "beta", "w_max", "z", "Z",
                                 "gamma", "noise", "sigma"]
    assert r.sigma == pytest.approx(1.2 * (1 + 4) * 0.5)  # z (s_u + s_e) w_max beta, cap on: a product, few ulps
    assert RoundRecord.from_dict(r.to_dict()) == r
    with pytest.raises(ConfigError, match="sigma"):
        RoundRecord.from_dict({**r.to_dict(), "sigma": r.sigma * 0.5})
    with pytest.raises(ConfigError, match="unknown"):
        RoundRecord.from_dict({**r.to_dict(), "sampled_users": 7})
    with pytest.raises(ConfigError, match="q_u"):
        record(1, q_u=2.0)
    with pytest.raises(ConfigError, match="w_max"):
        record(1, w_max=1.5)
    with pytest.raises(ConfigError, match="denominator"):
        record(1, denominator=0.0)
    with pytest.raises(ConfigError, match="round"):
        record(-1)
    with pytest.raises(ConfigError, match="noise must be one of"):
        record(1, noise="float32")


def test_rounds_are_contiguous_from_one_and_never_recorded_twice() -> None:
    ledger = Ledger()
    with pytest.raises(ConfigError, match="round 2 cannot follow the start: round 1 is missing"):
        ledger.append(record(2))
    ledger.append(record(1))
    ledger.append(record(2))
    for bad in (record(2), record(1), record(0)):
        with pytest.raises(ConfigError, match="strictly increase"):
            ledger.append(bad)
    with pytest.raises(ConfigError, match="round 3 is missing"):
        ledger.append(record(4))
    with pytest.raises(ConfigError, match=r"round\(s\) 3..4 are missing"):
        ledger.append(record(5))
    assert [r.round for r in ledger.records] == [1, 2] and ledger.last_round == 2  # state unchanged
    with pytest.raises(ConfigError, match="strictly increase"):
        ledger.check_budget(record(2), target_epsilon=10.0)


def test_epsilons_are_computed_from_the_records() -> None:
    ledger = Ledger(delta=1e-5, num_users=100)
    assert ledger.epsilons()["eps_uedp"] == 0.0 and ledger.epsilons()["rounds"] == 0
    for t in range(1, 5):
        ledger.append(record(t))
    for t in range(5, 8):
        ledger.append(record(t, z=2.0, k_cap=None))
    assert [(m.z, c) for m, c in ledger.runs()] == [(1.2, 4), (2.0, 3)]
    expected = epsilons_of(ledger.runs(), delta=1e-5, num_users=100).as_dict()
    assert ledger.epsilons() == expected and expected["rounds"] == 7
    assert ledger.epsilons(delta=1e-6)["eps_uedp"] > expected["eps_uedp"]


def test_delta_is_validated() -> None:
    with pytest.raises(ConfigError, match="delta"):
        Ledger(delta=0.01, num_users=200)
    with pytest.raises(ConfigError, match="delta"):
        Ledger(delta=1.0)
    ledger = Ledger(delta=1e-5, num_users=1000)
    with pytest.raises(ConfigError, match="delta"):
        ledger.epsilons(delta=0.002)


def test_json_round_trip_and_atomic_save(tmp_path) -> None:
    ledger = Ledger(delta=1e-5, num_users=500)
    for t in (1, 2, 3):
        ledger.append(record(t, rule="uedp_naive", q_s=0.0) if t == 3 else record(t))
    path = ledger.save(tmp_path / "ckpt" / "ledger.json")
    assert sorted(p.name for p in path.parent.iterdir()) == ["ledger.json"]  # no temporary file left
    data = json.loads(path.read_text())
    assert data["format"] == "uedp-ledger" and len(data["rounds"]) == 3
    assert "key" not in path.read_text()
    loaded = Ledger.load(path)
    assert loaded.records == ledger.records and loaded.delta == ledger.delta and loaded.num_users == 500
    assert loaded.epsilons() == ledger.epsilons()  # the same records (JSON round trips exact), the same code
    path.write_text(path.read_text().replace('"z": 1.2', '"z": -1.0', 1))
    with pytest.raises(ConfigError, match="ledger.json"):
        Ledger.load(path)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="bad.json"):
        Ledger.load(tmp_path / "bad.json")


def test_resume_continues_the_same_ledger(tmp_path) -> None:
    path = tmp_path / "ledger.json"
    first = Ledger.resume(path, delta=1e-5, num_users=100)
    assert len(first) == 0
    for t in (1, 2, 3):
        first.append(record(t))
    first.save(path)
    resumed = Ledger.resume(path, delta=1e-5, num_users=100)
    assert resumed.records == first.records
    with pytest.raises(ConfigError, match="strictly increase"):
        resumed.append(record(3))  # the budget of round 3 is never spent twice
    resumed.append(record(4))
    assert resumed.epsilons()["rounds"] == 4
    assert resumed.epsilons()["eps_uedp"] > first.epsilons()["eps_uedp"]
    with pytest.raises(ConfigError, match="delta"):
        Ledger.resume(path, delta=1e-6, num_users=100)


def test_budget_stop() -> None:
    """Run rounds while the budget allows: the run stops exactly before the round that would exceed it."""
    ledger = Ledger(delta=1e-5, num_users=40)  # N <= m_max: no truncation charge
    target = 0.8  # eps_uedp is 0.74 after 4 rounds, 0.82 after 5
    stopped_at = None
    for t in range(1, 200):
        check = ledger.check_budget(record(t, z=3.0), target_epsilon=target)
        if not check.allowed:
            stopped_at = t
            assert check.epsilon_after > target
            break
        ledger.append(record(t, z=3.0))
    assert stopped_at == 5 and len(ledger) == 4
    assert ledger.epsilons()["eps_uedp"] <= target
    assert len(ledger) == stopped_at - 1  # check_budget never records anything
    user_check = ledger.check_budget(record(stopped_at, z=3.0), target_epsilon=target, adjacency="user")
    assert user_check.allowed and user_check.epsilon_after < target
    assert not math.isnan(user_check.epsilon_after)


def test_budget_stop_on_either_claimed_epsilon() -> None:
    """A UeDP run claims eps_uedp AND eps_undetected: the budget stops before EITHER passes the target.
    With q_s = 1 the undetected term binds first here (and with eps_uedp alone the run would go on)."""
    def rec(t: int) -> RoundRecord:
        return record(t, z=1.0, q_u=0.5, q_s=1.0, q_e=0.05)

    ledger = Ledger(delta=1e-5, num_users=40)
    target = 2.0
    for t in range(1, 200):
        check = ledger.check_budget(rec(t), target_epsilon=target, adjacency=("uedp", "undetected"))
        if not check.allowed:
            break
        ledger.append(rec(t))
    eps = ledger.epsilons()
    assert eps["eps_uedp"] <= target and eps["eps_undetected"] <= target
    assert check.exceeded == ["undetected"] and check.epsilons_after["undetected"] > target
    assert check.epsilons_after["uedp"] <= target  # eps_uedp alone would have allowed this round
    assert ledger.check_budget(rec(t), target_epsilon=target, adjacency="uedp").allowed
    with pytest.raises(ConfigError, match="adjacency"):
        ledger.check_budget(rec(t), target_epsilon=target, adjacency=("uedp", "entity"))


# -- the hash chain ------------------------------------------------------------------------------------------
def _saved(tmp_path, rounds: int = 5):
    ledger = Ledger(delta=1e-5, num_users=100, records=[record(t, noise="secure") for t in range(1, rounds + 1)])
    path = ledger.save(tmp_path / "ledger.json")
    return ledger, path, json.loads(path.read_text())


def _write(path, data) -> None:
    path.write_text(json.dumps(data))


def test_each_record_carries_the_previous_hash_and_the_file_its_head(tmp_path) -> None:
    ledger, path, data = _saved(tmp_path)
    assert data["version"] == 2 and data["chain"] == "sha256"
    assert data["rounds"][0]["prev"] == ledger.genesis
    assert [r["prev"] for r in data["rounds"][1:]] == [r["hash"] for r in data["rounds"][:-1]]
    assert data["head"] == {"round": 5, "hash": data["rounds"][-1]["hash"]} == ledger.head.to_dict()
    assert ledger.head_at(3).hash == data["rounds"][2]["hash"] and ledger.head_at(0).hash == ledger.genesis
    loaded = Ledger.load(path)
    assert loaded.records == ledger.records and loaded.head == ledger.head
    assert [r.noise for r in loaded.records] == ["secure"] * 5
    # the chain depends on the header: the same records under another delta have other hashes
    other = Ledger(delta=1e-6, num_users=100, records=ledger.records)
    assert other.head.hash != ledger.head.hash
    with pytest.raises(ConfigError, match="round 7 is not in the ledger"):
        ledger.head_at(7)


@pytest.mark.parametrize("change, message", [
    (lambda d: d["rounds"].pop(2), "round 4 cannot follow round 2: round 3 is missing"),
    (lambda d: d["rounds"].__setitem__(slice(1, 3), d["rounds"][2:0:-1]), "round 3 cannot follow round 1"),
    (lambda d: d.__setitem__("rounds", d["rounds"][:3]), r"head is round 5 but its records end at round 3: "
                                                          r"round\(s\) 4..5 were deleted"),
    (lambda d: d["rounds"][2].update(z=2.4, sigma=d["rounds"][2]["sigma"] * 2), "round 3's hash does not match"),
    (lambda d: d["rounds"][0].update(q_u=0.2), "round 1's hash does not match its record: round 1 was edited"),
    (lambda d: d.update(delta=1e-6), "round 1's previous hash does not match the header"),
    (lambda d: d["head"].update(round=4, hash=d["rounds"][3]["hash"]), "head is round 4 but its records end at "
                                                                        "round 5"),
])
def test_a_deleted_swapped_or_edited_round_is_refused_naming_it(tmp_path, change, message) -> None:
    _, path, data = _saved(tmp_path)
    change(data)
    _write(path, data)
    with pytest.raises(ConfigError, match=message):
        Ledger.load(path)


def test_renumbered_rounds_with_recomputed_hashes_still_break_at_the_seam(tmp_path) -> None:
    """Deleting round 3 and renumbering 4, 5 as 3, 4 (hashes of the old file kept) fails at the first record
    whose link changed."""
    _, path, data = _saved(tmp_path)
    del data["rounds"][2]
    for r in data["rounds"][2:]:
        r["round"] -= 1
    data["head"]["round"] = 4
    _write(path, data)
    with pytest.raises(ConfigError, match="round 3's previous hash does not match round 2"):
        Ledger.load(path)


def test_a_version_1_ledger_still_loads_and_is_saved_chained(tmp_path) -> None:
    ledger, path, data = _saved(tmp_path, rounds=3)
    old = {"format": "uedp-ledger", "version": 1, "delta": data["delta"], "num_users": data["num_users"],
           "rounds": [{k: v for k, v in r.items() if k not in ("prev", "hash", "noise")} for r in data["rounds"]]}
    _write(path, old)
    loaded = Ledger.load(path)
    assert [r.noise for r in loaded.records] == ["unrecorded"] * 3 and loaded.epsilons() == ledger.epsilons()
    old["rounds"].pop(1)
    _write(path, old)
    with pytest.raises(ConfigError, match="round 2 is missing"):  # contiguity holds for version 1 files too
        Ledger.load(path)


# A ledger saved before RoundRecord's `Z` became `denominator` and its `method` became `rule` (its fields and hashes
# as that code wrote them, the file JSON with indent 1): the file format and every record's hash are unchanged by
# both renames. Its two rounds differ only in their number and their place in the hash chain.
HASHES = ("c76970a7a1afee936942682d8c55ea9c555101faf60efdb8568449a6331e872e",  # the chain's start, then rounds 1, 2
          "ef0dd28bbd6b1bbd20a6e39a3f8720c44183990ca127f61047d9f994bc56ab0a",
          "4a41a713ca698234f5972122a34c7731b6b730655a63d7cea27c41ac9906a656")
BEFORE_THE_RENAME = json.dumps({
    "format": "uedp-ledger", "version": 2, "chain": "sha256", "delta": 1e-05, "num_users": 200,
    "rounds": [{"round": t, "method": "uedp", "q_u": 0.25, "q_e": 0.2, "q_s": 0.2, "m_max": 40, "k_cap": 1, "beta": 0.2,
                "w_max": 1.0, "z": 1.5, "Z": 50.0, "gamma": 0.0, "noise": "secure", "sigma": 0.9,
                "prev": HASHES[t - 1], "hash": HASHES[t]} for t in (1, 2)],
    "head": {"round": 2, "hash": HASHES[2]},
}, indent=1)


def test_a_ledger_saved_before_the_rename_loads_and_saves_byte_identically(tmp_path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(BEFORE_THE_RENAME)
    loaded = Ledger.load(path)  # every hash and the head verified
    assert [r.denominator for r in loaded.records] == [50.0, 50.0] and [r.rule for r in loaded.records] == ["uedp"] * 2
    assert loaded.head.hash == HASHES[2]
    assert loaded.to_dict() == json.loads(BEFORE_THE_RENAME)
    assert loaded.save(tmp_path / "again.json").read_text() == BEFORE_THE_RENAME
    # built afresh with the new name, the same rounds give the same file
    fresh = Ledger(delta=1e-5, num_users=200, records=[
        RoundRecord(round=t, rule="uedp", q_u=0.25, q_e=0.2, q_s=0.2, m_max=40, k_cap=1, beta=0.2, w_max=1.0,
                    z=1.5, denominator=50.0, noise="secure") for t in (1, 2)])
    assert fresh.save(tmp_path / "fresh.json").read_text() == BEFORE_THE_RENAME
    with pytest.raises(ConfigError, match=r"unknown fields \['denominator'\], missing fields \['Z'\]"):
        RoundRecord.from_dict({("denominator" if k == "Z" else k): v for k, v in loaded.records[0].to_dict().items()})
    with pytest.raises(ConfigError, match=r"unknown fields \['rule'\], missing fields \['method'\]"):
        RoundRecord.from_dict({("rule" if k == "method" else k): v for k, v in loaded.records[0].to_dict().items()})
