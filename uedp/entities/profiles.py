"""Detector profiles: the ensemble (spaCy NER + rules + gazetteers + informal rules) with LEVERS that correct
what it gets wrong on real text, each a function of the sentence and its spans.

    spans = profile_spans(text, ner_spans, PROFILES["balanced"])

Levers (measured one by one on the gold sets' `valid` halves: `python -m experiments.detectors --levers`):
- `misc`: spaCy's EVENT, WORK_OF_ART, PRODUCT, LAW and LANGUAGE entities become MISC (the ensemble drops
  them), the MISC gazetteer (works, products, events, laws: uedp/entities/data/misc.txt) is matched, and a
  #hashtag naming a listed work, event, place or organization is one ("#WorldCup", "#nyc").
- `names`: the extended first names (uedp.entities.lexicon: Faker's names of every locale and nicknames, less
  dictionary words) in the gazetteers, and (for `retype`) the extended last names.
- `filter`: a precision filter for informal text. A spaCy entity (not a DATE) made only of dictionary words
  or chat slang, that no gazetteer list knows, is dropped when capitalization is all that made it: in a
  title-cased sentence ("Library Fines Are A Scam"), at the start of a sentence and at most two words long
  ("Knit night at mine"), shouted in a sentence that has lower-case words ("light went off AGAIN"), or not
  capitalized at all ("house smells unreal": spaCy's small model guesses in lower-case text). Slang alone
  ("OMG", "LOL") is always dropped.
- `retype`: a spaCy entity holding ", " is split into its parts ("Eastenders, Casualty"); one that is in the
  MISC list becomes MISC ("iPod" tagged ORG); a single-word GPE/LOC/ORG/NORP one that no place, organization
  or group list knows but a first- or last-name list does becomes PERSON ("Hewitt", "Antony"), as does a
  two- or three-word one that starts with a first name and ends with a name; a PERSON one that is a listed
  organization and starts with no first name becomes ORG.
- `sports`: in a sentence about sport (win, beat, derby, goal, league, v, 3-2, ...), a place or person
  entity that is a listed organization (a club: "Liverpool", "Aston Villa") becomes ORG.
- `language`: a language name (uedp/entities/data/languages.txt) used as a language ("portuguese lessons",
  "speaks Arabic") becomes MISC.
- `dates`: more dates: a month name after a preposition or determiner in any case ("cruise to alaska in
  may"), decades ("the 90s", "the 1990s"), abbreviated periods ("last wk"), durations of a day or more
  ("a fortnight", "7-10 business days"), and a few more holidays ("nye", "valentines", "paddy's day"); and a
  part of a day alone ("tonight", "this morning"), an age ("29-year-old") or a frequency ("quarterly",
  "annual") is no date.
- `capitalized`: a capitalized word inside a sentence (not its first word), in no entity, not a dictionary
  word or slang, is a PERSON entity (consecutive ones, a space apart, are one entity: "Bassianus"; one next
  to an entity found otherwise stays an entity of its own); not in title-cased sentences, where capitals
  carry no information.
- `rare` (the recall profile): any other word of 3 letters or more that is no dictionary word, slang, number
  or entity already is a MISC entity, capitalized or not, wherever it stands ("peckham", "whataburger").

`PROFILES`: `balanced` (the default) and `recall` (paranoid: everything that may be a name is an entity).
`PROFILE_VERSION` goes into the detector identity with the lexicon's and gazetteers' versions.
"""

from __future__ import annotations

import functools
import re

from uedp.entities import gazetteers as gz
from uedp.entities.gazetteers import TITLES, Gazetteers, merge_spans
from uedp.entities.informal import ensemble_spans, handle_spans
from uedp.entities.lexicon import SLANG, extended_last_names, is_word
from uedp.entities.rules import Span, find_rule_spans, merge_rule_spans

