"""The `synthetic` corpus: Faker personas writing about 4 topics, with exact gold entities and canaries.

    corpus = load_corpus("synthetic", num_users=200, seed=0, canary_users=(1, 2, 4, 8))

Contract:
- Deterministic: the same options give the same table (equal `Corpus.fingerprint()`) with the same
  installed Faker version; a different `seed` gives a different corpus. The non-canary sentences (user,
  text, label, split, gold) do not depend on `canary_users` / `canary_seed`: canaries are added on top,
  each as the last sentence of its user (so only the `sid`s shift).
- Users are `user_0000`, `user_0001`, ... (zero-padded, so sorted order is numeric order). User i has a
  persona (name, employer, home city, phone, email, birth date, ID number, and sometimes a URL and a card
  number) and `min_sentences..max_sentences` sentences (uniform), plus one extra sentence per canary
  planted in that user.
- Each sentence has one of the 4 topics of `TOPICS` as its label; each user has its own topic mix
  (Dirichlet), so labels are not identically distributed across users.
- A sentence is entity-free with probability `no_entity_fraction` (built from per-topic phrase lists,
  thousands of variants, no names, places or time expressions); otherwise it fills one of the templates of
  `TEMPLATES` with the user's own persona entities and with SHARED entities drawn from global pools
  (colleagues, public figures, companies, cities, dates) with Zipf(`zipf_exponent`) frequencies, so
  popular entities live in many users' data. Cities are real place names (Faker's geo data).
- Gold: every placed entity is a `GoldSpan` whose `text[start:end]` is exactly the entity, with category
  PERSON, ORG, GPE, DATE, PHONE ("(ddd) ddd-dddd"), EMAIL, ID ("ddd-dd-dddd"), CARD ("dddd dddd dddd
  dddd") or URL ("https://...").
- Canaries: `canary_users=(1, 4)` plants canary 0 in 1 user and canary 1 in 4 distinct users (chosen
  with `canary_seed`, default `seed`), as an extra "train" sentence `"<Name>'s account number is
  dddd-dddd."` (label "finance"; gold PERSON + ID). The secret is uniform over `CANARY_SPACE` = 8 digits
  written "dddd-dddd" (10^8 values); no other text in the corpus has that shape. `meta["canaries"]` lists
  {id, text, secret, prefix, users, frequency, space}; `canary_candidates` draws from the same space.
- Other meta keys: `options` (every option, resolved), `topics`, `num_templates`, `canary_space`.

Each user also has private entities: relatives ("First <own last name>") and a contact list drawn from
the colleague pool. spaCy's small English model finds ~95% of PERSON and ~99% of DATE spans exactly,
and roughly 60-75% of ORG and 50-65% of GPE (obscure real towns): the misses are undetected entities.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

import numpy as np
from faker import Faker

from uedp.data.corpus import Corpus, CorpusBuilder, GoldSpan
from uedp.data.loaders import LOADERS, DatasetFacts
from uedp.errors import ConfigError

TOPICS = ["work", "travel", "family", "finance"]
CANARY_SPACE = "dddd-dddd"

# Slot -> category. Own-persona slots: name, employer, home, bday, phone, email, id, url, card; per-user
# family members: family; shared Zipf pools: colleague, figure, company, city, date.
SLOTS = {
    "name": "PERSON", "family": "PERSON", "colleague": "PERSON", "figure": "PERSON",
    "employer": "ORG", "company": "ORG", "home": "GPE", "city": "GPE", "date": "DATE", "bday": "DATE",
    "phone": "PHONE", "email": "EMAIL", "id": "ID", "url": "URL", "card": "CARD",
}

TEMPLATES: dict[str, tuple[str, ...]] = {
    "work": (
        "I had a long meeting with {colleague} about the new budget.",
        "{colleague} from {company} sent me the revised contract.",
        "I have worked at {employer} since {date}.",
        "My manager at {employer} wants the report before {date}.",
        "Please forward the slides to {colleague} and copy {colleague}.",
        "You can reach me at {phone} if the call with {company} runs late.",
        "{company} is opening a new office in {city}.",
        "I interviewed {colleague} for the analyst position at {employer}.",
        "My work email is {email}, so send the invoices there.",
        "{figure} gave the keynote at our conference in {city}.",
        "The team at {employer} is merging its research group with {company}.",
        "My portfolio is at {url} if you want to see the designs.",
        "{name} here, I will be late to the meeting with {company}.",
    ),
    "travel": (
        "I am flying from {home} to {city} on {date}.",
        "{colleague} recommended a small hotel near the old harbour in {city}.",
        "Our train to {city} was delayed again.",
        "We rented a car in {city} and drove along the coast to {city}.",
        "The airline confirmed my booking under the name {name}.",
        "I met {figure} at the airport in {city}, which was surreal.",
        "My ID number is {id}, in case the travel agency asks.",
        "{colleague} and I are planning a hiking trip near {city}.",
        "The travel agency will call me at {phone} to confirm the tickets.",
        "We had a wonderful holiday in {city} with {family}.",
        "Send the boarding passes to {email} before we leave {home}.",
    ),
    "family": (
        "My sister {family} is moving to {city}.",
        "I was born on {bday} in {home}.",
        "We are celebrating the graduation of {family} on {date}.",
        "{family} and {colleague} finally met at the barbecue.",
        "My kids love visiting their grandparents in {home}.",
        "Our neighbour {colleague} helped {family} fix the fence.",
        "{family} called from {city} to say the baby is healthy.",
        "The whole family watched the interview with {figure} on television.",
        "You can send the party invitations to {email}.",
        "{family} is starting a new job at {company}.",
        "{family} was born on {date}, the same day the storm hit {home}.",
    ),
    "finance": (
        "My credit card {card} was charged twice by {company}.",
        "I transferred the rent to {colleague} on {date}.",
        "The bank in {home} needs my ID number {id} to open the account.",
        "{company} shares jumped after {figure} praised their earnings.",
        "My accountant {colleague} filed the tax return on {date}.",
        "The invoice from {company} should go to {email}.",
        "I paid the mortgage for the house in {home} with my card {card}.",
        "Please call me at {phone} about the loan from {company}.",
        "{figure} says the market will recover soon.",
        "My online shop at {url} finally made a profit.",
        "My salary from {employer} has not arrived yet.",
    ),
}

# Entity-free sentences: subject + predicate + tail + ".", per topic (10 x 10 x 8 = 800 variants each).
_FREE: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "work": (
        ("The new project plan", "Our team lead", "The client presentation", "My inbox",
         "The budget review", "Everyone in the office", "The hiring committee", "Our shared spreadsheet",
         "The coffee machine at work", "The code review"),
        ("needs another round of edits", "was postponed again", "is finally approved",
         "took far longer than expected", "caused a lot of confusion", "went surprisingly well",
         "still has a few open questions", "is waiting for feedback", "keeps getting more complicated",
         "made everyone a bit nervous"),
        ("", " before the deadline", ", so I stayed late", ", which is a relief", " and nobody seems to mind",
         ", as far as I can tell", " after the long discussion", ", to be honest"),
    ),
    "travel": (
        ("The flight", "Our hotel room", "The train station", "The rental car", "My suitcase",
         "The guided tour", "The beach near the resort", "The mountain trail", "The hostel kitchen",
         "Our travel itinerary"),
        ("was much smaller than in the photos", "was delayed again", "looked absolutely stunning",
         "cost more than we planned", "was surprisingly quiet", "got lost somewhere along the way",
         "needs to be booked in advance", "was packed with tourists", "had a wonderful view of the sea",
         "made the whole trip worthwhile"),
        ("", ", so we changed our plans", ", which nobody expected", " and we loved it",
         ", according to the guide", " despite the rain", ", as usual", " on this trip"),
    ),
    "family": (
        ("My little brother", "My daughter", "My grandmother", "Our dog", "My father", "The baby",
         "My cousin", "The whole family", "Our neighbour", "My aunt"),
        ("finally learned to ride a bike", "could not stop laughing at dinner",
         "is recovering well from the flu",
         "wants a bigger garden", "baked cookies for everyone", "refuses to eat vegetables",
         "is planning a surprise party", "spent hours in the garden", "is learning to play the piano",
         "asked about you"),
        ("", ", which made us all happy", " again", ", believe it or not", " after a long discussion",
         ", so the house is chaos", " and sends love", ", as always"),
    ),
    "finance": (
        ("The electricity bill", "My savings account", "The mortgage rate", "Our household budget",
         "The insurance premium", "The pension fund", "My tax refund", "The stock market",
         "Our emergency fund", "The car loan"),
        ("went up again", "is lower than I expected", "needs a closer look", "finally came through",
         "is eating into our savings", "looks healthier than before", "was reviewed by the advisor",
         "keeps confusing me", "should cover the repairs", "dropped sharply"),
        ("", ", so we cut back on takeout", ", which is good news", " despite the inflation",
         ", according to the bank", " and I am relieved", ", sadly", " after the last payment"),
    ),
}

_DATE_LO, _DATE_HI = date(2015, 1, 1), date(2024, 12, 31)
_BIRTH_LO, _BIRTH_HI = date(1950, 1, 1), date(2004, 12, 31)
# Well-known cities, as people write about them (Faker's gazetteer is mostly small towns that neither
# readers nor NER recognise as places).
_CITIES = (
    "New York", "Los Angeles", "Chicago", "Houston", "Phoenix", "Philadelphia", "San Antonio", "San Diego",
    "Dallas", "Austin", "Jacksonville", "San Francisco", "Columbus", "Indianapolis", "Seattle", "Denver",
    "Boston", "Nashville", "Detroit", "Portland", "Las Vegas", "Memphis", "Louisville", "Baltimore",
    "Milwaukee", "Albuquerque", "Tucson", "Fresno", "Sacramento", "Atlanta", "Miami", "Oakland",
    "Minneapolis", "Tulsa", "Cleveland", "New Orleans", "Honolulu", "Pittsburgh", "Cincinnati", "Orlando",
    "St. Louis", "Salt Lake City", "Anchorage", "Toronto", "Montreal", "Vancouver", "Calgary", "Ottawa",
    "Mexico City", "Guadalajara", "Havana", "Bogota", "Lima", "Santiago", "Buenos Aires", "Sao Paulo",
    "Rio de Janeiro", "Caracas", "Quito", "Montevideo", "London", "Manchester", "Liverpool", "Edinburgh",
    "Glasgow", "Dublin", "Paris", "Marseille", "Lyon", "Berlin", "Hamburg", "Munich", "Frankfurt",
    "Cologne", "Vienna", "Zurich", "Geneva", "Amsterdam", "Rotterdam", "Brussels", "Madrid", "Barcelona",
    "Seville", "Valencia", "Lisbon", "Porto", "Rome", "Milan", "Naples", "Venice", "Florence", "Athens",
    "Istanbul", "Ankara", "Warsaw", "Krakow", "Prague", "Budapest", "Bucharest", "Sofia", "Belgrade",
    "Copenhagen", "Stockholm", "Oslo", "Helsinki", "Moscow", "Saint Petersburg", "Kyiv", "Cairo",
    "Casablanca", "Lagos", "Nairobi", "Johannesburg", "Cape Town", "Addis Ababa", "Accra", "Dubai",
    "Abu Dhabi", "Doha", "Riyadh", "Tehran", "Baghdad", "Jerusalem", "Beirut", "Karachi", "Lahore",
    "Mumbai", "Delhi", "Bangalore", "Chennai", "Kolkata", "Dhaka", "Kathmandu", "Bangkok", "Hanoi",
    "Singapore", "Kuala Lumpur", "Jakarta", "Manila", "Hong Kong", "Shanghai", "Beijing", "Shenzhen",
    "Taipei", "Seoul", "Busan", "Tokyo", "Osaka", "Kyoto", "Sydney", "Melbourne", "Brisbane", "Perth",
    "Auckland", "Wellington",
)
_COMPANY = re.compile(r"[^,]+")
_TLDS = ("com", "net", "org", "io")
_CHUNK = 4096


def _parse(template: str) -> list[tuple[str, str | None]]:
    parts = [(literal, slot) for literal, slot, _, _ in string.Formatter().parse(template)]
    for _, slot in parts:
        if slot is not None and slot not in SLOTS:
            raise ValueError(f"synthetic template {template!r}: unknown slot {slot!r}")
    return parts


_PARSED = {topic: [_parse(t) for t in ts] for topic, ts in TEMPLATES.items()}


class _Draws:
    """Chunked random draws (uniforms, Zipf indices) from one generator: fast and deterministic."""

    def __init__(self, rng: np.random.Generator, pools: dict[str, int], exponent: float) -> None:
        self.rng = rng
        self.probs = {k: self._zipf(n, exponent) for k, n in pools.items()}
        self.buf: dict[str, list[int] | list[float]] = {}

    @staticmethod
    def _zipf(n: int, s: float) -> np.ndarray:
        w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
        return w / w.sum()

    def zipf(self, pool: str) -> int:
        buf = self.buf.get(pool)
        if not buf:
            p = self.probs[pool]
            buf = self.buf[pool] = self.rng.choice(len(p), _CHUNK, p=p).tolist()[::-1]
        return int(buf.pop())

    def uniform(self) -> float:
        buf = self.buf.get("")
        if not buf:
            buf = self.buf[""] = self.rng.random(_CHUNK).tolist()
        return float(buf.pop())

    def pick(self, seq: Sequence[Any]) -> Any:
        return seq[int(self.uniform() * len(seq))]


def _unique(
    make: Callable[[], str], n: int, taken: set[str], what: str, accept: re.Pattern[str] | None = None
) -> list[str]:
    """`n` distinct values of `make()` not in `taken` (which they join), fully matching `accept` if given."""
    out: list[str] = []
    for _ in range(50 * n + 100):
        value = make().strip()
        if value and value not in taken and (accept is None or accept.fullmatch(value)):
            taken.add(value)
            out.append(value)
            if len(out) == n:
                return out
    raise ConfigError(f"synthetic: could not draw {n} distinct {what} from Faker (got {len(out)})")


def _dates(rng: np.random.Generator, n: int, lo: date, hi: date) -> list[str]:
    days = rng.integers(0, (hi - lo).days + 1, n)
    return [(lambda d: f"{d:%B} {d.day}, {d.year}")(lo + timedelta(days=int(k))) for k in days]


def _random_name(firsts: list[str], lasts: list[str], rng: np.random.Generator) -> str:
    return f"{firsts[rng.integers(len(firsts))]} {lasts[rng.integers(len(lasts))]}"


def _luhn_complete(payload: str) -> str:
    """`payload` + its Luhn check digit (card numbers that card-number rules accept as real)."""
    total = 0
    for i, ch in enumerate(reversed(payload)):
        d = int(ch) * (2 if i % 2 == 0 else 1)
        total += d - 9 if d > 9 else d
    return payload + str((10 - total % 10) % 10)


def _format_card(digits: str) -> str:
    return " ".join(digits[i : i + 4] for i in range(0, 16, 4))


def _digits(rng: np.random.Generator, n: int, k: int) -> list[str]:
    return ["".join(map(str, row)) for row in rng.integers(0, 10, (n, k))]


def canary_candidates(space: str, n: int, seed: int, *, exclude: Collection[str] = ()) -> list[str]:
    """`n` distinct random strings of `space` ('d' = a digit, anything else literal), none in `exclude`.

    Same seed -> same list. Used to rank a canary's secret among random candidates (exposure audit)."""
    k = space.count("d")
    if k == 0 or n < 0 or n > 10**k - len(exclude):
        raise ValueError(f"canary_candidates: cannot draw {n} distinct values from space {space!r}")
    rng = np.random.default_rng([seed, 0xC4A7])
    pieces = space.split("d")
    out: list[str] = []
    seen = set(exclude)
    while len(out) < n:
        for row in rng.integers(0, 10, (max(n - len(out), 16), k)):
            value = pieces[0] + "".join(str(d) + p for d, p in zip(row, pieces[1:]))
            if value not in seen and len(out) < n:
                seen.add(value)
                out.append(value)
    return out


