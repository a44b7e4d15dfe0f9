"""Entity categories, groups of categories, and entity keys.

Categories follow the UeDP paper (spaCy's PERSON, GPE, LOC, ORG, DATE, NORP, plus CoNLL's MISC) and add
the contact/identifier patterns that rules find: EMAIL, PHONE, ID, CARD, URL.

An entity key is `CATEGORY:text`, with the text case-folded and its white space collapsed, e.g.
`PERSON:david johnson`. A sentence's entity set (what the mechanism samples on, see
docs/mechanism.md section 1) is the set of keys of its entities in the protected categories.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from uedp.errors import ConfigError

CATEGORIES = ("PERSON", "GPE", "LOC", "ORG", "DATE", "NORP", "MISC", "EMAIL", "PHONE", "ID", "CARD", "URL")

CONTACT = ("EMAIL", "PHONE", "ID", "CARD", "URL")

GROUPS: dict[str, tuple[str, ...]] = {
    "all": CATEGORIES,
    "pii": ("PERSON", "GPE", "LOC", *CONTACT),
    "person": ("PERSON",),
    "location": ("GPE", "LOC"),
    "organization": ("ORG",),
    "contact": CONTACT,
}

# spaCy / CoNLL labels -> our categories. Labels not listed (CARDINAL, MONEY, ...) are not sensitive.
LABEL_MAP = {
    "PERSON": "PERSON", "PER": "PERSON",
    "GPE": "GPE", "LOC": "LOC", "FAC": "LOC",
    "ORG": "ORG",
    "DATE": "DATE",
    "NORP": "NORP",
    "MISC": "MISC",
    **{c: c for c in CONTACT},
}

_WS = re.compile(r"\s+")


def entity_key(category: str, text: str) -> str:
    """`PERSON`, `  David   Johnson ` -> `PERSON:david johnson`."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown entity category {category!r}")
    return f"{category}:{_WS.sub(' ', text).strip().casefold()}"


def key_category(key: str) -> str:
    return key.split(":", 1)[0]


def resolve_categories(spec: str | Iterable[str]) -> frozenset[str]:
    """Protected categories from config: a group name (`pii`, `all`, `person`...), a category name, a
    comma-separated mix of both, or a list. Unknown names raise ConfigError naming them."""
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else [str(s).strip() for s in spec]
    out: set[str] = set()
    for item in filter(None, items):
        if item.lower() in GROUPS:
            out.update(GROUPS[item.lower()])
        elif item.upper() in CATEGORIES:
            out.add(item.upper())
        else:
            raise ConfigError(
                f"protected categories: unknown name {item!r}; groups: {', '.join(GROUPS)}; "
                f"categories: {', '.join(CATEGORIES)}"
            )
    if not out:
        raise ConfigError("protected categories: the list is empty")
    return frozenset(out)
