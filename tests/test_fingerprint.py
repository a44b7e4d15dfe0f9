"""A fixed-seed fingerprint of the project's results, committed before a restructuring of the code
(tests/assets/fingerprint.json) and compared on every test run: a refactor that changes what the code
computes fails here, whatever test it forgot to touch.

What it holds: `uedp epsilon --json` for the main job's defaults and for the BBC-style setting (q_s 1)
(noise multiplier, every epsilon, delta_trunc, m_max); a small in-process run per mechanism (UeDP f_E+,
user-level DP, noiseless FedAvg, privacy.seed 0) with its ledger's per-round epsilons and final
perplexity; the main job's configuration at 2 rounds in process (privacy.seed 0) with its ledger
epsilons and final perplexity. The quick audit's verdicts are compared by tests/test_audit_end_to_end.py
(the e2e tier already runs it).

Regenerate only on purpose (a change that is meant to change results), and say so in the commit:
    UEDP_WRITE_FINGERPRINT=1 .venv/bin/python -m pytest tests/test_fingerprint.py
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from runtime.local_grid import run_local
from tests.helpers import tiny_config
from uedp import cli
from uedp.config import RunConfig

FIXTURE = Path(__file__).parent / "assets" / "fingerprint.json"
EPSILON_COMMANDS = {
    # the main job's defaults (RunConfig: q_u 0.25, q_e 0.2, q_s 0.2, k_cap 1, beta 0.2, 30 rounds, 200 users)
    "main_defaults": ["epsilon", "--q-u", "0.25", "--q-e", "0.2", "--q-s", "0.2", "--target-epsilon", "8",
                      "--k-cap", "1", "--beta", "0.2", "--rounds", "30", "--num-users", "200", "--json"],
    "bbc_qs1": ["epsilon", "--q-u", "0.25", "--q-e", "0.2", "--q-s", "1", "--target-epsilon", "8",
                "--k-cap", "1", "--rounds", "30", "--num-users", "200", "--json"],
}
# The fixture was written on another machine. Accounting is float64 and deterministic up to the FFT
# convolutions' rounding in the PLD code (~1e-12 relative in epsilon across machines): RTOL 1e-9.
RTOL = 1e-9
# A fixed-seed float32 training run: another machine's BLAS may sum in another order (~1e-7 relative each),
# carried through a few local steps and rounds of a tiny model: 1e-4 on the perplexity.
METRIC_RTOL = 1e-4


def _epsilon_output(argv: list[str]) -> dict[str, Any]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli.main(argv) == 0
    return json.loads(buf.getvalue())


def _ledger_fingerprint(out_dir: Path, summary: dict) -> dict[str, Any]:
    ledger = json.loads((out_dir / "ledger.json").read_text())
    rounds = ledger["rounds"]
    keys = ("eps_uedp", "eps_user", "eps_undetected")
    return {
        "rounds": summary["rounds"],
        "method": summary["method"],
        "final_perplexity": summary["final"]["perplexity"],
        "ledger_rounds": [r["round"] for r in rounds],
        "summary_epsilons": {k: summary.get(k) for k in keys},
    }


def _small_runs(tmp: Path) -> dict[str, Any]:
    out = {}
    for strategy in ("uedp", "user_dp", "fedavg"):
        d = tmp / f"small-{strategy}"
        cfg = tiny_config(d, strategy={"name": strategy}, privacy={"seed": 0})
        out[strategy] = _ledger_fingerprint(d, run_local(cfg))
    return out


def _main_short(tmp: Path) -> dict[str, Any]:
    d = tmp / "main-short"
    nested = RunConfig().to_nested()
    nested["privacy"]["seed"] = 0
    nested["federation"].update(rounds=2, eval_every=2, out_dir=str(d))
    return _ledger_fingerprint(d, run_local(RunConfig.from_nested(nested)))


PARTS = {"epsilon": lambda tmp: {k: _epsilon_output(v) for k, v in EPSILON_COMMANDS.items()},
         "small_runs": _small_runs, "main_short": _main_short}


def _compare(got: Any, want: Any, path: str, rtol: float) -> list[str]:
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return [f"{path}: keys {sorted(got) if isinstance(got, dict) else got!r} != {sorted(want)}"]
        return [m for k in want for m in _compare(got[k], want[k], f"{path}.{k}",
                                                  METRIC_RTOL if "perplexity" in k else rtol)]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{path}: {got!r} != {want!r}"]
        return [m for i, (g, w) in enumerate(zip(got, want, strict=True)) for m in _compare(g, w, f"{path}[{i}]", rtol)]
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        # abs_tol 1e-12 for values at 0 (a relative tolerance is meaningless there)
        ok = (math.isinf(want) and got == want) or math.isclose(got, want, rel_tol=rtol, abs_tol=1e-12)
        return [] if ok else [f"{path}: {got!r} != {want!r}"]
    return [] if got == want else [f"{path}: {got!r} != {want!r}"]


def test_compare_finds_a_changed_number():
    want = {"a": {"eps": 1.0, "final_perplexity": 100.0}, "b": [1, 2]}
    assert _compare(want, want, "", RTOL) == []
    changed = {"a": {"eps": 1.0 + 1e-6, "final_perplexity": 100.0}, "b": [1, 2]}
    assert _compare(changed, want, "", RTOL) == [".a.eps: 1.000001 != 1.0"]
    assert _compare({"a": {"eps": 1.0, "final_perplexity": 100.001}, "b": [1, 2]}, want, "", RTOL) == []
    assert _compare({"a": {"eps": 1.0, "final_perplexity": 100.0}, "b": [1, 3]}, want, "", RTOL) == [".b[1]: 3 != 2"]


@pytest.mark.parametrize("part", sorted(PARTS))
def test_results_match_the_committed_fingerprint(part, tmp_path):
    got = json.loads(json.dumps(PARTS[part](tmp_path)))  # as stored: tuples become lists
    stored = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}
    if os.environ.get("UEDP_WRITE_FINGERPRINT") == "1":
        FIXTURE.write_text(json.dumps({**stored, part: got}, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"wrote {part} into {FIXTURE}")
    assert _compare(got, stored[part], part, RTOL) == []
