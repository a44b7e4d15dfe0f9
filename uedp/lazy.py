"""Lazy re-exports for a package's `__init__` (PEP 562): a name is imported from its module on first use, so
importing the package loads none of its modules (a node importing the client mod does not load the server's
accounting, a client importing the selection does not load dp-accounting).

    __all__, __getattr__, __dir__ = lazy_exports(__name__, {"uedp.privacy.noise": ("GaussianNoise",), ...})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, tuple[str, ...]]
                 ) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """The package's `__all__`, `__getattr__` and `__dir__`; `exports` maps module -> public names."""
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return sorted(where), __getattr__, __dir__
