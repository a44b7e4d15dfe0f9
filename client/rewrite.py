"""The data owner's side of strategy=dp_bart (local DP, docs/dp-bart-system.md): rewrite this node's
training sentences once, on this machine, and reply with the rewrites only.

The node reads its own sentences (partition-id's user of the prepared corpus, or its own file with
federation.data = owners), loads the public rewriter (uedp.rewriting.model: weights trained on public text
independent of this corpus), and rewrites at most rewrite.max_documents sentences through the CLV mechanism
with noise from a cryptographically seeded generator (privacy.seed >= 0: reproducible, not private). The
rewrites (and labels, by randomized response when rewrite.label_epsilon is set) are cached on this machine and
sent again on a later run: rewriting again would spend epsilon again. Nothing else leaves the node.
"""

from __future__ import annotations

from flwr.app import ConfigRecord

from uedp.config import RunConfig
from uedp.models.base import CLASSIFICATION
from uedp.paths import cache_root


def owner_sentences(cfg: RunConfig, *, partition_id: int | None, data_path: str) -> tuple[list[str], list[int] | None,
                                                                                          int | None]:
    """(training sentences, their labels or None, number of labels or None) of this node's owner."""
    if cfg.owners:
        from uedp.owners import read_owner_file
        from uedp.pipeline import owner_task

        corpus = read_owner_file(data_path, owner_task(cfg))
        rows, names = corpus.split("train"), corpus.label_names
    else:
        from uedp.data.store import read_user_rows
        from uedp.pipeline import load_manifest

        manifest = load_manifest(cfg)
        if partition_id is None or not 0 <= partition_id < len(manifest.users):
            raise ValueError(f"partition-id {partition_id} outside 0..{len(manifest.users) - 1}")
        rows = read_user_rows(manifest.corpus_dir, manifest.users[partition_id], split="train")
        names = manifest.label_names
    texts = rows.column("text").to_pylist()
    if cfg.task.name != CLASSIFICATION:
        return texts, None, None
    return texts, [int(y) for y in rows.column("label").to_pylist()], len(names or ())


def client_rewrite(cfg: RunConfig, *, partition_id: int | None, data_path: str, expected: str | None = None
                   ) -> ConfigRecord:
    """This owner's rewrites. `expected`: the server's rewriter digest (sent with the query); a node whose
    rewriter differs (another rewrite.rewriter file, another cache) refuses before rewriting anything."""
    from uedp.pipeline import rewriter_corpus
    from uedp.privacy.noise import secure_generator
    from uedp.rewriting.rewrite import rewrite_cached, rewriter_digest, rewriter_for

    settings = cfg.rewrite_settings()
    texts, labels, num_labels = owner_sentences(cfg, partition_id=partition_id, data_path=data_path)
    rewriter = rewriter_for(settings, rewriter_corpus(cfg), progress=False, path=cfg.rewrite.rewriter)
    if expected is not None and rewriter_digest(rewriter) != expected:
        raise ValueError("this node's rewriter differs from the server's (rewrite.rewriter or its cache): "
                         "refusing to rewrite")
    fixed = cfg.privacy.seed
    rng, _ = secure_generator(fixed)
    result = rewrite_cached(texts, labels, num_labels, rewriter, settings, rng, cache_dir=cache_root() / "rewrites",
                            replicate=cfg.rewrite.replicate, fixed_seed=fixed)
    record = ConfigRecord({"texts": result.texts})
    if result.labels is not None:
        record["labels"] = result.labels
    return record
