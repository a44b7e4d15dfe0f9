"""Per-entity detection on the hand-labelled gold sets, and the epsilon each method then gives each entity.

    python -m experiments.entity_detection [--sets bbc_news,...] [--detector balanced] [--out docs/figures]

The gold sets (tests/assets/ner_gold/*.jsonl, docs/ner-gold.md; both halves, `valid` and `test`) are public
evaluation corpora standing in for real text. Each line is one sentence of one `user`.

Keys. The run's detector (default `balanced`, what a run uses on real text: uedp.config.EntityConfig.detector_for)
annotates the set; a sentence's entity set is `uedp.entities.detectors.entity_sets` of that annotation over the
protected categories of the run's default (EntityConfig().protected, `all`; no public-entity policy): keys
`CATEGORY:text` (uedp.categories.entity_key: case-folded, white space collapsed). A gold span's key is built by
the SAME code: the `gold` detector (GoldDetector, which maps a gold category to a protected category) on the
same corpus, so a gold mention's key is `entity_key(category, text[start:end])`.

Rule. A gold mention is DETECTED WITH THE EXACT KEY iff the detector's entity set of its sentence contains the
gold mention's key (same category, same normalized string; GPE and LOC are different keys; the detector's
span may lie elsewhere in the sentence, since UeDP samples a sentence by the keys of its set, not by spans).
A gold entity is a distinct gold key of the set; its mentions are its gold spans (two spans in one sentence are
two mentions, both detected or both missed); its holders K are the distinct users with a mention IN THE GOLD SET
(one sentence per BBC article: a run's corpus holds more mentions and holders of the same entity); K' are the
holders with at least one missed mention. A missed mention whose span a detected entity of another key overlaps
(wrong category or boundaries) is counted apart: its sentence is flagged, but under another key.

Epsilons (uedp.privacy.holders.holders_epsilon, for one user u' that is NOT a holder, the worse case, AND the
entity held by the K others), at the run's settings `Settings` (BBC News classification, 400 users, 30 rounds,
delta 1e-5; the same settings for all four sets):
- UeDP: docs/results.md section 9 (q_u 1, q_e 0.2, q_s 1, k_cap 1, z 3.288, m_max automatic:
  uedp.privacy.accounting.safe_m_max), `missed=K'` (K' = 0: detected everywhere, eps_uedp; 0 < K' < K the
  mixed case; K' = K undetected);
- user-level DP (and de-identification + user-level DP, the same accounting): q_u 0.25 (the BBC runs'
  default), z calibrated to eps_user 8 (uedp.privacy.calibration.calibrate_identical, as `uedp epsilon
  --strategy user_dp --target-epsilon 8`); detection does not matter;
- FedAvg and de-identification alone (no noise): infinite.
Each distinct (K, K') is computed once. Aggregates are counts (no percentile: most entities have one mention):
the detected share (0, between, 1) by number of mentions, epsilon bands per method, per set and per category,
and the correlation check: for entities with >= 2 mentions, how many have ALL (or NO) mentions detected against
what independent misses at the set's mention-level recall r predict (sum of r^m, resp. (1 - r)^m, with the
Poisson-binomial standard deviation), and at the recall of the entity's category. Annotations are cached as a
run caches them (uedp.entities.annotations); the gold sets' entity strings appear in the JSON (public text).
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from studies.detectors import GOLD_DIR, SETS, gold_corpus, publish
from uedp.categories import key_category, resolve_categories
from uedp.config import EntityConfig
from uedp.data.corpus import Corpus
from uedp.entities.annotations import annotate, annotation_path
from uedp.entities.detectors import DETECTORS, entity_sets
from uedp.markdown import table as md_table
from uedp.privacy.accounting import Mechanism, mechanism, safe_m_max
from uedp.privacy.calibration import calibrate_identical
from uedp.privacy.holders import holders_epsilon

METHODS = ("uedp", "user_dp", "fedavg")
METHOD_LABELS = {"uedp": "UeDP", "user_dp": "user-level DP (and de-identification + user-level DP)",
                 "fedavg": "FedAvg, de-identification (no noise)"}
BANDS = ((4.0, "<= 4"), (8.0, "4-8"), (16.0, "8-16"), (64.0, "16-64"), (math.inf, "> 64"))  # finite; then "inf"
BAND_LABELS = (*(label for _, label in BANDS), "inf")
MENTION_BINS = ((1, 1, "1"), (2, 4, "2-4"), (5, None, "5+"))
CORRELATION_BINS = ((2, 2, "2"), (3, 4, "3-4"), (5, None, "5+"))
DETECTION = ("never", "partly", "always")  # detected share 0, in (0, 1), 1


@dataclass(frozen=True)
class Settings:
    """The run's privacy settings for the epsilons (module docstring)."""

    num_users: int = 400
    rounds: int = 30
    delta: float = 1e-5
    q_u: float = 1.0
    q_e: float = 0.2
    q_s: float = 1.0
    k_cap: int = 1
    z: float = 3.288
    user_q_u: float = 0.25
    user_target: float = 8.0
    vdi: float | None = None  # the PLD grid of holders_epsilon (None: its automatic one)

    def m_max(self) -> int:
        return safe_m_max(self.num_users, self.q_u, self.rounds, self.delta)

    def uedp(self) -> Mechanism:
        return mechanism("uedp", z=self.z, q_u=self.q_u, q_e=self.q_e, q_s=self.q_s, m_max=self.m_max(),
                         k_cap=self.k_cap)

    def user_dp_z(self) -> float:
        """z of user-level DP at eps_user = user_target: the problem `uedp epsilon --strategy user_dp
        --target-epsilon` solves (so its calibration cache serves both)."""
        return calibrate_identical(self.user_target, ("user",), rule="user_dp", q_u=self.user_q_u, q_e=1.0,
                                   q_s=1.0, m_max=None, k_cap=None, rounds=self.rounds, delta=self.delta,
                                   num_users=self.num_users)


