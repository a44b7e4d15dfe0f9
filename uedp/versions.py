"""Installed package versions, for the identities that key caches and the provenance a run records."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version(name: str) -> str:
    """The installed version of distribution `name`, or "missing" when it is not installed."""
    try:
        return version(name)
    except PackageNotFoundError:
        return "missing"
