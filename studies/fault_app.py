"""A study ClientApp with injected faults, for the fault-tolerance tests (tests/test_federation_processes.py):
the project's ClientApp (client.app.make_client_app) with `fault_mod` mounted inside `uedp_mod`, so that the
server's probe is still answered by the client mod and every training message meets the fault. No real run
uses it: `runtime.federation.Federation(client_app=FAULT_APP)` submits it in place of the project's
`client.app:app` (the staged pyproject's [tool.flwr.app.components] clientapp).

Set per node with node config `fault`: "raise" (the train or query function raises: an error reply, naming
the exception's type only) or "hang:SECONDS" (it sleeps, past the round time-out: a missing reply). Empty or
absent: nothing. Either way the server treats the user as a zero contribution under the fixed denominator,
so the privacy accounting is unchanged.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from flwr.app import Context, Message

from client.app import make_client_app
from uedp.errors import ConfigError
from uedp.flower.mod import uedp_mod

FAULT_APP = "studies.fault_app:app"  # what `flwr run` loads (module:attribute)


def inject_fault(fault: str) -> None:
    """Do what node config fault=`fault` says (module docstring); ConfigError naming the entry if it is neither
    "raise" nor "hang:SECONDS" with 0 <= SECONDS < inf ("hang" alone: an hour)."""
    if not fault:
        return
    kind, _, arg = fault.partition(":")
    if fault == "raise":
        raise RuntimeError("injected fault (node config fault='raise')")
    if kind == "hang":
        try:
            seconds = float(arg or 3600)
        except ValueError:
            seconds = math.nan
        if 0 <= seconds < math.inf:
            time.sleep(seconds)
            return
    raise ConfigError(f"node config fault={fault!r}: expected 'raise' or 'hang:SECONDS' (SECONDS >= 0)")


@dataclass(frozen=True)
class FaultMod:
    """The client mod that injects node config `fault` before the train or query function (module docstring)."""

    def __call__(self, msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        inject_fault(str(context.node_config.get("fault", "")))
        return call_next(msg, context)


fault_mod = FaultMod()
app = make_client_app(mods=[uedp_mod, fault_mod])
