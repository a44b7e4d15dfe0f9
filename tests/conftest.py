"""Test-wide settings: no hub access, and a private cache directory per test session."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

# The slowest end-to-end modules first (measured with --durations, docs/performance.md "Test-tier times"), the
# rest in collection order: xdist's load scheduling hands tests out in this order as workers free up, so one
# worker runs the quick audit (~800 s beside the other) while the other takes these, and no long test starts
# last (the Ray test, ~100 s, used to be collected last).
LONGEST_FIRST = ("test_audit_end_to_end.py", "test_figures.py", "test_own_corpus.py", "test_faults_e2e.py",
                 "test_federation_processes.py", "test_ray_cluster.py", "test_flwr_run.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(rank)))  # stable: order kept within


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



@pytest.fixture(scope="session")
def uedp_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of this checkout's installed package, built once per session (tests/installed.py)."""
    from tests.installed import build_wheel

    return build_wheel(tmp_path_factory.mktemp("wheel-src"), tmp_path_factory.mktemp("dist"))
