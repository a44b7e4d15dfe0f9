"""Federated corpora: users -> sentences, on disk as Parquet (see corpus.py and store.py)."""

from uedp.data.corpus import SCHEMA, SPLITS, Corpus, CorpusBuilder, GoldSpan
from uedp.data.loaders import LOADERS, DatasetFacts, dataset_facts, dataset_names, load_corpus, materialize
from uedp.data.store import load_corpus_dir, read_user_rows, read_users, save_corpus

__all__ = [
    "SCHEMA", "SPLITS", "Corpus", "CorpusBuilder", "GoldSpan", "LOADERS", "DatasetFacts", "dataset_facts",
    "dataset_names", "load_corpus",
    "materialize", "load_corpus_dir", "read_user_rows", "read_users", "save_corpus",
]