PROFILE_VERSION = "2"
LEVERS = ("misc", "names", "filter", "retype", "sports", "language", "dates", "capitalized", "rare")
PROFILES: dict[str, tuple[str, ...]] = {
    "balanced": ("misc", "names", "filter", "retype", "sports", "language", "dates", "capitalized"),
    "recall": ("misc", "names", "retype", "sports", "language", "dates", "capitalized", "rare"),
}
MISC_LABELS = ("EVENT", "WORK_OF_ART", "PRODUCT", "LAW", "LANGUAGE")

_WORD = re.compile(r"[^\W\d_]+(?:['\u2019.-][^\W\d_]+)*")
_SENTENCE_END = ".!?:\"\u201c\u201d"
_POSSESSIVE = re.compile(r"['\u2019]s?$")
_SPORT = re.compile(
    r"\b(?:wins?|won|winning|beat|beats|beaten|draw|drew|derby|goals?|match(?:es)?|season|league|cup|striker|"
    r"midfielder|defender|keeper|goalkeeper|manager|coach|fans|squad|club|clubs|fixture|premiership|tournament|"
    r"champions|relegat\w*|promot\w*|v|vs|\d{1,2}-\d{1,2})\b", re.IGNORECASE)
_LANGUAGE_AFTER = re.compile(
    r"\s*(?:lessons?|class(?:es)?|teachers?|tutors?|speakers?|translations?|translator|subtitles|dub(?:bed)?|"
    r"homework|exams?|course|grammar|accent|version|dictionary|skills|is so bad|isn'?t|is getting)\b",
    re.IGNORECASE)
_LANGUAGE_BEFORE = re.compile(
    r"\b(?:speaks?|spoke|speaking|learn|learns|learning|learnt|learned|fluent in|studying|study|in|into|"
    r"from)\s+$", re.IGNORECASE)


@functools.cache
def gazetteers_for(levers: frozenset[str]) -> Gazetteers:
    return Gazetteers(extended_names="names" in levers, misc="misc" in levers)


@functools.lru_cache(maxsize=16)
def _words(text: str) -> tuple[tuple[int, int, str], ...]:
    return tuple((m.start(), m.end(), m.group(0)) for m in _WORD.finditer(text))


def _overlaps(span: tuple[int, int, str] | Span, spans: list[Span]) -> bool:
    return any(span[0] < s[1] and s[0] < span[1] for s in spans)


def _covered(text: str, spans: list[Span]) -> list[bool]:
    """Per character of `text`, whether a span covers it: a word's overlap test in O(its length), so that a
    long text (an owner's file without sentence splitting) stays linear."""
    mask = [False] * (len(text) + 1)
    for start, end, _ in spans:
        mask[start:end] = [True] * (end - start)
    return mask


def _free(mask: list[bool], start: int, end: int) -> bool:
    return not any(mask[start:end])


def _sentence_initial(text: str, start: int) -> bool:
    before = text[:start].rstrip()
    return not before or before[-1] in _SENTENCE_END


@functools.lru_cache(maxsize=4)
def title_cased(text: str) -> bool:
    """Four or more words of two letters or more, at least 70% of them capitalized: capitals carry no
    information there ("Wig Brushing Is My Cardio")."""
    words = [w for _, _, w in _words(text) if len(w) > 1]
    return len(words) >= 4 and sum(w[0].isupper() for w in words) >= 0.7 * len(words)


def _listed(surface: str, gazetteers: Gazetteers) -> bool:
    """Whether a phrase is in a gazetteer list: a place, organization, group or MISC in any case, a first or
    last name when capitalized (lower-case "house" and "bill" are words, whatever the name lists say)."""
    key = gz._key(surface)
    return _institution(key) or (surface[:1].isupper() and (key in gazetteers.first or key in gz.last_names()))


def _institution(key: str) -> bool:
    return (key in gz.places() or key in gz.towns() or key in gz.organizations() or key in gz.locations()
            or key in gz.groups() or key in gz.misc_names())


