"""Pattern rules for the sensitive strings that NER misses: e-mail addresses, phone numbers, ID numbers,
payment-card numbers and URLs.

`find_rule_spans(text)` returns non-overlapping `(start, end, category)` character spans, sorted by start,
with categories EMAIL, PHONE, ID, CARD, URL (see uedp.categories). What each rule accepts:

- EMAIL: `local@domain.tld` (RFC 5322 "dot-atom" subset: letters, digits and `._%+-` in the local part).
- URL: `http://...`, `https://...` or `www....` up to the next white space; trailing punctuation
  (`.,;:!?'"` and an unmatched closing bracket) is not part of the URL.
- CARD: 13 to 19 digits, written either without separators or in the usual groups (4-4-4-x, 4-4-4-4-x,
  Amex/Diners 4-6-4/5) separated by one consistent space or dash; the Luhn checksum must hold.
- PHONE: North-American numbers `(555) 123-4567`, `555-123-4567`, `555.123.4567`, `555 123 4567`
  (optionally prefixed `1-` or `+1 `), and international numbers starting with `+` and a country code
  (`+44 20 7946 0958`) with 8 to 15 digits in all (E.164).
- ID: SSN-like `ddd-dd-dddd`; account-style `dddd-dddd` (except year ranges such as `1990-1995`, both
  halves in 1000..2099); alphanumeric identifiers of 1-3 capital letters and 6-10 digits (`AB123456`); and
  (since version 2) a code of 5 or more capital letters, digits and dashes holding a digit that follows, as a
  separate word, a word naming one ("ref", "reference", "booking ref", "confirmation", "conf number",
  "tracking", "order", "acct", "account", "policy", "ticket", "invoice", "member", "membership", "sort code",
  "case", "claim", "reservation", "customer": `ref QZ7K4P`, `tracking 1Z84A9W2036`), unless it is a range, a
  season, a count of 5 digits or fewer, or a name with a number (`order 10-12`, `case 2021-22`, `COVID-19`).
- PHONE (since version 2): UK-style national numbers, 0 and 9 or 10 more digits in two or three groups
  (`07700 900461`, `020 7946 0958`), and seven-digit local numbers `555-0147` after a word for calling
  ("call", "text", "phone", "number", "mobile", "whatsapp", ...).
- URL (since version 2): a bare domain with a common top-level domain and a path (`github.com/me/repo`).

Numbers are matched whole: a rule never matches inside a longer run of digits, letters or separators
(so `2021-03-04` is neither a phone nor an ID, and `12345-6789` is not `dddd-dddd`); a code after a keyword
is matched whole too, and the keyword must be a word of its own ("refs12345" is no code).

Where two rules match overlapping text, the earlier rule in `RULE_ORDER` wins; where a rule and spaCy
overlap, the rule wins (see uedp.entities.detectors). Bump `RULES_VERSION` whenever a rule changes: it is
part of the annotation cache key.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

RULES_VERSION = 3

Span = tuple[int, int, str]

# A number starts after a non-word character that is not itself part of a number (`+`, `-`, `.`, `/`
# followed by a digit), and ends before such a character.
_NUM_START = r"(?<![\w+\-/])(?<![\d][.,])"
_NUM_END = r"(?![\w\-/])(?![.,]\d)"


def luhn_valid(digits: str) -> bool:
    """True iff the string of decimal digits passes the Luhn checksum (card numbers, IMEIs...)."""
    if not digits or not digits.isdigit():
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _digits(s: str) -> str:
    return "".join(ch for ch in s if ch.isdigit())


def _card_ok(s: str) -> bool:
    d = _digits(s)
    return 13 <= len(d) <= 19 and luhn_valid(d)


def _intl_phone_ok(s: str) -> bool:
    return 8 <= len(_digits(s)) <= 15


def _not_year_range(s: str) -> bool:
    a, b = (int(x) for x in s.split("-"))
    return not (1000 <= a <= 2099 and 1000 <= b <= 2099)


_DIGIT = re.compile(r"\d")


def _has_digit(text: str) -> bool:
    return _DIGIT.search(text) is not None


@dataclass(frozen=True)
class Rule:
    name: str
    category: str
    pattern: re.Pattern[str]
    needs: Callable[[str], bool]  # cheap pre-check on the whole text
    valid: Callable[[str], bool] | None = None
    group: int = 0  # the part of the match that is the entity (a keyword before it is context only)


_EMAIL = re.compile(
    r"(?<![\w.%+\-])[A-Za-z0-9][A-Za-z0-9._%+\-]*@[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}(?![\w@\-])"
)
_URL = re.compile(r"(?<![\w@.])(?:https?://|www\.)[^\s<>\"]+", re.IGNORECASE)
_CARD = re.compile(
    _NUM_START
    + r"(?:\d{13,19}"
    r"|\d{4}([ \-])\d{4}\1\d{4}\1\d{1,7}(?:\1\d{1,3})?"
    r"|\d{4}([ \-])\d{6}\2\d{4,5})"
    + _NUM_END
)
_SSN = re.compile(_NUM_START + r"\d{3}-\d{2}-\d{4}" + _NUM_END)
_PHONE_US = re.compile(
    r"(?<![\w+\-/(])(?<![\d][.,])(?:(?:\+?1[ .\-]?)?\(\d{3}\)[ .\-]?|(?:\+?1[ .\-])?\d{3}([ .\-]))"
    r"\d{3}(?(1)\1|[ .\-])\d{4}" + _NUM_END
)
_PHONE_INTL = re.compile(
    r"(?<![\w+\-/])\+\d{1,3}(?:[ .\-]?\(\d{1,4}\))?(?:[ .\-]?\d{1,5}){1,6}" + _NUM_END
)
_ACCOUNT = re.compile(_NUM_START + r"\d{4}-\d{4}" + _NUM_END)
_ALNUM_ID = re.compile(r"(?<![\w\-])[A-Z]{1,3}-?\d{6,10}(?![\w\-])")
_KEYED_ID = re.compile(
    r"\b(?:booking\s+ref(?:erence)?|ref(?:erence)?|confirmation|conf|tracking|order|acct|account|policy|ticket|"
    r"invoice|member(?:ship)?|sort\s+code|case|claim|reservation|customer)\b(?:\s+(?:no\.?|number|num|code|id)\b)?"
    r"(?:\s*[:#]\s*|\s+)([A-Za-z0-9](?:[A-Za-z0-9\-]{3,}[A-Za-z0-9]))(?![\w\-])", re.IGNORECASE)
_PHONE_NATIONAL = re.compile(r"(?<![\w+\-/.])0\d{2,4}[ \-]?\d{3,4}(?:[ \-]?\d{3,4})?" + _NUM_END)
_PHONE_LOCAL = re.compile(
    r"\b(?:call|text|phone|tel|mobile|cell|number|ring|whatsapp|sms|dial)\b[^\w\n]{0,3}(?:me\s+)?(?:(?:at|on)\s+)?"
    r"([2-9]\d{2}-\d{4})" + _NUM_END, re.IGNORECASE)
_URL_DOMAIN = re.compile(
    r"(?<![\w@./\-])[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9\-]+)*"
    r"\.(?:com|org|net|io|co|uk|dev|app|me|gg|tv|edu|gov|info|ai|ly|us|ca|de|fr)/[^\s<>\"]*", re.IGNORECASE)
_NOT_A_CODE = re.compile(
    r"\d{4}-\d{2}(?:\d{2})?"  # a year range or season: 2019-20, 2004-2005
    r"|\d{1,5}-\d{1,5}"  # a range or score: 10-12, 50-50, 200-1000
    r"|[A-Z]+-\d{1,2}"  # a name with a number: COVID-19, F-16
    r"|\d{1,2}(?::\d\d)?[AP]M(?:-\d{1,2}(?::\d\d)?[AP]M)?"  # a time: 10AM-12PM
    r"|\d{1,5}")  # a count: 10000


def _keyed_id_ok(s: str) -> bool:
    """A code that follows a word naming one: holds a digit, has no lower-case letter (2nd-hand, 4ever,
    10am, 1000s are words), and is no range, season, count or name with a number."""
    return _has_digit(s) and not any(c.islower() for c in s) and not _NOT_A_CODE.fullmatch(s)


def _national_phone_ok(s: str) -> bool:
    return len(_digits(s)) in (10, 11)

RULE_ORDER: tuple[Rule, ...] = (
    Rule("email", "EMAIL", _EMAIL, lambda t: "@" in t),
    Rule("url", "URL", _URL, lambda t: "www." in t.lower() or "http" in t.lower()),
    Rule("url_domain", "URL", _URL_DOMAIN, lambda t: "/" in t and "." in t),
    Rule("card", "CARD", _CARD, _has_digit, _card_ok),
    Rule("ssn", "ID", _SSN, _has_digit),
    Rule("phone_intl", "PHONE", _PHONE_INTL, lambda t: "+" in t, _intl_phone_ok),
    Rule("phone_us", "PHONE", _PHONE_US, _has_digit),
    Rule("phone_national", "PHONE", _PHONE_NATIONAL, _has_digit, _national_phone_ok),
    Rule("account", "ID", _ACCOUNT, _has_digit, _not_year_range),
    Rule("alnum_id", "ID", _ALNUM_ID, _has_digit),
    Rule("keyed_id", "ID", _KEYED_ID, _has_digit, _keyed_id_ok, group=1),
    Rule("phone_local", "PHONE", _PHONE_LOCAL, _has_digit, group=1),
)

_URL_TRAIL = ".,;:!?'\""
_CLOSERS = {")": "(", "]": "[", "}": "{"}


def _trim_url(text: str, start: int, end: int) -> int:
    """End of the URL `text[start:end]` without trailing punctuation or an unbalanced closing bracket."""
    while end > start:
        ch = text[end - 1]
        unbalanced = ch in _CLOSERS and text.count(_CLOSERS[ch], start, end) < text.count(ch, start, end)
        if not (ch in _URL_TRAIL or unbalanced):
            break
        end -= 1
    return end


def _overlaps(taken: list[Span], start: int, end: int) -> bool:
    return any(s < end and start < e for s, e, _ in taken)


def find_rule_spans(text: str) -> list[Span]:
    """Non-overlapping `(start, end, category)` spans of `text` matched by the rules, sorted by start."""
    taken: list[Span] = []
    for rule in RULE_ORDER:
        if not rule.needs(text):
            continue
        for m in rule.pattern.finditer(text):
            start, end = m.span(rule.group)
            if rule.category == "URL":
                end = _trim_url(text, start, end)
                if end - start <= len("www."):
                    continue
            if rule.valid is not None and not rule.valid(text[start:end]):
                continue
            if not _overlaps(taken, start, end):
                taken.append((start, end, rule.category))
    taken.sort()
    return taken


def merge_rule_spans(ner: list[Span], rules: list[Span]) -> list[Span]:
    """Rule spans plus the NER spans that overlap none of them (rules win), sorted by start."""
    kept = [s for s in ner if not _overlaps(rules, s[0], s[1])]
    return sorted(kept + rules)
