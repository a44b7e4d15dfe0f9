"""Rules for informal text (chat, social media), used by the `ensemble` detector and the profiles built on it
(uedp.entities.profiles).

- `handle_spans`: every @mention is an entity, the whole token with its "@": ORG when the handle names an
  organization of the gazetteer (`@tmobile`, `@JetBlue`), else PERSON (`@marcus.t`, `@bree_lopez`); a
  #hashtag is ORG when it names one (`#Lakers`), else nothing.
- `date_spans`: dates spaCy's small model misses in lower-cased text: weekdays and months with their
  modifiers ("next saturday", "this sat", "sept 16", "aug 2-9", "july 4th"), "tmrw"/"tomorrow"/"yesterday"/
  "tonight"/"today", "this/next/last week|month|year|weekend|summer...", and named holidays.
- `clean_span`: a span's possessive "'s" and a leading title ("prof adebayo's" -> "adebayo") are not part
  of the entity.

`INFORMAL_VERSION` is part of the ensemble's identity: bump it when a rule changes.
"""

from __future__ import annotations

import functools
import re

from uedp.entities.gazetteers import TITLES, _key, organizations
from uedp.entities.rules import Span

INFORMAL_VERSION = "2"

_HANDLE = re.compile(r"(?<![\w@])[@#][A-Za-z0-9_](?:[A-Za-z0-9_.]*[A-Za-z0-9_])?")
_WEEKDAY = r"(?:mon|tues?|wed(?:nes)?|thu(?:rs?)?|fri|sat(?:ur)?|sun)day"
_WEEKDAY_SHORT = r"(?:mon|tues?|wed|thu(?:rs?)?|fri|sat|sun)"
_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?|"
          r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
_DAY = r"\d{1,2}(?:st|nd|rd|th)?(?:\s?-\s?\d{1,2}(?:st|nd|rd|th)?)?"
_HOLIDAYS = (r"christmas(?: eve| day)?|xmas|easter(?: sunday| monday)?|thanksgiving|halloween|diwali|eid|"
             r"hanukkah|chanukah|ramadan|passover|new year'?s(?: eve| day)?|valentine'?s day|mother'?s day|"
             r"father'?s day|memorial day|labou?r day|independence day|boxing day|good friday|fat tuesday|"
             r"mardi gras|st\.? patrick'?s day|juneteenth|lunar new year|pongal|holi|navratri|vesak|"
             r"dia de (?:los )?muertos")
_RELATIVE = r"(?:this|next|last|the)\s+(?:week|weekend|month|year|summer|winter|spring|autumn|fall|morning)"
_DATE = re.compile(
    rf"\b(?:"
    rf"(?:(?:this|next|last|on)\s+)?{_WEEKDAY}s?"
    rf"|(?:this|next|last)\s+{_WEEKDAY_SHORT}\.?"
    rf"|{_MONTH}\.?\s+{_DAY}(?:,?\s+\d{{4}})?"
    rf"|{_DAY}\s+(?:of\s+)?{_MONTH}(?:,?\s+\d{{4}})?"
    rf"|tmrw|tmr|tomorrow|tommorow|tomorow|yesterday|tonight|today"
    rf"|{_RELATIVE}"
    rf"|{_HOLIDAYS}"
    rf")\b",
    re.IGNORECASE,
)


def handle_spans(text: str) -> list[Span]:
    out: list[Span] = []
    orgs = organizations()
    for m in _HANDLE.finditer(text):
        name = m.group(0)[1:]
        words = _key(name.replace("_", " ").replace(".", " "))
        squashed = re.sub(r"[^a-z0-9]", "", name.lower())
        is_org = words in orgs or squashed in _squashed_orgs()
        if is_org:
            out.append((m.start(), m.end(), "ORG"))
        elif m.group(0)[0] == "@":
            out.append((m.start(), m.end(), "PERSON"))
    return out


@functools.cache
def _squashed_orgs() -> frozenset[str]:
    """The organization list with everything but letters and digits removed ("t mobile" -> "tmobile")."""
    return frozenset(re.sub(r"[^a-z0-9]", "", o) for o in organizations())


def date_spans(text: str) -> list[Span]:
    out = []
    for m in _DATE.finditer(text):
        start = m.start()
        if m.group(0).lower().startswith("on "):  # "on friday": the preposition is not part of the date
            start += 3
        out.append((start, m.end(), "DATE"))
    return out


_POSSESSIVE = re.compile(r"['\u2019]s?$")


def clean_span(text: str, span: Span) -> Span | None:
    """Without a trailing possessive and, for PERSON, a leading title; None if nothing is left."""
    start, end, category = span
    surface = text[start:end]
    m = _POSSESSIVE.search(surface)
    if m and category != "DATE" and not surface.lower().endswith(("'s day", "s'")):
        end -= len(m.group(0))
    if category == "PERSON":
        first = re.match(r"([A-Za-z]+)\.?\s+", text[start:end])
        if first and first.group(1).lower() in TITLES:
            start += first.end()
    while end > start and not text[end - 1].isalnum():
        end -= 1
    return (start, end, category) if end > start else None


def _overlaps(a: Span, b: Span) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def ensemble_spans(text: str, ner: list[Span], gazetteer: list[Span] | None = None) -> list[Span]:
    """The ensemble's non-rule spans of one sentence: @handles first; then spaCy, the informal dates and the
    gazetteers. In a sentence with no capital letter (where spaCy's small model guesses) the dates replace
    an overlapping spaCy DATE and the gazetteers win where they overlap spaCy; elsewhere spaCy wins and the
    others only fill in. Each span is cleaned (clean_span). `gazetteer`: the sentence's gazetteer spans when
    the caller has them (a profile's own Gazetteers), else GAZETTEERS.spans(text) (the ensemble's)."""
    from uedp.entities.gazetteers import GAZETTEERS, merge_spans

    taken = handle_spans(text)
    lower = not any(c.isupper() for c in text)
    dates = [d for d in date_spans(text) if not any(_overlaps(d, t) for t in taken)]
    if lower:
        ner = [s for s in ner if not (s[2] == "DATE" and any(_overlaps(s, d) for d in dates))]
    else:
        dates = [d for d in dates if not any(_overlaps(d, s) for s in ner)]
    if gazetteer is None:
        gazetteer = GAZETTEERS.spans(text)
    first, second = (gazetteer, ner) if lower else (ner, gazetteer)
    spans = merge_spans(merge_spans(taken, dates), merge_spans(first, second))
    return sorted(s for s in (clean_span(text, s) for s in spans) if s is not None)