def _check(cond: bool, option: str, value: Any, need: str) -> None:
    if not cond:
        raise ConfigError(f"synthetic: option {option}={value!r} is invalid; it must be {need}")


def _numbers(option: str, values: Any, kind: type) -> list[Any]:
    try:
        return [kind(v) for v in values]
    except (TypeError, ValueError):
        raise ConfigError(f"synthetic: option {option}={values!r} must be a list of numbers") from None


@dataclass
class _Pools:
    """Everything Faker provides, drawn once: name parts, shared Zipf pools, e-mail domains."""

    firsts: list[str]
    lasts: list[str]
    own_names: list[str]
    shared: dict[str, list[str]]  # colleague, figure, company, city, date
    domains: list[str]
    taken: set[str]  # full names in use (a canary name must be new)

    @classmethod
    def draw(cls, fake: Faker, rng: np.random.Generator, num_users: int) -> _Pools:
        taken: set[str] = set()
        firsts = _unique(fake.first_name, 300, set(), "first names")
        lasts = _unique(fake.last_name, 300, set(), "last names")

        def full_name() -> str:
            return _random_name(firsts, lasts, rng)

        own_names = _unique(full_name, num_users, taken, "person names")
        shared = {
            "colleague": _unique(full_name, max(40, num_users // 2), taken, "person names"),
            "figure": _unique(full_name, max(10, min(60, num_users // 5)), taken, "person names"),
            # "Bass, Henry and Taylor" reads as 3 persons to NER: keep "Brooks LLC", "Romero-Robinson".
            "company": _unique(fake.company, max(20, num_users // 6), set(), "company names", _COMPANY),
            "city": [str(c) for c in rng.permutation(_CITIES)[: max(30, min(num_users // 4, len(_CITIES)))]],
            "date": _dates(rng, max(30, num_users // 3), _DATE_LO, _DATE_HI),
        }
        domains = _unique(fake.free_email_domain, 3, set(), "email domains")
        return cls(firsts, lasts, own_names, shared, domains, taken)

    def random_name(self, rng: np.random.Generator) -> str:
        return _random_name(self.firsts, self.lasts, rng)


@dataclass
class _Persona:
    own: dict[str, str | None]  # slot -> the user's own entity (None: this persona has no URL / card)
    contacts: list[str]  # colleagues this user writes about most
    relatives: list[str]

    def templates(self, topic: str) -> list[list[tuple[str, str | None]]]:
        missing = {slot for slot, value in self.own.items() if value is None}
        return [p for p in _PARSED[topic] if not missing & {s for _, s in p}]

    def fill(self, slot: str, draws: _Draws, shared: dict[str, list[str]]) -> str:
        if slot == "colleague" and draws.uniform() < 0.7:
            return draws.pick(self.contacts)
        if slot == "family":
            return draws.pick(self.relatives)
        if slot in shared:
            return shared[slot][draws.zipf(slot)]
        value = self.own[slot]
        if value is None:
            raise ValueError(f"synthetic: slot {slot!r} is not in this persona")
        return value


def _personas(pools: _Pools, draws: _Draws, rng: np.random.Generator, num_users: int) -> list[_Persona]:
    phones = [f"({int(a) % 800 + 200}) {b[:3]}-{b[3:]}"
              for a, b in zip(_digits(rng, num_users, 3), _digits(rng, num_users, 7))]
    ids = [f"{d[:3]}-{d[3:5]}-{d[5:]}" for d in _digits(rng, num_users, 9)]
    cards = [_format_card(_luhn_complete("4" + d)) for d in _digits(rng, num_users, 14)]
    births = _dates(rng, num_users, _BIRTH_LO, _BIRTH_HI)
    out = []
    for i, name in enumerate(pools.own_names):
        first, last = name.split(" ", 1)
        slug = f"{first}.{last}".lower().replace(" ", "").replace("'", "")
        colleagues = pools.shared["colleague"]
        contacts = [colleagues[draws.zipf("colleague")] for _ in range(4 + int(draws.uniform() * 5))]
        others = [f for f in pools.firsts if f != first]
        relatives = sorted({f"{draws.pick(others)} {last}" for _ in range(2 + int(draws.uniform() * 3))})
        pools.taken.update(relatives)
        url = f"https://www.{slug.replace('.', '')}.{draws.pick(_TLDS)}"
        own = {
            "name": name, "employer": pools.shared["company"][draws.zipf("company")],
            "home": pools.shared["city"][draws.zipf("city")], "bday": births[i], "phone": phones[i],
            "id": ids[i], "email": f"{slug}@{draws.pick(pools.domains)}",
            "url": url if draws.uniform() < 0.4 else None,
            "card": cards[i] if draws.uniform() < 0.5 else None,
        }
        out.append(_Persona(own, contacts, relatives))
    return out


def _sentence(parsed: list[tuple[str, str | None]], persona: _Persona, draws: _Draws,
              shared: dict[str, list[str]]) -> tuple[str, list[GoldSpan]]:
    pieces: list[str] = []
    gold: list[GoldSpan] = []
    pos = 0
    for literal, slot in parsed:
        pieces.append(literal)
        pos += len(literal)
        if slot is not None:
            value = persona.fill(slot, draws, shared)
            for _ in range(3):  # "copy Ann Lee and Ann Lee": redraw a repeated entity
                if value not in pieces:
                    break
                value = persona.fill(slot, draws, shared)
            pieces.append(value)
            gold.append(GoldSpan(pos, pos + len(value), SLOTS[slot]))
            pos += len(value)
    return "".join(pieces), gold


# spans exact by construction; the tokenizer learns from the same generator at its public seed (other personas).
# Also the facts of a corpus built on this one (uedp.audit.canaries).
SYNTHETIC_FACTS = DatasetFacts(gold_by_construction=True, public_corpus="synthetic", public_generator="synthetic")


@LOADERS.register("synthetic", facts=SYNTHETIC_FACTS)
def load_synthetic(
    *,
    num_users: int = 200,
    min_sentences: int = 20,
    max_sentences: int = 150,
    seed: int = 0,
    zipf_exponent: float = 1.1,
    no_entity_fraction: float = 0.35,
    canary_users: Sequence[int] = (),
    canary_seed: int | None = None,
    split_fractions: Sequence[float] = (0.8, 0.1, 0.1),
    locale: str = "en_US",
) -> Corpus:
    """Generate the synthetic corpus (see the module docstring for the contract)."""
    _check(isinstance(num_users, int) and num_users >= 1, "num_users", num_users, "an integer >= 1")
    _check(isinstance(min_sentences, int) and min_sentences >= 1, "min_sentences", min_sentences,
           "an integer >= 1")
    _check(isinstance(max_sentences, int) and max_sentences >= min_sentences, "max_sentences",
           max_sentences, f"an integer >= min_sentences ({min_sentences})")
    zipf_exponent, no_entity_fraction = _numbers("zipf_exponent/no_entity_fraction",
                                                 (zipf_exponent, no_entity_fraction), float)
    _check(zipf_exponent > 0, "zipf_exponent", zipf_exponent, "> 0")
    _check(0.0 <= no_entity_fraction <= 1.0, "no_entity_fraction", no_entity_fraction, "in [0, 1]")
    freqs = _numbers("canary_users", canary_users, int)
    _check(all(1 <= f <= num_users for f in freqs), "canary_users", canary_users,
           f"a list of user counts in [1, num_users={num_users}]")
    fractions = tuple(_numbers("split_fractions", split_fractions, float))
    _check(len(fractions) == 3 and min(fractions) >= 0 and abs(sum(fractions) - 1) < 1e-9,
           "split_fractions", split_fractions, "3 non-negative numbers summing to 1")
    try:
        fake = Faker(locale)
    except AttributeError as err:
        raise ConfigError(f"synthetic: option locale={locale!r} is not a Faker locale") from err
    fake.seed_instance(seed)
    rng = np.random.default_rng([seed, 0x5EED])

    pools = _Pools.draw(fake, rng, num_users)
    draws = _Draws(rng, {k: len(v) for k, v in pools.shared.items()}, zipf_exponent)
    personas = _personas(pools, draws, rng, num_users)
    width = max(4, len(str(num_users - 1)))
    users = [f"user_{i:0{width}d}" for i in range(num_users)]
    builder = CorpusBuilder("synthetic", has_gold=True)
    cut1, cut2 = fractions[0], fractions[0] + fractions[1]
    for user, persona in zip(users, personas):
        n = int(rng.integers(min_sentences, max_sentences + 1))
        topics = rng.choice(len(TOPICS), n, p=rng.dirichlet(np.ones(len(TOPICS))))
        free = rng.random(n) < no_entity_fraction
        split_draws = rng.random(n)
        templates = {t: persona.templates(t) for t in TOPICS}
        for topic, is_free, d in zip(topics.tolist(), free.tolist(), split_draws.tolist()):
            split = "train" if d < cut1 else "valid" if d < cut2 else "test"
            if is_free:
                subj, pred, tail = _FREE[TOPICS[topic]]
                text, gold = f"{draws.pick(subj)} {draws.pick(pred)}{draws.pick(tail)}.", []
            else:
                text, gold = _sentence(draws.pick(templates[TOPICS[topic]]), persona, draws, pools.shared)
            builder.add(user, text, label=topic, split=split, gold=gold)

    canary_rng = np.random.default_rng([seed if canary_seed is None else canary_seed, 0xCA9A])
    canaries = _plant_canaries(builder, users, freqs, canary_rng, pools)
    options = {"num_users": num_users, "min_sentences": min_sentences, "max_sentences": max_sentences,
               "seed": seed, "zipf_exponent": zipf_exponent, "no_entity_fraction": no_entity_fraction,
               "canary_users": freqs, "canary_seed": canary_seed, "split_fractions": list(fractions),
               "locale": locale}
    meta = {"options": options, "topics": list(TOPICS), "num_templates": sum(map(len, TEMPLATES.values())),
            "canary_space": CANARY_SPACE, "canaries": canaries}
    return builder.build(seed=seed, split_fractions=fractions, label_names=list(TOPICS), meta=meta)


def _plant_canaries(builder: CorpusBuilder, users: list[str], freqs: list[int], rng: np.random.Generator,
                    pools: _Pools) -> list[dict[str, Any]]:
    """Add one train sentence per (canary, user); the builder's stable sort makes it its user's last."""
    secrets = canary_candidates(CANARY_SPACE, len(freqs), int(rng.integers(2**31)))
    out = []
    for c, (freq, secret) in enumerate(zip(freqs, secrets)):
        name = _unique(lambda: pools.random_name(rng), 1, pools.taken, "canary names")[0]
        prefix = f"{name}'s account number is "
        text = f"{prefix}{secret}."
        chosen = sorted(users[int(k)] for k in rng.choice(len(users), freq, replace=False))
        gold = [GoldSpan(0, len(name), "PERSON"), GoldSpan(len(prefix), len(prefix) + len(secret), "ID")]
        for user in chosen:
            builder.add(user, text, label=TOPICS.index("finance"), split="train", gold=gold,
                        where=f"canary {c}")
        out.append({"id": f"canary_{c}", "text": text, "secret": secret, "prefix": prefix, "users": chosen,
                    "frequency": freq, "space": CANARY_SPACE})
    return out


# -- public text for the default tokenizer ----------------------------------------------------------------

PUBLIC_SEED = 1_000_003  # the public personas' seed: never a private corpus's (uedp.pipeline refuses that)
PUBLIC_USERS = 200


def public_texts(*, seed: int = PUBLIC_SEED, num_users: int = PUBLIC_USERS) -> list[str]:
    """Public text of the synthetic generator: every sentence (all splits) of `load_synthetic(num_users,
    seed)` with its default options and no canaries, i.e. OTHER personas than the private corpus's. It is a
    fixed function of (seed, num_users, Faker version), computed without looking at any private corpus, so a
    tokenizer trained on it (uedp.tokenization.get_public_tokenizer) does not depend on the users' text."""
    return load_synthetic(num_users=num_users, seed=seed).table.column("text").to_pylist()
