"""Which of a node's sentences a UeDP round may use, and with what loss weights (docs/mechanism.md steps 3-5).

    ins = RoundInstructions.of(msg)                         # None: not a UeDP training message
    rows, weights = select_rows(ins, owner=owner_id, entities=keys, sids=stable_sids(texts, keys))

`entities[i]` is the set of protected entity keys of the node's sentence i (uedp.entities.plain.detect and
protected_keys give them for plain strings). For a keyed mechanism (UeDP f_E+, f_E, split) sentence i is
used iff every entity of it is sampled by the round key (and, with the entity cap, permitted in the node's
slot), or it has none and its extended entity (owner, sids[i]) is sampled; its weight is omega(i), the sum of
its entities' weights (1 each by default: uedp.privacy.selection). Every other mechanism (user-level DP, the
noiseless baselines) uses every sentence with weight 1.

`owner` names the extended entities' owner: it must be unique to this data owner across the federation
(two owners sharing one name would share the coins of their entity-free sentences: docs/proofs.md section
2): the project prefixes the node id (`f"node {context.node_id}: {user}"`).

`sids` are the sentences' ids in the extended entities' identities, and must not depend on which other
sentences exist: `stable_sids(texts, entities)` (defined in uedp.privacy.selection, re-exported here) gives
them from each sentence alone (its text, its entity set, and how many earlier sentences of the owner have
both the same), and is what the project's corpus mode, its owners mode (uedp.prepare.users.UserData.stable_ids)
and a component's node all pass. A keyed mechanism refuses a call without them: row numbers 0..n-1 would
depend on every earlier sentence (removing one renumbers the rest, and a colluding node that reveals the
round key sees it in the coins). Other mechanisms use every sentence and need no ids.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from uedp.privacy.selection import SelectionParams, select_sentences, stable_sids
from uedp.protocol import RoundInstructions

__all__ = ["select_rows", "stable_sids"]


def select_rows(ins: RoundInstructions, *, owner: str, entities: Sequence[Collection[str]],
                sids: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(rows used this round, their loss weights omega) of a node's sentences (module docstring: pass
    `sids=stable_sids(texts, entities)`; a keyed mechanism refuses none)."""
    n = len(entities)
    if sids is not None and len(sids) != n:
        raise ValueError(f"{len(sids)} sentence ids for {n} sentences")
    if not ins.spec.keyed:  # every sentence of the sampled user, weight 1
        return np.arange(n), np.ones(n)
    if ins.key is None:
        raise ValueError("a keyed mechanism's instructions carry a round key")
    if sids is None:
        raise ValueError(f"select_rows: mechanism {ins.mechanism!r} samples each entity-free sentence by its id: pass "
                         "sids=stable_sids(texts, entities) (row numbers would change when another sentence is "
                         "removed)")
    params = SelectionParams(
        q_e=ins.q_e, q_s=ins.q_s, k_cap=ins.k_cap or None, m_max=ins.m_max if ins.k_cap else None,
        slot=ins.slot if ins.k_cap else None,
    )
    sel = select_sentences(ins.key, user=owner, sids=list(sids), entities=entities, params=params)
    rows = np.flatnonzero(sel.mask)
    return rows, sel.weights[rows]
