"""The simulation runner silences exactly Flower's run_simulation deprecation notice, nothing else."""

from __future__ import annotations

import logging

from flwr.common.logger import warn_deprecated_feature

from runtime.simulate import _DropRunSimulationDeprecation, _quiet_libraries


def test_only_the_run_simulation_notice_is_dropped(caplog):
    _quiet_libraries()
    _quiet_libraries()  # idempotent: one filter
    logger = logging.getLogger("flwr")
    assert sum(isinstance(f, _DropRunSimulationDeprecation) for f in logger.filters) == 1
    with caplog.at_level(logging.WARNING, logger="flwr"):
        logger.propagate, before = True, logger.propagate
        try:
            warn_deprecated_feature("The `run_simulation` function is deprecated and will be removed")
            warn_deprecated_feature("Something else is deprecated")
            logger.warning("an ordinary warning")
        finally:
            logger.propagate = before
    messages = [r.getMessage() for r in caplog.records]
    assert not any("run_simulation" in m for m in messages)
    assert any("Something else is deprecated" in m for m in messages)
    assert "an ordinary warning" in messages