@dataclass(frozen=True)
class Entity:
    """One distinct gold key of a set: its mentions, those detected with the exact key, holders K and K'."""

    key: str
    category: str
    mentions: int
    detected: int
    holders: int
    missed_holders: int

    @property
    def share(self) -> float:
        return self.detected / self.mentions

    @property
    def detection(self) -> str:
        return DETECTION[0] if self.detected == 0 else DETECTION[2] if self.detected == self.mentions else DETECTION[1]


@dataclass(frozen=True)
class Tally:
    """A gold set's entities (sorted by key) and its mention counts: all, detected with the exact key, and
    missed ones whose span a detected entity of ANOTHER key overlaps (wrong category or boundaries: the sentence
    is flagged, under another key); per category the mentions and those detected."""

    entities: list[Entity]
    mentions: int
    detected: int
    near_missed: int
    by_category: dict[str, tuple[int, int]]

    def recall(self, category: str | None = None) -> float:
        """The mention-level exact-key recall of the set, or of one category's mentions."""
        n, d = (self.mentions, self.detected) if category is None else self.by_category[category]
        return d / n if n else math.nan


def gold_entities(corpus: Corpus, gold: pa.Table, found: pa.Table,
                  protected: Iterable[str] | None = None) -> Tally:
    """The `Tally` of `corpus` from its gold annotation `gold` (the `gold` detector) and the detector's `found`
    (module docstring, "Rule"). Only gold entities of `protected` categories count (default: the run's,
    EntityConfig().protected)."""
    cats = resolve_categories(EntityConfig().protected if protected is None else protected)
    rows = corpus.table.sort_by("sid")
    sids = rows.column("sid").to_pylist()
    for what, table in (("gold", gold), ("detector", found)):
        if table.column("sid").to_pylist() != sids:
            raise ValueError(f"{corpus.name}: the {what} annotation is not of this corpus (sids differ)")
    users = rows.column("user").to_pylist()
    found_sets = entity_sets(found, cats)
    mentions: dict[str, int] = defaultdict(int)
    detected: dict[str, int] = defaultdict(int)
    holders: dict[str, set[str]] = defaultdict(set)
    missed: dict[str, set[str]] = defaultdict(set)
    near = 0
    for user, spans, keys, spotted in zip(users, gold.column("entities").to_pylist(), found_sets,
                                          found.column("entities").to_pylist()):
        for span in spans:
            if span["category"] not in cats:
                continue
            key = span["key"]
            mentions[key] += 1
            holders[key].add(user)
            if key in keys:
                detected[key] += 1
                continue
            missed[key].add(user)
            near += any(f["category"] in cats and f["start"] < span["end"] and span["start"] < f["end"]
                        for f in spotted)
    entities = [Entity(key, key_category(key), mentions[key], detected[key], len(holders[key]), len(missed[key]))
                for key in sorted(mentions)]
    by_category: dict[str, tuple[int, int]] = {}
    for e in entities:
        n, d = by_category.get(e.category, (0, 0))
        by_category[e.category] = (n + e.mentions, d + e.detected)
    return Tally(entities, sum(mentions.values()), sum(detected.values()), near, dict(sorted(by_category.items())))


