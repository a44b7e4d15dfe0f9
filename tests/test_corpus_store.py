"""CorpusBuilder validation, the Parquet store (per-user reads) and the materialize cache."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from uedp.data import CorpusBuilder, GoldSpan, load_corpus_dir, materialize, read_user_rows, read_users, save_corpus
from uedp.data.store import ROW_GROUP_SIZE
from uedp.errors import CorpusError


def _corpus(n_users: int = 3, per_user: int = 4):
    b = CorpusBuilder("toy", has_gold=True)
    for u in range(n_users):
        for i in range(per_user):
            b.add(f"u{u}", f"Alice met user {u} sentence {i}.", gold=[GoldSpan(0, 5, "PERSON")], label=u % 2)
    return b.build(seed=1, label_names=["a", "b"])


def test_builder_sorts_by_user_and_numbers_sids():
    b = CorpusBuilder("toy")
    b.add("zed", "last")
    b.add("amy", "first")
    b.add("zed", "last two")
    c = b.build()
    assert c.table.column("user").to_pylist() == ["amy", "zed", "zed"]
    assert c.table.column("sid").to_pylist() == [0, 1, 2]
    assert c.table.column("text").to_pylist() == ["first", "last", "last two"]  # order kept within a user


def test_builder_counts_dropped_users_and_rejects_empty():
    b = CorpusBuilder("toy")
    b.add_user("ghost")
    b.add("amy", "hello")
    assert b.build().meta["dropped_users"] == 1
    empty = CorpusBuilder("toy", source="x.jsonl")
    empty.add_user("ghost")
    with pytest.raises(CorpusError, match="x.jsonl.*empty"):
        empty.build()


def test_builder_rejects_bad_spans_splits_and_labels():
    b = CorpusBuilder("toy", source="f.jsonl")
    with pytest.raises(CorpusError, match="f.jsonl \\(line 3\\).*outside"):
        b.add("u", "short", gold=[GoldSpan(2, 9, "PERSON")], where="line 3")
    with pytest.raises(CorpusError, match="split"):
        b.add("u", "x", split="training")
    b.add("u", "x", label=5)
    with pytest.raises(CorpusError, match="label 5"):
        b.build(label_names=["a", "b"])


def test_split_fractions_and_determinism():
    b = CorpusBuilder("toy")
    for i in range(4000):
        b.add(f"u{i % 40}", f"s{i}")
    c1, c2 = b.build(seed=3), b.build(seed=3)
    assert c1.fingerprint() == c2.fingerprint()
    assert b.build(seed=4).fingerprint() != c1.fingerprint()
    n = {s: c1.split(s).num_rows for s in ("train", "valid", "test")}
    assert abs(n["train"] / 4000 - 0.8) < 0.03 and abs(n["test"] / 4000 - 0.1) < 0.02


def test_store_round_trip_and_user_reads(tmp_path):
    c = _corpus(n_users=3)
    d = save_corpus(c, tmp_path / "toy")
    back = load_corpus_dir(d)
    assert back.table.equals(c.table) and back.label_names == ["a", "b"] and back.has_gold
    assert read_users(d) == ["u0", "u1", "u2"]
    rows = read_user_rows(d, "u1")
    assert set(rows.column("user").to_pylist()) == {"u1"} and rows.num_rows == 4
    assert rows.column("gold").to_pylist()[0] == [{"start": 0, "end": 5, "category": "PERSON"}]
    train = read_user_rows(d, "u1", split="train")
    assert set(train.column("split").to_pylist()) <= {"train"}


def test_user_read_touches_few_row_groups(tmp_path):
    """Users are contiguous: a user's rows lie in at most two row groups of the file."""
    c = _corpus(n_users=50, per_user=200)
    d = save_corpus(c, tmp_path / "big")
    meta = pq.ParquetFile(d / "sentences.parquet").metadata
    assert meta.num_row_groups == -(-c.num_sentences // ROW_GROUP_SIZE)
    users_col = meta.schema.names.index("user")
    stats = [meta.row_group(g).column(users_col).statistics for g in range(meta.num_row_groups)]
    hits = [st for st in stats if st.min <= "u17" <= st.max]
    assert 1 <= len(hits) <= 2


def test_materialize_caches(tmp_path):
    d1, c1 = materialize("synthetic", cache_dir=tmp_path, num_users=4, min_sentences=20, max_sentences=25)
    d2, c2 = materialize("synthetic", cache_dir=tmp_path, num_users=4, min_sentences=20, max_sentences=25)
    assert d1 == d2 and c1.fingerprint() == c2.fingerprint()
    d3, _ = materialize("synthetic", cache_dir=tmp_path, num_users=5, min_sentences=20, max_sentences=25)
    assert d3 != d1


def test_require_labels():
    b = CorpusBuilder("toy")
    b.add("u", "x")
    with pytest.raises(CorpusError, match="no labels"):
        b.build().require_labels()


def test_fingerprint_survives_the_parquet_round_trip(tmp_path):
    """Caches (annotations, tokenizers) are keyed by the fingerprint: a corpus read back from disk (other
    chunking) must hit them."""
    c = _corpus(n_users=40, per_user=120)  # > one row group
    back = load_corpus_dir(save_corpus(c, tmp_path / "fp"))
    assert back.table.column("text").num_chunks > 1
    assert back.fingerprint() == c.fingerprint()


@pytest.mark.parametrize("overwrite", [False, True])
def test_parallel_writers_of_one_corpus_directory_do_not_collide(tmp_path, overwrite):
    """Parallel sweep jobs fill one cache: writers racing on one directory all succeed, the result is a
    complete corpus, and no temporary directory is left behind (a shared '.tmp' name once made one fail)."""
    from concurrent.futures import ThreadPoolExecutor

    c = _corpus(n_users=20, per_user=30)
    target = tmp_path / "shared"
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda _: save_corpus(c, target, overwrite=overwrite), range(16)))
    assert results == [target] * 16
    assert load_corpus_dir(target).table.equals(c.table)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared"]
