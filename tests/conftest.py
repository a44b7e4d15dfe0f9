"""Test-wide settings: no hub access, and a private cache directory per test session."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["UEDP_CACHE_DIR"] = str(tmp_path_factory.mktemp("uedp-cache"))


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module's tests (as the ClientApp and the in-process runner: tiny models, where
    two threads only contend); restored after the module."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