def precision_filter(text: str, ner: list[Span], gazetteers: Gazetteers, known: list[Span] | None = None) -> list[Span]:
    """Lever `filter` (module docstring), on spaCy's spans. `known`: the sentence's gazetteer and rule spans
    when the caller has them (profile_spans), else found here."""
    if known is None:
        known = gazetteers.spans(text) + find_rule_spans(text)
    confirming = known + handle_spans(text)
    titled = title_cased(text)
    lower_words = any(w[0].islower() for _, _, w in _words(text))
    out = []
    for span in ner:
        words = [w for _, _, w in _words(text[span[0]:span[1]])]
        if span[2] == "DATE" or not words:
            out.append(span)
            continue
        if all(w.lower() in SLANG for w in words):
            continue
        ordinary = all(is_word(w) or w.lower() in SLANG for w in words)
        if not ordinary or _overlaps(span, confirming) or _listed(text[span[0]:span[1]], gazetteers):
            out.append(span)
            continue
        initial = _sentence_initial(text, span[0]) and len(words) <= 2
        shouted = lower_words and all(w.isupper() and len(w) > 2 for w in words)
        lower = all(w.islower() for w in words)
        if not (titled or initial or shouted or lower):
            out.append(span)
    return out


def _split_lists(text: str, spans: list[Span]) -> list[Span]:
    """A span holding ", " is a list of entities ("Eastenders, Casualty"): one span per part."""
    out: list[Span] = []
    for start, end, category in spans:
        if category == "DATE" or ", " not in text[start:end]:
            out.append((start, end, category))
            continue
        for m in re.finditer(r"[^,]+", text[start:end]):
            part = m.group(0)
            lead = len(part) - len(part.lstrip())
            if part.strip():
                out.append((start + m.start() + lead, start + m.start() + len(part.rstrip()), category))
    return out


@functools.cache
def _last_names(extended: bool) -> frozenset[str]:
    return gz.last_names() | extended_last_names() if extended else gz.last_names()


def retype(text: str, ner: list[Span], gazetteers: Gazetteers) -> list[Span]:
    """Lever `retype` (module docstring), on spaCy's spans."""
    first, last = gazetteers.first_capitalized, _last_names(gazetteers.extended_names)  # spaCy's are capitalized
    out = []
    for start, end, category in _split_lists(text, ner):
        key = gz._key(text[start:end])  # spaCy leaves a possessive out: one inside is the name's (Moody's)
        words = key.split()
        if (key in gz.misc_names() or gz._key(_POSSESSIVE.sub("", text[start:end])) in gz.misc_names()) \
                and category != "DATE":
            category = "MISC"
        elif category in ("GPE", "LOC", "ORG", "NORP") and words and not _institution(key) and (
                (len(words) == 1 and (key in first or key in last))
                or (len(words) in (2, 3) and words[0] in first and (words[-1] in last or words[-1] in first))):
            category = "PERSON"
        elif category == "PERSON" and key in gz.organizations() and words and words[0] not in first:
            category = "ORG"
        out.append((start, end, category))
    return out


def sports_teams(text: str, spans: list[Span]) -> list[Span]:
    """Lever `sports` (module docstring)."""
    if not _SPORT.search(text):
        return spans
    return [(s, e, "ORG") if c in ("GPE", "LOC", "PERSON") and gz._key(text[s:e]) in gz.organizations() else (s, e, c)
            for s, e, c in spans]


def _language_use(text: str, start: int, end: int) -> bool:
    return bool(_LANGUAGE_AFTER.match(text[end:]) or _LANGUAGE_BEFORE.search(text[:start]))


