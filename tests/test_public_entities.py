"""Public entities (uedp.entities.public): exact keys only, what they free, how a run records the policy."""

from __future__ import annotations

import pyarrow as pa
import pytest

from uedp.categories import entity_key
from uedp.config import RunConfig
from uedp.entities.detectors import ANNOTATION_SCHEMA, entity_sets
from uedp.entities.public import POLICIES, policy_record, public_keys
from uedp.errors import ConfigError


def test_the_policy_is_exact_keys_of_public_names() -> None:
    keys = public_keys("places_calendar")
    for name in (("GPE", "France"), ("GPE", "London"), ("LOC", "Texas"), ("DATE", "Monday"), ("DATE", "march"),
                 ("DATE", "Christmas")):
        assert entity_key(*name) in keys, name
    for name in (("PERSON", "June"), ("DATE", "March 3 2019"), ("GPE", "France and Spain"), ("ORG", "France"),
                 ("GPE", "Smallville")):
        assert entity_key(*name) not in keys, name
    assert public_keys("none") == frozenset()
    record = policy_record("places_calendar")
    assert record == policy_record("places_calendar") and record["keys"] == len(keys) > 1000
    assert len(record["sha256"]) == 64 and POLICIES == ("none", "places_calendar")


def _annotations(rows: list[list[tuple[str, str]]]) -> pa.Table:
    entities = [[{"start": 0, "end": 1, "category": c, "key": entity_key(c, t)} for c, t in row] for row in rows]
    return pa.Table.from_pydict({"sid": list(range(len(rows))), "entities": entities}, schema=ANNOTATION_SCHEMA)


def test_a_sentence_with_only_public_entities_becomes_entity_free() -> None:
    table = _annotations([[("GPE", "Paris"), ("DATE", "Monday")], [("GPE", "Paris"), ("PERSON", "Ann Lee")], [],
                          [("DATE", "March 3 2019")]])
    everything = {"GPE", "LOC", "DATE", "PERSON"}
    before = entity_sets(table, everything)
    after = entity_sets(table, everything, public_keys("places_calendar"))
    assert [len(s) for s in before] == [2, 2, 0, 1]
    assert after[0] == frozenset() and after[1] == {"PERSON:ann lee"} and after[2] == frozenset()
    assert after[3] == {"DATE:march 3 2019"}  # a full date stays protected


def test_config_refuses_an_unknown_policy_and_a_run_records_the_policy(tmp_path) -> None:
    with pytest.raises(ConfigError, match="entities.public"):
        RunConfig.from_nested({"entities": {"public": "everything"}})
    from runtime.local_grid import run_local
    from tests.helpers import tiny_config

    s = run_local(tiny_config(tmp_path, entities={"public": "places_calendar"}, federation={"rounds": 1}))
    assert s["public_entities"] == policy_record("places_calendar")
