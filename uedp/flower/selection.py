"""Which of a node's sentences a UeDP round may use, and with what loss weights (docs/mechanism.md steps 3-5).

    ins = RoundInstructions.of(msg)                         # None: not a UeDP training message
    rows, weights = select_rows(ins, owner=owner_id, entities=keys)

`entities[i]` is the set of protected entity keys of the node's sentence i (uedp.entities.plain.detect and
protected_keys give them for plain strings). For a keyed mechanism (UeDP f_E+, f_E, split) sentence i is
used iff every entity of it is sampled by the round key (and, with the entity cap, permitted in the node's
slot), or it has none and its extended entity (owner, sid) is sampled; its weight is omega(i), the sum of its
entities' weights (1 each by default: uedp.privacy.selection). Every other mechanism (user-level DP, the
noiseless baselines) uses every sentence with weight 1.

`owner` names the extended entities' owner: it must be unique to this data owner across the federation
(two owners sharing one name would share the coins of their entity-free sentences: docs/proofs.md section
2): the project prefixes the node id (`f"node {context.node_id}: {user}"`). `sids` are the sentences'
stable ids (default 0..n-1); they must not depend on which other sentences exist.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from uedp.privacy.selection import SelectionParams, select_sentences
from uedp.protocol import RoundInstructions


def select_rows(ins: RoundInstructions, *, owner: str, entities: Sequence[Collection[str]],
                sids: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(rows used this round, their loss weights omega) of a node's sentences (module docstring)."""
    n = len(entities)
    if sids is not None and len(sids) != n:
        raise ValueError(f"{len(sids)} sentence ids for {n} sentences")
    if not ins.spec.keyed:  # every sentence of the sampled user, weight 1
        return np.arange(n), np.ones(n)
    if ins.key is None:
        raise ValueError("a keyed mechanism's instructions carry a round key")
    params = SelectionParams(
        q_e=ins.q_e, q_s=ins.q_s, k_cap=ins.k_cap or None, m_max=ins.m_max if ins.k_cap else None,
        slot=ins.slot if ins.k_cap else None,
    )
    sel = select_sentences(ins.key, user=owner, sids=list(range(n)) if sids is None else list(sids),
                           entities=entities, params=params)
    rows = np.flatnonzero(sel.mask)
    return rows, sel.weights[rows]
