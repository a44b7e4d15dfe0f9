"""Name -> factory registries, so that components are chosen by name from config.

    DETECTORS = Registry("detector")

    @DETECTORS.register("spacy")
    def spacy_detector(*, model: str | None = None, batch_size: int = 256, n_process: int = 1) -> Detector: ...

    DETECTORS.create("spacy", batch_size=64)

Factories take keyword-only arguments; a misspelt option raises ConfigError naming the component
(no **kwargs swallows typos). The corpus loaders' registry (uedp.data.loaders.DatasetRegistry) also
requires each loader's facts at registration.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from uedp.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., T]] = {}
        self._options_of: dict[str, Callable[..., Any]] = {}

    def register(
        self, name: str, *, options_of: Callable[..., Any] | None = None
    ) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """Register a factory. A factory that forwards `**options` to a builder names it in `options_of`:
        the builder's keyword parameters are then the accepted options (one list, one set of defaults)."""

        def deco(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._factories:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._factories[name] = factory
            if options_of is not None:
                self._options_of[name] = options_of
            return factory

        return deco

    def names(self) -> list[str]:
        return sorted(self._factories)

    def get(self, name: str) -> Callable[..., T]:
        try:
            return self._factories[name]
        except KeyError:
            raise ConfigError(
                f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}"
            ) from None

    def create(self, name: str, /, **params: Any) -> T:
        factory = self.get(name)
        accepted = dict(inspect.signature(factory).parameters)
        if name in self._options_of:
            accepted = {**inspect.signature(self._options_of[name]).parameters, **accepted}
            accepted = {k: p for k, p in accepted.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
            unknown = sorted(set(params) - set(accepted))
            if unknown:
                raise ConfigError(
                    f"{self.kind} {name!r} has no option(s) {', '.join(unknown)}; "
                    f"it accepts: {', '.join(accepted) or 'none'}"
                )
        return factory(**params)
