"""The annotation cache: detect entities in a corpus once, then read them back from Parquet.

    table = annotate(corpus, "spacy+rules")          # detects, writes the cache file
    table = annotate(corpus, "spacy+rules")          # reads the cache file (tens of times faster)
    mine = read_user_annotations(path, sids)         # a client: only its own sentences

Without a detector (or with "auto"), `annotate` and `annotate_cached` use the run's default, the config's
entities.detector = auto (uedp.config.EntityConfig.detector_for): `gold` on a corpus whose loader's spans are
exact by construction, else the `balanced` profile.

Cache file: `cache_root()/annotations/<corpus.fingerprint()>-<digest of the detector identity>.parquet`.
The corpus fingerprint covers every sentence, label, split and gold span, so a changed corpus never
reads stale annotations; the detector identity (detector name, resolved spaCy model and version, spaCy
version, rules, gazetteer, profile and lexicon versions, a digest of the list files and the versions of
the packages the lists come from; see `Detector.identity`) covers everything that changes the output, so a
different detector or model gets its own file, while `batch_size` and `n_process` (speed only) do not.
Looking up the cache does not import spaCy. Files are written atomically (temporary file + rename), so
concurrent writers and interrupted runs never leave a half-written file under the final name.

Annotation tables follow `ANNOTATION_SCHEMA` (uedp.entities.detectors), one row per sentence in sid
order; a user's sentences have contiguous sids (corpora are sorted by user), so `read_user_annotations`
reads only the Parquet row groups that hold them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from uedp.data.corpus import Corpus
from uedp.entities.detectors import ANNOTATION_SCHEMA, DETECTORS, Detector
from uedp.errors import CorpusError
from uedp.files import PRIVATE, atomic_path
from uedp.paths import cache_root

ROW_GROUP_SIZE = 2048


def _detector(name: str, model: str | None, n_process: int | None, batch_size: int | None) -> Detector:
    """Only options given explicitly are passed, so `gold` or `rules` with `model=...` is a ConfigError."""
    given = (("model", model), ("n_process", n_process), ("batch_size", batch_size))
    options: dict[str, Any] = {k: v for k, v in given if v is not None}
    return DETECTORS.create(name, **options)


def identity_digest(identity: dict[str, Any]) -> str:
    return hashlib.blake2b(json.dumps(identity, sort_keys=True).encode(), digest_size=8).hexdigest()


def annotation_path(
    corpus: Corpus, detector: Detector, cache_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Where `detector`'s annotations of `corpus` are cached (default: `cache_root()/annotations`)."""
    root = Path(cache_dir) if cache_dir is not None else cache_root() / "annotations"
    return root / f"{corpus.fingerprint()}-{identity_digest(detector.identity())}.parquet"


def save_annotations(table: pa.Table, path: str | os.PathLike[str]) -> Path:
    """Write `table` to `path` atomically, with small row groups and statistics for sid pruning."""
    path = Path(path)
    _check_schema(table, path)
    with atomic_path(path, mode=PRIVATE) as tmp:  # detected entities of a (maybe private) corpus
        pq.write_table(table, str(tmp), row_group_size=ROW_GROUP_SIZE, write_statistics=True)
    return path


def _check_schema(table: pa.Table, where: object) -> None:
    if not table.schema.equals(ANNOTATION_SCHEMA, check_metadata=False):
        schema = table.schema.to_string(show_schema_metadata=False)
        raise CorpusError(
            f"{where}: not an annotation table (schema {schema!r} differs from "
            "uedp.entities.detectors.ANNOTATION_SCHEMA)"
        )


def load_annotations(path: str | os.PathLike[str]) -> pa.Table:
    """Read an annotation table written by `save_annotations` (CorpusError if missing or malformed)."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: annotation file not found")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise CorpusError(f"{path}: unreadable annotation file: {exc}") from exc
    _check_schema(table, path)
    return table


def resolve_detector(corpus: Corpus, detector: str | None = None) -> str:
    """The detector `detector` names for `corpus`: None means the config's default (EntityConfig().detector,
    `auto`), and `auto` is resolved as a run resolves it on the dataset `corpus.name`."""
    from uedp.config import EntityConfig

    return EntityConfig(detector=EntityConfig().detector if detector is None else detector).detector_for(corpus.name)


def annotate(corpus: Corpus, detector: str | None = None, *, model: str | None = None, n_process: int | None = None,
             batch_size: int | None = None, cache: bool = True,
             cache_dir: str | os.PathLike[str] | None = None) -> pa.Table:
    """The annotation table of `corpus` by `detector`, from the cache when there (and written there when
    not, if `cache`). `model`, `n_process`, `batch_size` are options of the spaCy detectors; None means
    the detector's default (spaCy: first installed of DEFAULT_MODELS, 1 process, batches of 256). `detector`
    None (or "auto"): the config's default (`resolve_detector`)."""
    det = _detector(resolve_detector(corpus, detector), model, n_process, batch_size)
    if not cache:
        return det.annotate(corpus)
    return _cached(corpus, det, cache_dir)[1]


def annotate_cached(corpus: Corpus, detector: str | None = None, *, model: str | None = None,
                    n_process: int | None = None, batch_size: int | None = None,
                    cache_dir: str | os.PathLike[str] | None = None) -> tuple[Path, pa.Table]:
    """Like `annotate` with the cache on, but returns the cache file (for clients to read their rows) and
    the table."""
    return _cached(corpus, _detector(resolve_detector(corpus, detector), model, n_process, batch_size), cache_dir)


def _cached(corpus: Corpus, det: Detector, cache_dir: str | os.PathLike[str] | None) -> tuple[Path, pa.Table]:
    """The cache file and its table: loaded when present and sound, else detected and written."""
    path = annotation_path(corpus, det, cache_dir)
    if path.is_file():
        try:
            return path, load_annotations(path)
        except CorpusError:
            pass  # a damaged cache file is recomputed and replaced
    table = det.annotate(corpus)
    save_annotations(table, path)
    return path, table


def select_sids(annotations: pa.Table, sids: Iterable[int]) -> pa.Table:
    """The rows of `annotations` for `sids`, in sid order. A sid with no row is a CorpusError."""
    wanted = np.unique(np.fromiter(sids, dtype=np.int64))
    out = annotations.filter(pc.is_in(annotations.column("sid"), value_set=pa.array(wanted)))
    if out.num_rows != len(wanted):
        have = set(out.column("sid").to_pylist())
        missing = [int(s) for s in wanted if int(s) not in have]
        raise CorpusError(f"no annotations for sid(s) {missing[:10]} (annotations of another corpus?)")
    return out.sort_by("sid")


def read_user_annotations(path: str | os.PathLike[str], sids: Iterable[int]) -> pa.Table:
    """One client's annotations: the rows for `sids` (e.g. `read_user_rows(...).column("sid")`), read
    with Parquet row-group pruning on the sid range."""
    wanted = np.unique(np.fromiter(sids, dtype=np.int64))
    if len(wanted) == 0:
        return ANNOTATION_SCHEMA.empty_table()
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: annotation file not found")
    lo, hi = int(wanted[0]), int(wanted[-1])
    table = pq.read_table(path, filters=[("sid", ">=", lo), ("sid", "<=", hi)])
    _check_schema(table, path)
    return select_sids(table, wanted)
