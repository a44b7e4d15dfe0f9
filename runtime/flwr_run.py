"""One run of the app submitted to a SuperLink with `flwr run --stream` (runtime/federation.py `Federation.run`):
its run config file, the stream of its log, and the SuperLink's status of the run once the stream has ended.

`flwr run . --stream` ends when the SuperLink marks the run finished, and exits 0 however it finished (Flower
1.42: flwr/cli/run/run.py returns after flwr/cli/log.py's `start_stream`, whose stream the SuperLink ends at
any "finished" status, flwr/superlink/servicer/control/control_handlers.py `_stream_logs`): a SIGKILLed
ServerApp's run is marked "finished:failed" ("No heartbeat received from the task") once its heartbeat
expires, and the stream then ends with status 0. So the run's status is asked of the SuperLink after the
stream ends (`flwr ls CONNECTION --run-id N --format json`, the run id from flwr run's "Successfully started
run N"), and a run counts as completed only if it is "finished:completed" (`RunStatus`).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

ROUND_LINE = re.compile(r"\[round\s+(\d+)/(\d+)\]")
# what `flwr run` prints once the SuperLink has accepted the run (Flower 1.42: flwr/cli/run/run.py)
STARTED_RUN = re.compile(r"Successfully started run (\d+)")
# `flwr ls`'s status of a run whose ServerApp returned (status:sub-status, flwr/cli/run_utils.py format_runs;
# the others: finished:failed, finished:stopped, and pending, starting, running before the end)
COMPLETED = "finished:completed"
UNKNOWN = "unknown"  # RunStatus.status when the SuperLink could not be asked, or did not answer
# Federation.run's return value when `flwr run` exited 0 but the run did not complete (or its status is unknown)
RUN_NOT_COMPLETED = 3


@dataclass(frozen=True)
class RunStatus:
    """What the SuperLink says of a run after its log stream ended (`flwr ls --run-id N --format json`)."""

    run_id: int | None
    status: str  # COMPLETED, "finished:failed", "finished:stopped", ... or UNKNOWN
    details: str = ""  # Flower's status details ("No heartbeat received from the task"), or why UNKNOWN

    @property
    def completed(self) -> bool:
        return self.status == COMPLETED

    def __str__(self) -> str:
        return f"run {self.run_id}: {self.status}" + (f" ({self.details})" if self.details else "")


def parse_run_status(stdout: str, run_id: int) -> RunStatus:
    """Run `run_id`'s status from the output of `flwr ls ... --run-id N --format json` (Flower 1.42:
    flwr/cli/ls.py `_to_json`, {"success": true, "runs": [{"run-id": "N", "status": ..., "status-details": ...}]};
    on an error {"success": false, "error-message": ...}, flwr/supercore/logger.py `print_json_error`, often
    with exit status 0). ValueError if it holds no status of that run."""
    start = stdout.find("{")
    if start < 0:
        raise ValueError(f"no JSON in flwr ls's output: {stdout[-500:]!r}")
    doc, _ = json.JSONDecoder().raw_decode(stdout[start:])
    if not isinstance(doc, dict) or doc.get("success") is not True:
        why = doc.get("error-message") if isinstance(doc, dict) else doc
        raise ValueError(f"flwr ls failed: {str(why).strip()[-500:]}")
    runs = [r for r in doc.get("runs") or [] if isinstance(r, dict) and str(r.get("run-id")) == str(run_id)]
    if len(runs) != 1 or not isinstance(runs[0].get("status"), str):
        raise ValueError(f"flwr ls listed no status of run {run_id}: {json.dumps(doc)[:500]}")
    details = str(runs[0].get("status-details") or "")
    return RunStatus(run_id, runs[0]["status"], "" if details == "N/A" else details)


def ask_run_status(flwr: str, connection: str, run_id: int, *, cwd: Path, env: Mapping[str, str],
                   timeout: float = 60.0, tries: int = 3) -> RunStatus:
    """The SuperLink's status of run `run_id`: `FLWR ls CONNECTION --run-id N --format json` (asked up to
    `tries` times, a second apart, while it fails); status UNKNOWN, with why, if it never answers."""
    argv = [flwr, "ls", connection, "--run-id", str(run_id), "--format", "json"]
    why = ""
    for attempt in range(tries):
        if attempt:
            time.sleep(1.0)
        try:
            proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            why = f"flwr ls --run-id {run_id} timed out after {timeout:.0f} s"
            continue
        try:
            return parse_run_status(proc.stdout, run_id)
        except ValueError as exc:
            why = f"flwr ls --run-id {run_id} exited {proc.returncode}: {exc} {proc.stderr.strip()[-500:]}".strip()
    return RunStatus(run_id, UNKNOWN, why)


def write_run_config(path: Path, overrides: Mapping[str, Any], root: Path) -> Path:
    """Write `overrides` as the TOML run config file that `flwr run --run-config` reads, each key under the
    project's namespace as the app at `root` lists it (uedp.privacy.q_u), None and "auto" as their numbers
    (uedp.config_values.SENTINELS: TOML has no null); returns `path`."""
    from uedp.config import NAMESPACE
    from uedp.config_values import to_wire

    path.write_text("".join(f"{namespaced(k, root)} = {toml_value(to_wire(k.removeprefix(f'{NAMESPACE}.'), v))}\n"
                            for k, v in overrides.items()))
    return path


def namespaced(key: str, root: Path) -> str:
    """A RunConfig key ("privacy.q_u") as the app at `root` lists it in its run config: under the project's
    namespace ("uedp.privacy.q_u"), unless that app's pyproject.toml lists its keys without one (the code of
    an earlier revision, which a benchmark runs side by side: studies/scaling.py --baseline-rev)."""
    import tomllib

    from uedp.config import NAMESPACE

    if key.startswith(f"{NAMESPACE}."):
        return key
    project = root / "pyproject.toml"
    listed = (tomllib.loads(project.read_text()).get("tool", {}).get("flwr", {}).get("app", {}).get("config", {})
              if project.is_file() else {NAMESPACE: {}})
    return f"{NAMESPACE}.{key}" if NAMESPACE in listed else key


def toml_value(v: Any) -> str:
    """A run config value (str, int, float or bool) as TOML."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    raise TypeError(f"run config values are str, int, float or bool, got {v!r}")


def follow_stream(lines: IO[str], log: IO[str], *, on_round: Callable[[int], None] | None = None,
                  echo: Callable[[str], None] | None = None) -> int | None:
    """Read `flwr run --stream`'s output to its end: each line goes to `log` and to `echo` (default: printed),
    `on_round` is called with each round number the ServerApp logs; returns the run id flwr printed (None if
    it printed none)."""
    run_id: int | None = None
    for line in lines:
        log.write(line)
        log.flush()
        if echo is None:
            print(line, end="", flush=True)
        else:
            echo(line.rstrip("\n"))
        m = ROUND_LINE.search(line)
        if m and on_round is not None:
            on_round(int(m.group(1)))
        if run_id is None and (started := STARTED_RUN.search(line)):
            run_id = int(started.group(1))
    return run_id


def report_status(status: RunStatus, log: IO[str], echo: Callable[[str], None] | None = None) -> None:
    """Write the SuperLink's status of a run whose `flwr run` exited 0 to `log`, and, unless the run
    completed, a line saying it failed to `echo` (default: printed) too."""
    line = f"flwr run exited 0; the SuperLink's status of {status}"
    if not status.completed:
        line = f"FAILED: {line}, not {COMPLETED}"
    log.write(line + "\n")
    if not status.completed:
        if echo is None:
            print(line, flush=True)
        else:
            echo(line)