class Epsilons:
    """holders_epsilon per distinct (K, K') for UeDP and per K for user-level DP, each computed once."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.user_z = settings.user_dp_z()
        self.uedp_records = [(settings.uedp(), settings.rounds)]
        self.user_records = [(mechanism("user_dp", z=self.user_z, q_u=settings.user_q_u, m_max=None),
                              settings.rounds)]
        self._uedp: dict[tuple[int, int], tuple[float, str]] = {}
        self._user: dict[int, tuple[float, str]] = {}

    def uedp(self, k: int, missed: int) -> tuple[float, str]:
        if (k, missed) not in self._uedp:
            s = self.settings
            h = holders_epsilon(self.uedp_records, k, delta=s.delta, num_users=s.num_users, missed=missed,
                                value_discretization_interval=s.vdi)
            self._uedp[(k, missed)] = (h.epsilon, h.bound)
        return self._uedp[(k, missed)]

    def user_dp(self, k: int) -> tuple[float, str]:
        if k not in self._user:
            s = self.settings
            h = holders_epsilon(self.user_records, k, delta=s.delta, num_users=s.num_users,
                                value_discretization_interval=s.vdi)
            self._user[k] = (h.epsilon, h.bound)
        return self._user[k]

    def of(self, e: Entity) -> dict[str, float]:
        return {"uedp": self.uedp(e.holders, e.missed_holders)[0], "user_dp": self.user_dp(e.holders)[0],
                "fedavg": math.inf}

    def table(self) -> list[dict[str, Any]]:
        """One row per (K, K') computed: both methods' epsilon and the bound that decided it."""
        return [{"k": k, "missed": m, "uedp": eps, "uedp_bound": bound, "user_dp": self._user[k][0],
                 "user_dp_bound": self._user[k][1]} for (k, m), (eps, bound) in sorted(self._uedp.items())]


def band(eps: float) -> str:
    """The epsilon band of `eps` (BAND_LABELS): <= 4, (4, 8], (8, 16], (16, 64], > 64 finite, inf."""
    if math.isinf(eps):
        return "inf"
    return next(label for top, label in BANDS if eps <= top)


def _in(n: int, lo: int, hi: int | None) -> bool:
    return n >= lo and (hi is None or n <= hi)


@dataclass
class SetResult:
    name: str
    lines: int
    users: int
    seconds_detect: float | None  # None: read from the annotation cache
    tally: Tally
    epsilons: list[dict[str, float]] = field(default_factory=list)  # per entity of tally, METHODS


def detection_counts(entities: Sequence[Entity]) -> dict[str, int]:
    counts = dict.fromkeys(DETECTION, 0)
    for e in entities:
        counts[e.detection] += 1
    return counts


def band_counts(epsilons: Sequence[dict[str, float]], method: str) -> dict[str, int]:
    counts = dict.fromkeys(BAND_LABELS, 0)
    for eps in epsilons:
        counts[band(eps[method])] += 1
    return counts


def correlation(tally: Tally) -> list[dict[str, Any]]:
    """Per CORRELATION_BINS of mentions (>= 2): entities, observed with all / no mentions detected, and what
    independent misses predict (expected count and its Poisson-binomial standard deviation) at the set's
    mention-level recall r, and (all detected) at the recall of each entity's category."""
    out = []
    r = tally.recall()
    for lo, hi, label in CORRELATION_BINS:
        group = [e for e in tally.entities if _in(e.mentions, lo, hi)]
        p_all = [r ** e.mentions for e in group]
        p_cat = [tally.recall(e.category) ** e.mentions for e in group]
        p_none = [(1.0 - r) ** e.mentions for e in group]
        out.append({"mentions": label, "entities": len(group),
                    "all_observed": sum(e.detected == e.mentions for e in group),
                    "all_predicted": sum(p_all), "all_sd": _sd(p_all),
                    "all_predicted_category": sum(p_cat), "all_sd_category": _sd(p_cat),
                    "none_observed": sum(e.detected == 0 for e in group),
                    "none_predicted": sum(p_none), "none_sd": _sd(p_none)})
    return out


def _sd(ps: Sequence[float]) -> float:
    return math.sqrt(sum(p * (1 - p) for p in ps))


def study(sets: Sequence[str] = SETS, detector: str = "balanced", *, gold_dir: Path = GOLD_DIR,
          settings: Settings | None = None, cache: bool = True) -> dict[str, Any]:
    """Detect each gold set with `detector` (annotations cached as a run caches them, uedp.entities.annotations),
    tally its gold entities and their epsilons; the JSON-ready result (`render` writes it as Markdown)."""
    settings = settings or Settings()
    t0 = time.perf_counter()
    eps = Epsilons(settings)
    results = []
    for name in sets:
        corpus = gold_corpus(name, gold_dir)
        cached = cache and annotation_path(corpus, DETECTORS.create(detector)).is_file()
        t = time.perf_counter()
        found = annotate(corpus, detector, cache=cache)
        seconds = None if cached else round(time.perf_counter() - t, 2)
        gold = DETECTORS.create("gold").annotate(corpus)
        tally = gold_entities(corpus, gold, found)
        r = SetResult(name, corpus.num_sentences, len(set(corpus.table.column("user").to_pylist())),
                      seconds, tally, [eps.of(e) for e in tally.entities])
        results.append(r)
    return {
        "detector": detector, "protected": EntityConfig().protected,
        "settings": {**asdict(settings), "m_max": settings.m_max(), "user_dp_z": eps.user_z},
        "epsilons": eps.table(),
        "sets": {r.name: _set_json(r) for r in results},
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _set_json(r: SetResult) -> dict[str, Any]:
    t = r.tally
    by_mentions = {label: detection_counts([e for e in t.entities if _in(e.mentions, lo, hi)])
                   for lo, hi, label in MENTION_BINS}
    per_category = {}
    for c, (n, d) in t.by_category.items():
        idx = [i for i, e in enumerate(t.entities) if e.category == c]
        per_category[c] = {"entities": len(idx), "mentions": n, "detected_mentions": d,
                           "detection": detection_counts([t.entities[i] for i in idx]),
                           "bands": {m: band_counts([r.epsilons[i] for i in idx], m) for m in METHODS}}
    return {
        "lines": r.lines, "users": r.users, "mentions": t.mentions, "detected_mentions": t.detected,
        "mention_recall": t.recall(), "near_missed_mentions": t.near_missed, "seconds_detect": r.seconds_detect,
        "entities_count": len(t.entities), "detection": detection_counts(t.entities),
        "missed_holders_any": sum(e.missed_holders > 0 for e in t.entities),
        "detection_by_mentions": by_mentions,
        "bands": {m: band_counts(r.epsilons, m) for m in METHODS},
        "per_category": per_category,
        "correlation": correlation(t),
        "entities": [{**asdict(e), "share": e.share, **{f"eps_{m}": v for m, v in eps.items()}}
                     for e, eps in zip(t.entities, r.epsilons)],
    }


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def to_json(result: dict[str, Any]) -> str:
    """`result` as indented JSON, each set's entity rows one per line, an infinite epsilon as null."""
    data = _clean(result)
    rows = {}
    for name, r in data["sets"].items():
        rows[name], r["entities"] = r["entities"], f"@entities of {name}@"
    text = json.dumps(data, indent=1, allow_nan=False)
    for name, entities in rows.items():
        body = ",\n".join("    " + json.dumps(e, allow_nan=False) for e in entities)
        text = text.replace(json.dumps(f"@entities of {name}@"), f"[\n{body}\n   ]" if entities else "[]")
    return text


def _count(n: int, total: int) -> str:
    return f"{n} ({100 * n / total:.0f}%)" if total else "0"


def _eps(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.3g}"


def _heading(result: dict[str, Any]) -> str:
    s = result["settings"]
    return (f"Per gold entity (a distinct key, docs/ner-gold.md gold sets, both halves): the share of its mentions "
            f"the `{result['detector']}` detector finds with the exact key (the sentence's entity set holds the gold "
            "key: same category and case-folded string), its holders K (distinct users with a mention) and K' "
            "(holders with a missed mention), and the epsilon for one user u' that is not a holder AND the entity "
            "(uedp.privacy.holders). Settings, the same for every set: BBC News classification, "
            f"{s['num_users']} users, {s['rounds']} rounds, delta {s['delta']:g}; UeDP q_u {s['q_u']:g}, q_e "
            f"{s['q_e']:g}, q_s {s['q_s']:g}, k_cap {s['k_cap']}, z {s['z']:g}, m_max {s['m_max']} "
            "(docs/results.md section 9), missed = K'; "
            f"user-level DP q_u {s['user_q_u']:g}, z {s['user_dp_z']:.4g} (eps_user "
            f"{s['user_target']:g}); FedAvg and de-identification alone: inf. K counts holders WITHIN the gold "
            "set (one sentence per BBC article): a run's corpus has more mentions and holders of the same entity. "
            "Counts only (most entities have one mention: no percentile).")


def _summary_table(sets: dict[str, Any]) -> str:
    """Per set: its size, its mentions and those detected, and its entities by detected share."""
    rows = []
    for name, r in sets.items():
        n = r["entities_count"]
        d = r["detection"]
        rows.append([name, r["lines"], r["users"], r["mentions"],
                     f"{r['detected_mentions']} ({r['mention_recall']:.2f})", r["near_missed_mentions"], n,
                     _count(d["always"], n), _count(d["partly"], n), _count(d["never"], n)])
    return md_table(["gold set", "lines", "users", "gold mentions", "detected with exact key (recall)",
                     "missed, another key overlaps", "entities", "all mentions detected (K' = 0)", "some", "none"],
                    rows)


def _mentions_table(sets: dict[str, Any]) -> str:
    """Per set and number of mentions (MENTION_BINS): entities by detected share."""
    rows = []
    for name, r in sets.items():
        for _, _, label in MENTION_BINS:
            d = r["detection_by_mentions"][label]
            if sum(d.values()):
                rows.append([name, label, sum(d.values()), d["never"], d["partly"], d["always"]])
    return md_table(["gold set", "mentions", "entities", "share 0", "share in (0, 1)", "share 1"], rows)


def _bands_table(sets: dict[str, Any]) -> str:
    """Per set and method: entities per epsilon band."""
    rows = [[name, METHOD_LABELS[m], *(r["bands"][m][b] for b in BAND_LABELS)]
            for name, r in sets.items() for m in METHODS]
    return md_table(["gold set", "method", *(f"eps {b}" for b in BAND_LABELS)], rows)


def _category_table(sets: dict[str, Any]) -> str:
    """Per set and category: entities, mentions detected, entities by detected share and per epsilon band."""
    rows = []
    for name, r in sets.items():
        for c, v in r["per_category"].items():
            d = v["detection"]
            rows.append([name, c, v["entities"], f"{v['detected_mentions']} / {v['mentions']}",
                         f"{d['always']} / {d['partly']} / {d['never']}",
                         " / ".join(str(v["bands"]["uedp"][b]) for b in BAND_LABELS),
                         " / ".join(str(v["bands"]["user_dp"][b]) for b in BAND_LABELS)])
    bl = " / ".join(BAND_LABELS)
    return md_table(["gold set", "category", "entities", "mentions detected", "entities detected all / some / none",
                     f"UeDP eps {bl}", f"user-level DP eps {bl}"], rows)


def _holders_table(result: dict[str, Any]) -> str:
    """Per (K, K') computed: the entities of all sets with it and each method's epsilon with its bound."""
    held: dict[tuple[int, int], int] = defaultdict(int)
    for r in result["sets"].values():
        for e in r["entities"]:
            held[(e["holders"], e["missed_holders"])] += 1
    return md_table(["K", "K'", "entities (all sets)", "UeDP eps (bound)", "user-level DP eps (bound)"],
                    [[row["k"], row["missed"], held[(row["k"], row["missed"])],
                      f"{_eps(row['uedp'])} ({row['uedp_bound']})",
                      f"{_eps(row['user_dp'])} ({row['user_dp_bound']})"] for row in result["epsilons"]])


def _correlation_table(sets: dict[str, Any]) -> str:
    """Per set and CORRELATION_BINS: entities with every / no mention detected, observed against predicted."""
    rows = []
    for name, r in sets.items():
        for c in r["correlation"]:
            if c["entities"]:
                rows.append([name, c["mentions"], c["entities"], c["all_observed"],
                             f"{c['all_predicted']:.1f} ± {c['all_sd']:.1f}",
                             f"{c['all_predicted_category']:.1f} ± {c['all_sd_category']:.1f}", c["none_observed"],
                             f"{c['none_predicted']:.1f} ± {c['none_sd']:.1f}"])
    return md_table(["gold set", "mentions", "entities", "all detected: observed",
                     "predicted at the set's r (± sd)", "at the category's r (± sd)", "none detected: observed",
                     "predicted at the set's r (± sd)"], rows)


def render(result: dict[str, Any]) -> str:
    """The Markdown report of `study`'s result: counts only."""
    sets = result["sets"]
    return "\n\n".join([
        _heading(result), _summary_table(sets),
        "Detected share by number of mentions (entities):", _mentions_table(sets),
        "Entities by epsilon band, per method:", _bands_table(sets),
        "Per category: entities, detection, and entities per epsilon band:", _category_table(sets),
        "The epsilon per (K, K') that occurs (u' not a holder; K' = 0: eps_uedp for UeDP):", _holders_table(result),
        "Correlation of misses (entities with >= 2 mentions): observed counts with every / no mention detected "
        "against independent misses at the set's mention-level recall r (expected sum of r^m, resp. (1 - r)^m, "
        "Poisson-binomial sd), and at the recall of the entity's category (which removes the part of the "
        "correlation that is only categories differing in recall):", _correlation_table(sets),
        f"Computed in {result['seconds']:.0f} s (detection: "
        + ", ".join(f"{n} " + ("from the annotation cache" if r["seconds_detect"] is None else
                               f"{r['seconds_detect']:.1f} s") for n, r in sets.items())
        + "; annotations are cached as a run caches them, uedp.entities.annotations).",
    ])


def report(sets: Sequence[str], detector: str, *, gold_dir: Path = GOLD_DIR, vdi: float | None = None,
           out: Path | None = None) -> str:
    """The study as `python -m experiments.entity_detection` runs it: `study` of the gold sets `sets` with
    `detector` (holders_epsilon's grid `vdi`), and with `out` OUT/entity-detection.md (the report and the
    command) and OUT/entity-detection.json (`to_json`); the Markdown report."""
    result = study(sets, detector, gold_dir=gold_dir, settings=Settings(vdi=vdi))
    text = render(result)
    if out is not None:
        command = f"python -m experiments.entity_detection --sets {','.join(sets)} --detector {detector}"
        command += f" --out {out}" + (f" --vdi {vdi:g}" if vdi is not None else "")
        publish(out, "entity-detection.md", text, command)
        (out / "entity-detection.json").write_text(to_json(result) + "\n")
    return text