def language_names(text: str, spans: list[Span]) -> list[Span]:
    """Lever `language` (module docstring): a NORP or MISC span that is a language name used as a language
    becomes MISC; an uncovered language name used as one is added as MISC."""
    names = gz.languages()
    out = [(s, e, "MISC") if c in ("NORP", "MISC") and gz._key(text[s:e]) in names and _language_use(text, s, e)
           else (s, e, c) for s, e, c in spans]
    mask = _covered(text, out)
    extra = [(s, e, "MISC") for s, e, w in _words(text)
             if w.lower() in names and _free(mask, s, e) and _language_use(text, s, e)]
    return merge_spans(out, extra)


_MONTHS = (r"(?:january|february|march|april|may|june|july|august|september|october|november|december|"
           r"jan|feb|mar|apr|jun|jul|aug|sept?|oct|nov|dec)")
_NUMBER = r"(?:a|an|one|two|three|four|five|six|seven|eight|nine|ten|twelve|couple of|few|\d+(?:\s?-\s?\d+)?)"
_MONTH_AFTER = re.compile(
    rf"\b(?:in|this|next|last|early|late|mid|since|until|till|by|before|after|of|through|from|during)\s+"
    rf"({_MONTHS})\b", re.IGNORECASE)
_MORE_DATES = re.compile(
    rf"\bthe\s+(?:'|\u2019)?(?:\d\d|1\d\d\d|20\d\d)s\b"
    rf"|\bthe\s+(?:twenties|thirties|forties|fifties|sixties|seventies|eighties|nineties)\b"
    rf"|\b(?:this|next|last)\s+(?:wk|yr|mo|wknd)\b"
    rf"|\b{_NUMBER}\s+(?:(?:business|working|buisness|bussiness)\s+)?(?:days|weeks|months|years|fortnights?)\b"
    rf"|\ba\s+(?:fortnight|decade|century)\b"
    rf"|\b(?:nye|new years|valentines?(?:'s)?(?: day)?|(?:st\.? )?paddy'?s day|bank holiday(?: weekend)?)\b",
    re.IGNORECASE)
_NOT_DATES = re.compile(r"(?:tonight|tonite|this (?:morning|afternoon|evening)|last night|overnight|"
                        r"the (?:morning|afternoon|evening|night)|(?:a |the )?\d+[ -]years?[ -]old|"
                        r"quarterly|annual|annually|weekly|daily|monthly|yearly|nightly)", re.IGNORECASE)


_AGE_AFTER = re.compile(r"[ -]old\b", re.IGNORECASE)


_MODAL_MONTH = re.compile(r"may|march", re.IGNORECASE)  # also a verb: a month only before punctuation or a number
_MONTH_END = re.compile(r"\s*(?:$|[.,;:!?)]|\d)")


def _no_date(text: str, span: Span) -> bool:
    """A part of a day, an age ("29-year-old", "90 years old") or a frequency: no date."""
    return bool(_NOT_DATES.fullmatch(text[span[0]:span[1]]) or _AGE_AFTER.match(text[span[1]:]))


def more_dates(text: str, spans: list[Span]) -> list[Span]:
    """Lever `dates` (module docstring): parts of a day, ages and frequencies dropped, the further dates
    added where free. "may" and "march" after a trigger word are months only when punctuation, a number or the
    end of the text follows ("in may," but not "this may be")."""
    kept = [s for s in spans if not (s[2] == "DATE" and _no_date(text, s))]
    found = [(m.start(1), m.end(1), "DATE") for m in _MONTH_AFTER.finditer(text)
             if not _MODAL_MONTH.fullmatch(m.group(1)) or _MONTH_END.match(text[m.end(1):])]
    found += [(m.start(), m.end(), "DATE") for m in _MORE_DATES.finditer(text)]
    found = [f for f in found if not _no_date(text, f)]
    return merge_spans(kept, [f for i, f in enumerate(found) if not _overlaps(f, found[:i])])


_HASHTAG = re.compile(r"(?<![\w#])#([A-Za-z][A-Za-z0-9_]+)")


