"""Which detected entities a run protects (`EntityPolicy`: entities.protected less the public-entity policy
entities.public) and the paper's totals over the participants' training sentences (`entity_totals`). The
annotations themselves are detected and cached by uedp.entities.annotations.annotate_cached."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from uedp.categories import resolve_categories
from uedp.data.corpus import Corpus
from uedp.entities.detectors import entity_sets
from uedp.entities.public import public_keys


@dataclass(frozen=True)
class EntityPolicy:
    """`protected`: a category group or comma-separated categories (uedp.categories); `public`: a public-entity
    policy (uedp.entities.public) whose entities are not protected."""

    protected: str = "all"
    public: str = "none"

    def categories(self) -> frozenset[str]:
        """The protected categories (uedp.categories.resolve_categories)."""
        return resolve_categories(self.protected)

    def entity_sets(self, annotations: pa.Table) -> list[frozenset[str]]:
        """Each annotated sentence's protected entities (uedp.entities.detectors.entity_sets)."""
        return entity_sets(annotations, self.categories(), public_keys(self.public))


def entity_totals(corpus: Corpus, annotations: pa.Table, users: list[str], policy: EntityPolicy) -> tuple[int, int]:
    """W_e and W_s of the paper's denominator (privacy.paper_z): distinct protected entities, and
    sentences without one, over the participants' training sentences (unit weights). These totals are
    computed from the data; the paper treats them as public constants."""
    table = corpus.table
    keep = pa.compute.and_(pa.compute.equal(table.column("split"), "train"),
                           pa.compute.is_in(table.column("user"), value_set=pa.array(users)))
    sids = table.filter(keep).column("sid").to_numpy()
    sets = policy.entity_sets(annotations.take(pa.array(sids)))
    return len(set().union(*sets)) if sets else 0, sum(1 for e in sets if not e)
