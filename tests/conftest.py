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


# The end-to-end tier runs on 2 xdist workers (`make test-e2e`: -n 2 --dist loadgroup), as two fixed groups:
# the tests that start Flower processes (SuperLinks, SuperNodes, `flwr run`: they wait on Flower's fixed
# sleeps far more than they compute, and check that no process of theirs is left) run one after the other on
# one worker; everything else (Ray simulations and clusters one at a time, the in-process audit) on the
# other. No two tests that start processes of one kind run at once: ports, process checks and Ray's
# session directory stay as in a one-process run.
FLOWER_PROCESS_MODULES = frozenset({"test_federation_processes", "test_flwr_run"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("e2e") is not None:
            module = item.module.__name__.rpartition(".")[2] if item.module else ""
            group = "flower-processes" if module in FLOWER_PROCESS_MODULES else "in-process-and-ray"
            item.add_marker(pytest.mark.xdist_group(group))