@functools.cache
def _squashed(category: str) -> dict[str, str]:
    """Squashed list entries (letters and digits only, lower-case) of the lists a hashtag may name."""
    lists = {"MISC": gz.misc_names(), "GPE": gz.places(), "LOC": gz.locations(), "ORG": gz.organizations()}
    return {re.sub(r"[^a-z0-9]", "", entry): category for entry in lists[category]}


def hashtags(text: str, spans: list[Span]) -> list[Span]:
    """Part of lever `misc`: a #hashtag whose body names a listed work, product, event, place or organization
    ("#WorldCup", "#nyc") is that entity, the whole token with its "#", replacing what overlaps it; one whose
    body is an ordinary word or a common phrase is not ("#nice", "#reading")."""
    found = []
    for m in _HASHTAG.finditer(text):
        body = re.sub(r"[^a-z0-9]", "", m.group(1).lower())
        if is_word(body) or body in gz.common_phrases():  # "#nice", "#reading", "#us": a word, not a place
            continue
        for category in ("ORG", "MISC", "GPE", "LOC"):
            if body in _squashed(category):
                found.append((m.start(), m.end(), category))
                break
    return merge_spans(found, spans)


def _runs(text: str, words: list[tuple[int, int, str]], category: str) -> list[Span]:
    """Consecutive words (one space apart) joined into one span each."""
    out: list[Span] = []
    for start, end, _ in words:
        if out and text[out[-1][1]:start] == " ":
            out[-1] = (out[-1][0], end, category)
        else:
            out.append((start, end, category))
    return out


def capitalized_words(text: str, spans: list[Span]) -> list[Span]:
    """Lever `capitalized` (module docstring): the new PERSON spans."""
    if title_cased(text):
        return []
    mask = _covered(text, spans)
    picked = [(s, e, w) for s, e, w in _words(text)
              if w[0].isupper() and any(c.islower() for c in w.rstrip("s")) and _free(mask, s, e)
              and w.lower().rstrip(".") not in TITLES and not is_word(w) and w.lower() not in SLANG
              and not _sentence_initial(text, s)]
    return _runs(text, picked, "PERSON")


def rare_words(text: str, spans: list[Span]) -> list[Span]:
    """Lever `rare` (module docstring): the new MISC spans."""
    mask = _covered(text, spans)
    picked = [(s, e, w) for s, e, w in _words(text)
              if len(w) > 2 and _free(mask, s, e) and not is_word(w) and w.lower() not in SLANG]
    return _runs(text, picked, "MISC")


def profile_spans(text: str, ner: list[Span], levers: tuple[str, ...] | frozenset[str]) -> list[Span]:
    """A sentence's spans under `levers` from spaCy's spans `ner` (mapped with MISC_LABELS when `misc` is on):
    the ensemble (uedp.entities.informal.ensemble_spans, the rules winning last) with each lever applied."""
    on = frozenset(levers)
    unknown = on - set(LEVERS)
    if unknown:
        raise ValueError(f"unknown detector levers {sorted(unknown)}; levers: {', '.join(LEVERS)}")
    gazetteers = gazetteers_for(on)
    listed, rules = gazetteers.spans(text), find_rule_spans(text)  # each found once: the filter needs them too
    if "retype" in on:
        ner = retype(text, ner, gazetteers)
    if "filter" in on:
        ner = precision_filter(text, ner, gazetteers, listed + rules)
    spans = ensemble_spans(text, ner, listed)
    if "misc" in on:
        spans = hashtags(text, spans)
    if "sports" in on:
        spans = sports_teams(text, spans)
    if "language" in on:
        spans = language_names(text, spans)
    if "dates" in on:
        spans = more_dates(text, spans)
    if "capitalized" in on:
        spans = merge_spans(spans, capitalized_words(text, spans))
    if "rare" in on:
        spans = merge_spans(spans, rare_words(text, spans))
    return merge_rule_spans(spans, rules)
