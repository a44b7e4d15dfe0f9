"""Public word lists that tell an ordinary English word from a name, for the detector profiles
(uedp.entities.profiles).

    is_word("Grandma")   # True: "grandma" is a dictionary word, so a capital alone does not make it a name
    is_word("Laertes")   # False
    "maddie" in extended_first_names()   # True

- `dictionary()`: the LOWER-CASE entries of two public English dictionaries (Webster's 2nd International and
  GCIDE, as packaged on PyPI by `english-words` 2.0.2: about 300,000 words). Entries that the dictionary
  writes capitalized (proper nouns) are left out, so a name is not a word unless it is also an ordinary one
  ("bill", "page", "will", "jess").
- `is_word(token)`: the token, lower-cased, or what it is inflected from by a regular ending (-s, -es, -ies,
  -ed, -ing, -er, -est, -ly, a possessive), is a dictionary word (so "Carly" and "Harding" are words too).
- `extended_first_names()`: first names and nicknames beyond the gazetteers' 14 Faker locales
  (uedp.entities.gazetteers): the first names of every Faker locale (about 16,000 in ASCII: "thandiwe",
  "emeka", "dmitri") and the nickname table of PyPI `nicknames` 1.0.1 (Apache-2.0: "kev", "maddie"), less
  every dictionary word (matched in
  lower-case text, a name that is also a word would flag ordinary sentences: "noble", "mate", "duke");
  `extended_first_names(words=True)` keeps them, for capitalized text ("Lionel"); `extended_last_names()`:
  Faker's last names of every locale, for the same use.
- `SLANG`: chat abbreviations, interjections and old elisions that are never entities ("omg", "lol", "tbh",
  "'tis").

None of these lists is read from any evaluated text. `LEXICON_VERSION` is part of the profiles' detector
identity: bump it when a list or rule here changes.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
from pathlib import Path

from uedp.errors import UedpError
from uedp.versions import package_version

LEXICON_VERSION = "1"
INSTALL_HINT = "pip install english-words==2.0.2 nicknames==1.0.1"

_SLANG_WORDS = (
    "omg omfg lol lmao lmfao rofl tbh ngl asap eta brb btw idk idc imo imho smh fyi rn wtf irl dm pm ok okay "
    "yolo fomo tho thx ty pls plz ikr ily jk nvm afaik iirc ftw gg tldr bae fr wyd hbu nah yeah yep nope "
    "ugh meh hmm aww yay woohoo oof welp bruh fam sis bro istg ofc gtg ttyl np jkjk xoxo xo haha hahaha "
    "lmk tmi smdh ffs tis twas twere twill tween uni telly lil vid vids bestie hun"
)
SLANG = frozenset(_SLANG_WORDS.split())


def lexicon_identity() -> dict[str, str]:
    """The versions of the packages the lexicon reads, for a detector's identity (the annotation cache key)."""
    out = {"lexicon_version": LEXICON_VERSION}
    out.update({package: package_version(package) for package in ("english-words", "nicknames")})
    return out


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise UedpError(f"the detector profiles need the Python package of {module!r}: `{INSTALL_HINT}`")


@functools.cache
def dictionary() -> frozenset[str]:
    """Lower-case entries of Webster's 2nd and GCIDE (PyPI english-words)."""
    _require("english_words")
    from english_words import get_english_words_set

    return frozenset(w for w in get_english_words_set(["web2", "gcide"], lower=False, alpha=True) if w.islower())


_SUFFIXES = (("ies", "y"), ("ied", "y"), ("ing", ""), ("ing", "e"), ("es", ""), ("ed", ""), ("ed", "e"), ("d", ""),
             ("s", ""), ("er", ""), ("est", ""), ("ly", ""), ("'s", ""), ("’s", ""), ("'", ""))


def _stems(key: str) -> list[str]:
    """`key` and what it may be inflected from (carries -> carry, answering -> answer, repair'd -> repaired)."""
    out = [key, key.replace("'d", "ed").replace("’d", "ed")]
    for suffix, replacement in _SUFFIXES:
        if key.endswith(suffix) and len(key) - len(suffix) >= 3:
            out.append(key[: len(key) - len(suffix)] + replacement)
    return out


@functools.lru_cache(maxsize=1 << 16)
def is_word(token: str) -> bool:
    """Whether `token` (any case) is an ordinary English word: its lower-case form, or what it is inflected
    from by a regular ending (-s, -es, -ies, -ed, -d, -ing, -er, -est, -ly, a possessive), is a dictionary
    entry; an elided form ("'tis", "i'll", "o'er") is a word when each of its parts is a word or a letter or
    two."""
    key = token.lower().strip("'\u2019")
    words = dictionary()
    if any(stem in words for stem in _stems(key)):
        return True
    parts = [p for p in key.replace("\u2019", "'").split("'") if p]
    return len(parts) > 1 and all(len(p) <= 2 or any(stem in words for stem in _stems(p)) for p in parts)


def _faker_names(kind: str) -> set[str]:
    """The first (`kind` "first") or last names of every person provider of Faker (MIT), in every locale."""
    import importlib
    import pkgutil

    import faker.providers.person

    names: set[str] = set()
    for module in pkgutil.iter_modules(faker.providers.person.__path__):
        try:
            provider = importlib.import_module(f"faker.providers.person.{module.name}").Provider
        except (ImportError, AttributeError):
            continue
        for attribute in (f"{kind}_names", f"{kind}_names_male", f"{kind}_names_female", f"{kind}_names_nonbinary"):
            values = getattr(provider, attribute, ())
            if isinstance(values, (list, tuple, dict, set, frozenset)):
                names.update(str(n).lower() for n in values)
    return names


@functools.cache
def extended_first_names(*, words: bool = False) -> frozenset[str]:
    """Faker's first names of every locale and the nicknames table's names, lower-cased, ASCII letters only, at
    least 3 letters; less every dictionary word unless `words` (for capitalized text, where "Lionel" or "Grace"
    is a name whatever the dictionary says)."""
    _require("nicknames")
    import nicknames

    names = _faker_names("first")
    table = Path(nicknames.__file__).parent / "names.csv"
    with table.open(encoding="utf-8", newline="") as handle:
        for row in csv.reader(handle):
            names.update(cell.strip().lower() for cell in row)
    return frozenset(n for n in names if len(n) > 2 and n.isascii() and n.isalpha() and (words or not is_word(n)))


@functools.cache
def extended_last_names() -> frozenset[str]:
    """Faker's last names of every locale (lower-case ASCII letters, 3 or more): they tell the class of a
    capitalized entity spaCy found ("Brando"); never matched on their own."""
    return frozenset(n for n in _faker_names("last") if len(n) > 2 and n.isascii() and n.isalpha())
