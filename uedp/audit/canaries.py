"""The audit's corpus wrapper: the synthetic corpus plus canaries drawn in advance and planted by coin flip.

    load_corpus("audit_synthetic", num_users=200, frequencies=[1, 2, 4, 8], per_frequency=16, copies=8)

For each frequency f in `frequencies`, `per_frequency` candidate canaries are drawn (from `audit_seed`):
a fresh name (not in the base corpus) and a secret uniform over "dddd-dddd" (the synthetic corpus's canary
space), as "<Name>'s account number is dddd-dddd." (gold PERSON + ID, label "finance", like
`uedp.data.synthetic`'s own canaries). Each candidate is planted with an independent fair coin flip; a
planted one goes into f distinct random users, `copies` train sentences per user (the synthetic loader
plants one copy only, which a small model seen ~7 times per user does not memorize; repeating is the
usual way to give an audit power). Non-planted candidates are the one-run audit's non-members.

`space` (default the synthetic corpus's "dddd-dddd") sets the secrets' pattern ('d' = a digit); the
quick audit uses "ddd", so that the whole space can be ranked (exact exposure, max log2(1000) bits).

The base corpus is `load_synthetic(num_users, min_sentences, max_sentences, seed)` unchanged (no canaries
of its own); `meta["audit_canaries"]` lists every candidate: {id, text, secret, prefix, frequency,
member, users, copies, space}. Registered in `uedp.data.loaders.LOADERS` on import of `uedp.audit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from uedp.data.corpus import Corpus, CorpusBuilder, GoldSpan, gold_spans
from uedp.data.loaders import LOADERS
from uedp.data.synthetic import CANARY_SPACE, SYNTHETIC_FACTS, TOPICS, canary_candidates, load_synthetic

_FIRST = ["Ottoline", "Barnaby", "Ismay", "Thaddeus", "Wilhelmina", "Crispin", "Perpetua", "Evander",
          "Zephyrine", "Lucan", "Marigold", "Osric", "Philippa", "Ambrose", "Rosamund", "Leopold"]
_LAST = ["Quenby", "Fairweather", "Thistlewood", "Ashcombe", "Penhallow", "Wyndham", "Blackwood",
         "Merriweather", "Hollingsworth", "Ravensworth", "Tremayne", "Kingswell", "Loxley", "Ormsby",
         "Pemberton", "Stanhope"]


def _names(n: int, rng: np.random.Generator, corpus_text: str) -> list[str]:
    pool = [f"{f} {last}" for f in _FIRST for last in _LAST]
    pool = [p for p in pool if p not in corpus_text and p.split()[1] not in corpus_text]
    if n > len(pool):
        raise ValueError(f"audit_synthetic: only {len(pool)} unused canary names, {n} asked")
    return [pool[i] for i in rng.permutation(len(pool))[:n]]


@LOADERS.register("audit_synthetic", facts=SYNTHETIC_FACTS)
def load_audit_synthetic(*, num_users: int = 200, min_sentences: int = 20, max_sentences: int = 150, seed: int = 0,
                         frequencies: Sequence[int] = (1, 2, 4, 8), per_frequency: int = 16, copies: int = 8,
                         audit_seed: int = 1, space: str = CANARY_SPACE) -> Corpus:
    freqs = [int(f) for f in frequencies]
    if not freqs or any(not 1 <= f <= num_users for f in freqs):
        raise ValueError(f"audit_synthetic: frequencies must lie in 1..num_users={num_users}, got {frequencies}")
    if per_frequency < 1 or copies < 1:
        raise ValueError(f"audit_synthetic: per_frequency and copies must be >= 1, got {per_frequency}, {copies}")
    if not isinstance(space, str) or not 1 <= space.count("d") <= 12 or any(ch.isdigit() for ch in space):
        raise ValueError(f"audit_synthetic: space must be a pattern of 1..12 'd' digits, got {space!r}")
    base = load_synthetic(num_users=num_users, min_sentences=min_sentences, max_sentences=max_sentences,
                          seed=seed)
    table = base.table
    builder = CorpusBuilder("audit_synthetic", has_gold=True)
    texts = table.column("text").to_pylist()
    for user, text, label, split, gold in zip(table.column("user").to_pylist(), texts,
                                               table.column("label").to_pylist(),
                                               table.column("split").to_pylist(),
                                               table.column("gold").to_pylist()):
        builder.add(user, text, label=label, split=split, gold=gold_spans(gold))
    rng = np.random.default_rng([audit_seed, 0xA0D1])
    total = per_frequency * len(freqs)
    names = _names(total, rng, "\n".join(texts))
    secrets = canary_candidates(space, total, int(rng.integers(2**31)))
    users = base.users()
    canaries: list[dict[str, Any]] = []
    for i, (name, secret) in enumerate(zip(names, secrets)):
        freq = freqs[i // per_frequency]
        member = bool(rng.random() < 0.5)  # the coin flip, drawn for every candidate
        chosen = sorted(users[int(k)] for k in rng.choice(len(users), freq, replace=False))
        prefix = f"{name}'s account number is "
        text = f"{prefix}{secret}."
        gold = [GoldSpan(0, len(name), "PERSON"), GoldSpan(len(prefix), len(prefix) + len(secret), "ID")]
        if member:
            for user in chosen:
                for _ in range(copies):
                    builder.add(user, text, label=TOPICS.index("finance"), split="train", gold=gold,
                                where=f"audit canary {i}")
        canaries.append({"id": f"audit_{i}", "text": text, "secret": secret, "prefix": prefix,
                         "frequency": freq, "member": member, "users": chosen if member else [],
                         "copies": copies, "space": space})
    meta = {**{k: v for k, v in base.meta.items() if k not in ("source", "dropped_users")},
            "audit_options": {"frequencies": freqs, "per_frequency": per_frequency, "copies": copies,
                              "audit_seed": audit_seed, "space": space},
            "audit_canaries": canaries}
    return builder.build(seed=seed, label_names=base.label_names, meta=meta)
