"""uedp's accounting leaves the root logger alone: dp-accounting's RDP code logs through absl, whose `log`
calls `logging.basicConfig()` when the root logger has no handler; then every Flower line (the "flwr" logger
propagates to root) would print twice. uedp routes those messages to its own logger at DEBUG instead."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from absl import logging as absl_logging
from dp_accounting.rdp import rdp_privacy_accountant

from uedp.privacy import accounting

ROOT = Path(__file__).resolve().parent.parent

# z = 0.6 at q = 0.75 makes dp-accounting exclude fractional orders with a warning (checked below).
_SCRIPT = """
import logging, sys
from flwr.common.logger import log
from uedp.privacy import accounting as acc

hits = []
class Count(logging.Handler):
    def emit(self, record):
        hits.append(record.getMessage())
routed = logging.getLogger("uedp.privacy.composition")
routed.addHandler(Count())
routed.setLevel(logging.DEBUG)

log(logging.INFO, "line one")
m = acc.mechanism("uedp", z=0.6, q_u=0.5, q_e=0.5, q_s=0.5, m_max=4, k_cap=1)
eps = acc.epsilons_of([(m, 3)], delta=1e-3, num_users=4)
log(logging.INFO, "line two")
print(len(logging.root.handlers), sum("failed to converge" in h for h in hits), eps.eps_rdp_bound)
"""


def test_flower_lines_print_once_after_eps_rdp_bound():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300, check=True)
    root_handlers, routed, eps_rdp = done.stdout.split()
    lines = done.stderr.splitlines()
    assert sum("line one" in line for line in lines) == 1
    assert sum("line two" in line for line in lines) == 1, done.stderr
    assert int(root_handlers) == 0
    assert int(routed) > 0, "the warning path was not hit: the test no longer exercises absl"
    assert float(eps_rdp) > 0


def test_rdp_messages_reach_uedps_logger_and_the_module_is_restored(caplog):
    with caplog.at_level(logging.DEBUG, logger="uedp.privacy.composition"):
        # a z no other test uses, so the per-round RDP curve is not cached yet
        m = accounting.mechanism("uedp", z=0.6125, q_u=0.5, q_e=0.5, q_s=0.5, m_max=4, k_cap=1)
        accounting.rdp_epsilon_of([(m, 2)], "uedp", delta=1e-3, num_users=4)
    routed = [r for r in caplog.records if r.name == "uedp.privacy.composition"]
    assert routed and all(r.levelno == logging.DEBUG for r in routed)
    assert all(r.getMessage().startswith("dp-accounting RDP: ") for r in routed)
    assert rdp_privacy_accountant.logging is absl_logging
