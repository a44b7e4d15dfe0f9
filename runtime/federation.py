"""Real separate Flower processes on loopback: one flower-superlink, N flower-supernodes (one per user, each
with its own port and `partition-id`), the app submitted with `flwr run`, and every process stopped by
process id when the run ends, fails or is interrupted.

    python -m experiments.federation --nodes 3 [--tls | --auth] [--out outputs/federation] \\
        [-c federation.rounds=2 -c privacy.target_epsilon=4 ...] [--kill-node-after-round 1]

`-c KEY=VALUE` overrides the run config (RunConfig's keys, group.option, written under the project's namespace
as [tool.flwr.app.config] in pyproject.toml lists them: uedp.group.option; values are TOML, so strings need
quotes: -c 'dataset.options="{\\"num_users\\": 3}"'). `federation.num_nodes` is set to
--nodes, so node i trains as the corpus's i-th user. `--tls` makes a self-signed CA and a server certificate
for 127.0.0.1 (runtime/tls.py) and runs every link over TLS; without it the processes run with --insecure,
which is only for loopback. `--auth` (implies --tls) admits only invited SuperNodes: one OpenSSH ECDSA key
per node (OUT/flwr-home/keys/), the SuperLink started with --enable-supernode-auth, every public key
registered with `flwr supernode register` before the nodes start, each node started with
--auth-supernode-private-key; registrations live in the SuperLink's --database file, so they survive a
restart of the SuperLink; the run's place map (federation.places) is then the nodes' registered keys, in
corpus and owners mode. Without --auth a corpus-mode run maps places by sorted node id, which the component
accepts on real processes only with the opt-in federation.node_order_places = true, set here: such a run is
labelled not private. `--kill-node-after-round R` SIGKILLs the last SuperNode once round R is logged
(a data owner disappearing mid-run). Logs of every process are in OUT/logs/ (a restarted process appends to
its log).

Faults (studies/faults.py): `kill(name)` SIGKILLs a process with everything it started, `kill_serverapp()`
the ServerApp alone, `restart_superlink()` and `restart_node(i)` start them again. Flower 1.42's SuperLink
starts its SuperExec (which starts each ServerApp) in a session of its own, outside the SuperLink's process
group: `kill` and `stop` read a process's descendants first and stop them too, or a ServerApp outlives its
SuperLink (measured before this was done: a flwr-serverapp, re-parented to init, still ran seconds after its
SuperLink was SIGKILLed and after `stop()` had returned; Flower's own parent-process watch ends it only
later). Under auth a SIGKILLed SuperNode stays "online" in the SuperLink for up to 2 x 30 s (Flower's
heartbeat patience), and until then a restarted one is refused ("[code: 2004] Failed to activate SuperNode",
exit 305): `restart_node` starts it again until it is activated.

`Federation.run` submits the app with `flwr run --stream` and asks the SuperLink how the run ended
(runtime/flwr_run.py: `flwr run` exits 0 also when the ServerApp failed or was killed); what it submits is a
copy of the app's source, made once per federation (runtime/app_source.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from runtime.app_source import stage_app_source
from runtime.flwr_run import (
    RUN_NOT_COMPLETED,
    UNKNOWN,
    RunStatus,
    ask_run_status,
    follow_stream,
    report_status,
    write_run_config,
)
from runtime.processes import command_line, descendants, kill_all, running
from runtime.tls import NodeKey
from uedp.config import DataSource
from uedp.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONNECTION = "uedp-procs"
TASK_POLL_ENV = "FLWR_SUPEREXEC_TASK_POLL_INTERVAL"  # Flower 1.42: 0.01..60 s, default 1.0
TASK_POLL = 0.2  # measured: docs/figures/overhead.md (python -m experiments.scaling overhead)
ACTIVATED = "SuperNode ID:"  # what flower-supernode logs once the SuperLink has activated it
REFUSED_ACTIVATION = "[code: 2004]"  # ... and what it logs when the SuperLink refuses to (then it exits)
SERVERAPP = "flwr-serverapp"  # the ServerApp's executable: one process per run
SLEEP_CAP = 0.1  # runtime/supernode_launcher.py --sleep-cap (1 node: 5.4 -> 2.5-3.0 s a round)
TELEMETRY_OFF = {"FLWR_TELEMETRY_ENABLED": "0"}  # every process started here (Flower reads it at import)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def executable(name: str, *, install: str = "install flwr") -> str:
    """A command-line tool from this interpreter's environment first (CI does not activate the venv)."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found next to {sys.executable} or on PATH; {install}")
    return found


@dataclass
class Federation:
    """A SuperLink and `nodes` SuperNodes as child processes (each in its own process group, so the
    ServerApp and ClientApp processes they spawn are stopped with them)."""

    nodes: int
    home: Path
    tls: bool = False
    node_config: dict[int, dict[str, str]] = field(default_factory=dict)  # extra node config per partition
    # extra environment per node (key i) and for the SuperLink with its ServerApp (key "server"): e.g. each its
    # own UEDP_CACHE_DIR, so that on loopback every owner and the server have separate disks
    env: dict[int | str, dict[str, str]] = field(default_factory=dict)
    # seconds between a SuperNode's SuperExec checks for a task (Flower's default 1.0 when None)
    task_poll: float | None = TASK_POLL
    # OMP_NUM_THREADS of each node's processes (the ClientApp trains with one thread; several fresh processes
    # share the cores); None: the library's default
    threads: int | None = 1
    root: Path = ROOT  # the app's source tree: `flwr run` submits it, the processes import from it
    auth: bool = False  # SuperNode authentication: only registered keys join (implies tls)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    port: int = 0
    keys: dict[int, NodeKey] = field(default_factory=dict)  # node i's key pair (auth)
    stage_app: bool = True  # `flwr run` a copy of the app's source (runtime/app_source.py), not `root`
    # the ClientApp the staged copy names ("module:attribute", e.g. studies.fault_app.FAULT_APP, the
    # fault-injecting app of the fault tests); "": the app's own (pyproject.toml's clientapp). Needs stage_app.
    client_app: str = ""
    # runtime/supernode_launcher.py: the SuperNode's fixed sleeps bounded by this many seconds (None: Flower's
    # own 3 s and 0.5 s), and each ClientApp forked from a warm fork server (warm); studies/scaling.py measures
    # them (python -m experiments.scaling overhead)
    sleep_cap: float | None = SLEEP_CAP
    warm: bool = True
    # the SuperLink's state in a database file (HOME/state.db), so that runs and SuperNode registrations survive
    # a restart of the SuperLink; False: Flower's in-memory state, whose absence of SQLite commits saved ~0.75 s
    # a round in one measured run (1 node: 2.5 -> 1.75 s), not the default: a SuperLink restarted without auth
    # then loses the run (tests/test_federation_processes.py::test_server_killed_mid_run_and_resumed failed)
    durable_state: bool = True
    _logs: list[IO[bytes]] = field(default_factory=list)
    _log_start: dict[str, int] = field(default_factory=dict)  # where each process's current start begins in its log
    _app_src: Path | None = None
    # the SuperLink's status of the run the last `run` submitted, asked when its `flwr run` exited 0 (None: not
    # asked, `flwr run` failed itself or was killed)
    last_run: RunStatus | None = None

    def __post_init__(self) -> None:
        if self.auth:
            self.tls = True  # flower-superlink refuses --enable-supernode-auth with --insecure
        if self.client_app and not self.stage_app:
            raise ConfigError("Federation client_app names another ClientApp for the staged copy: it needs "
                              "stage_app = True")

    # -- start / stop -------------------------------------------------------------------------------------
    def _env(self, who: int | str | None = None) -> dict[str, str]:
        poll = {TASK_POLL_ENV: str(self.task_poll)} if self.task_poll and isinstance(who, int) else {}
        if self.threads and isinstance(who, int):
            poll["OMP_NUM_THREADS"] = str(self.threads)
        return {**os.environ, **TELEMETRY_OFF, "FLWR_HOME": str(self.home),
                "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
                "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
                "PYTHONPATH": f"{self.root}:{os.environ.get('PYTHONPATH', '')}", "TOKENIZERS_PARALLELISM": "false",
                **poll, **self.env.get(who, {})}  # type: ignore[arg-type]

    def _spawn(self, name: str, argv: list[str], who: int | str | None = None) -> None:
        path = self.home / "logs" / f"{name}.log"
        self._log_start[name] = path.stat().st_size if path.exists() else 0
        log = path.open("ab")  # a restart appends
        self._logs.append(log)
        self.procs[name] = subprocess.Popen(argv, cwd=self.root, env=self._env(who), stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def start(self) -> Federation:
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        if self.tls:
            from runtime.tls import make_certificates

            self.certs = make_certificates(self.home / "certs", hosts=("127.0.0.1", "localhost"))
            link_sec = ["--ssl-ca-certfile", str(self.certs.ca), "--ssl-certfile", str(self.certs.cert),
                        "--ssl-keyfile", str(self.certs.key)]
            node_sec = ["--root-certificates", str(self.certs.ca)]
        else:
            link_sec, node_sec = ["--insecure"], ["--insecure"]
        # --host 127.0.0.1 binds the whole SuperLink to loopback: in Flower 1.42 the Fleet, Control (node
        # registration, runs) and Runtime APIs share this one HTTP(S) host:port (--control-api-address is
        # deprecated and ignored). --database keeps its state, SuperNode registrations included, on disk.
        durable = self.durable_state or self.auth
        self._link_argv = [executable("flower-superlink"), *link_sec, "--host", "127.0.0.1", "--port", str(self.port),
                           "--disable-runtime-dependency-installation",
                           *(["--database", str(self.home / "state.db")] if durable else [])]
        if self.auth:
            self._link_argv.append("--enable-supernode-auth")
        self._spawn("superlink", self._link_argv, "server")
        self.write_connection()
        self.wait_for_superlink()  # or `flwr run` may find no SuperLink yet
        if self.auth:
            from runtime.tls import make_node_keys

            made = make_node_keys(self.home / "keys", [f"node-{i}" for i in range(self.nodes)])
            self.keys = dict(enumerate(made))
            self.register(*self.keys.values())  # before any node starts
        for i in range(self.nodes):
            self.start_node(i, node_sec)
        return self

    def start_node(self, i: int, node_sec: list[str] | None = None, *, name: str | None = None,
                   key: NodeKey | None = None, extra_args: Sequence[str] = ()) -> None:
        """Start SuperNode `name` (default supernode-i) with node config partition-id=i, num-partitions and
        node_config[i]; under auth it signs with `key` (default: node i's registered key, if any)."""
        if node_sec is None:
            node_sec = ["--root-certificates", str(self.certs.ca)] if self.tls else ["--insecure"]
        key = key or self.keys.get(i)
        auth = ["--auth-supernode-private-key", str(key.private)] if key is not None else []
        cfg = {"partition-id": str(i), "num-partitions": str(self.nodes), **self.node_config.get(i, {})}
        node_config = " ".join(f"{k}={v if v.lstrip('-').isdigit() else json.dumps(v)}" for k, v in cfg.items())
        self._spawn(name or f"supernode-{i}", [*self.supernode_command(), *node_sec, *auth, "--superlink",
                                               f"127.0.0.1:{self.port}", "--port", str(free_port()),
                                               "--node-config", node_config, *extra_args], i)

    def supernode_command(self) -> list[str]:
        """`flower-supernode`, or (sleep_cap / warm) the launcher with its settings, then the node's arguments."""
        if not self.sleep_cap and not self.warm:
            return [executable("flower-supernode")]
        return [sys.executable, "-m", "runtime.supernode_launcher", "--sleep-cap", str(self.sleep_cap or 0),
                *(["--warm-clientapps"] if self.warm else []), "--"]

    def wait_for_superlink(self, timeout: float = 60.0) -> None:
        """Until the SuperLink accepts connections (uvicorn listens once its start-up is done)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.procs["superlink"].poll() is not None:
                raise RuntimeError(f"flower-superlink exited ({self.procs['superlink'].returncode}); "
                                   f"see {self.home / 'logs' / 'superlink.log'}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"SuperLink not listening on 127.0.0.1:{self.port} after {timeout:.0f} s")
            time.sleep(0.1)

    def register(self, *keys: NodeKey, timeout: float = 120.0) -> None:
        """`flwr supernode register KEY.pub uedp-procs` for each key (in parallel), through the Control API;
        raises if any fails. Logs: logs/register-NAME.log."""
        procs: dict[str, subprocess.Popen] = {}
        try:
            for k in keys:
                log = (self.home / "logs" / f"register-{k.name}.log").open("wb")
                self._logs.append(log)
                procs[k.name] = subprocess.Popen(
                    [executable("flwr"), "supernode", "register", str(k.public), CONNECTION, "--name", k.name],
                    cwd=self.root, env=self._env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.monotonic() + timeout
            rcs = {}
            for name, proc in procs.items():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    rcs[name] = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        finally:  # a time-out or an interrupt: stop what is still running
            for proc in procs.values():
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        failed = [f"{name} (exit {rcs.get(name, 'timed out')}): "
                  f"{(self.home / 'logs' / f'register-{name}.log').read_text()[-800:]}"
                  for name in procs if rcs.get(name) != 0]
        if failed:
            raise RuntimeError("flwr supernode register failed for " + "; ".join(failed))

    def restart_superlink(self, *, wait: bool = True) -> None:
        """Start the SuperLink again on the same port and database (after it was killed; a running one is
        killed first), by default until it listens; the SuperNodes reconnect, and under auth their
        registrations are still there (kept in the --database file)."""
        self.kill("superlink")
        self._spawn("superlink", self._link_argv, "server")
        if wait:
            self.wait_for_superlink()

    def log_since_start(self, name: str) -> str:
        """What process `name` logged since it was last started."""
        with (self.home / "logs" / f"{name}.log").open("rb") as f:
            f.seek(self._log_start.get(name, 0))
            return f.read().decode("utf-8", errors="replace")

    def activated(self, i: int) -> bool:
        """Whether SuperNode i (as last started) has been activated by the SuperLink."""
        return ACTIVATED in self.log_since_start(f"supernode-{i}")

    def wait_for_nodes(self, timeout: float = 120.0, nodes: Sequence[int] | None = None) -> float:
        """Until SuperNodes `nodes` (default: all) are activated; returns the seconds waited. Raises if one
        exits or the time-out passes."""
        t0 = time.monotonic()
        waiting = set(range(self.nodes) if nodes is None else nodes)
        while waiting:
            waiting = {i for i in waiting if not self.activated(i)}
            gone = [i for i in waiting if self.procs[f"supernode-{i}"].poll() is not None]
            if gone:
                raise RuntimeError(f"SuperNode(s) {gone} exited before the SuperLink activated them; see "
                                   f"{self.home / 'logs'}/supernode-{gone[0]}.log")
            if waiting and time.monotonic() - t0 > timeout:
                raise TimeoutError(f"SuperNode(s) {sorted(waiting)} not activated after {timeout:.0f} s")
            if waiting:
                time.sleep(0.25)
        return time.monotonic() - t0

    def restart_node(self, i: int, *, timeout: float = 180.0, retry_every: float = 5.0) -> int:
        """Start SuperNode i again (a running one is killed first) and wait until the SuperLink has activated
        it; returns the number of starts. A SIGKILLed node's key stays "online" in the SuperLink until its
        heartbeat expires (up to 2 x 30 s in Flower 1.42), and until then every start is refused: wait
        `retry_every` seconds and start it again, until `timeout`."""
        name = f"supernode-{i}"
        deadline = time.monotonic() + timeout
        starts = 0
        while True:
            self.kill(name)
            self.start_node(i)
            starts += 1
            proc = self.procs[name]
            while not self.activated(i) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.25)
            if self.activated(i):
                return starts
            if proc.poll() is None:
                raise TimeoutError(f"{name} not activated after {timeout:.0f} s ({starts} start(s))")
            if REFUSED_ACTIVATION not in self.log_since_start(name):
                raise RuntimeError(f"{name} exited ({proc.returncode}) on restart: "
                                   f"{self.log_since_start(name)[-1500:]}")
            if time.monotonic() + retry_every > deadline:
                raise TimeoutError(f"{name}: the SuperLink still refused its activation after {starts} starts "
                                   f"in {timeout:.0f} s")
            time.sleep(retry_every)

    def serverapps(self) -> list:
        """The ServerApp processes (flwr-serverapp) under the SuperLink now (children of its SuperExec)."""
        link = self.procs.get("superlink")
        if link is None or link.poll() is not None:
            return []
        return [p for p in descendants(link.pid) if SERVERAPP in command_line(p) and running(p)]

    def kill_serverapp(self, sig: int = signal.SIGKILL) -> list[int]:
        """Kill the ServerApp alone (the SuperLink and its SuperExec stay); returns the pids killed."""
        victims = self.serverapps()
        kill_all(victims, sig)
        return [p.pid for p in victims]

    def write_connection(self) -> None:
        sec = f'root-certificates = "{self.certs.ca}"' if self.tls else "insecure = true"
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
            f'address = "127.0.0.1:{self.port}"\n{sec}\n')

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to process `name`'s process group and to all of its descendants (read first: those in
        other sessions, the SuperLink's SuperExec and ServerApps, are not in the group); wait for them."""
        proc = self.procs.get(name)
        if proc is not None:
            kill_process(proc, sig)

    def stop(self) -> None:
        """Stop every process this federation started (SIGTERM, then SIGKILL after 10 s), by process group,
        and then whatever they started outside their groups (the SuperLink's SuperExec and ServerApp)."""
        below = [p for proc in self.procs.values() if proc.poll() is None for p in descendants(proc.pid)]
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        kill_all(below, signal.SIGTERM, timeout=max(0.5, deadline - time.monotonic()))
        kill_all(below, signal.SIGKILL)
        for log in self._logs:
            log.close()
        self._logs.clear()

    def alive(self) -> list[str]:
        return [name for name, p in self.procs.items() if p.poll() is None]

    def app_source(self) -> Path:
        """The directory `flwr run` submits: `root`, or (stage_app) its copy HOME/app-src, made once (naming
        `client_app` as its ClientApp, if given)."""
        if not self.stage_app:
            return self.root
        if self._app_src is None:
            self._app_src = stage_app_source(self.root, self.home / "app-src", client_app=self.client_app)
        return self._app_src

    # -- running the app ----------------------------------------------------------------------------------
    def places_file(self) -> Path:
        """The public place map of the invited nodes (with --auth): place i is node i's registered key
        (uedp.flower.places), written to HOME/places.txt."""
        from uedp.flower.places import write_places

        if not self.keys:
            raise ConfigError("a place map needs SuperNode authentication (--auth): without it a node's key is "
                              "its own fresh choice at every start")
        order = sorted(self.keys)
        return write_places(self.home / "places.txt", [self.keys[i].public.read_bytes() for i in order],
                            [self.keys[i].name for i in order])

    def with_places(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """The run's place map, unless `overrides` names one (federation.places) or opts out of one
        (federation.node_order_places). Under --auth: the invited nodes' map (place i is node i's registered
        key), in owners and corpus mode. Without --auth there is no map: a private owners-mode run is refused
        by its ServerApp, and a corpus-mode run gets the explicit opt-in federation.node_order_places = true
        (places by sorted node id on real processes: the run says it is not private, uedp.flower.places)."""
        if overrides.get("federation.places") or "federation.node_order_places" in overrides:
            return overrides
        if self.auth:
            return {**overrides, "federation.places": str(self.places_file())}
        if overrides.get("federation.data") != DataSource.OWNERS.value:
            return {**overrides, "federation.node_order_places": True}
        return overrides

    def run(self, overrides: dict[str, Any], *, timeout: float = 900.0, on_round: Callable[[int], None] | None = None,
            echo: Callable[[str], None] | None = None) -> int:
        """`flwr run . --stream` with `overrides` as the run config; returns 0 only if the run completed:
        flwr's exit status when it is not 0, else `RUN_NOT_COMPLETED` unless the SuperLink says the run is
        "finished:completed" (`run_status`; flwr exits 0 also when the ServerApp failed or was killed:
        runtime/flwr_run.py). `self.last_run` keeps the status, and a run that did not complete adds a line
        saying so to the stream. `on_round` is called with each round number the ServerApp logs; each line of
        the stream goes to `echo` (default: printed) and to logs/flwr-run.log."""
        self.last_run = None
        # the project's keys live under its namespace (uedp.privacy.q_u)
        path = write_run_config(self.home / "run-config.toml", self.with_places(overrides), self.root)
        with (self.home / "logs" / "flwr-run.log").open("w") as log:
            app = self.app_source()
            proc = subprocess.Popen([executable("flwr"), "run", "." if app == self.root else str(app), CONNECTION,
                                     "--stream", "--run-config", str(path)],
                                    cwd=self.root, env=self._env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, start_new_session=True)
            self.procs["flwr-run"] = proc
            timer = threading.Timer(timeout, lambda: self.kill("flwr-run"))
            timer.daemon = True  # an interrupted run must not keep the interpreter alive until the time-out
            try:
                timer.start()
                assert proc.stdout is not None
                run_id = follow_stream(proc.stdout, log, on_round=on_round, echo=echo)
                rc = proc.wait()
            finally:
                timer.cancel()
            if rc != 0:  # flwr's own failure (or killed): nothing more to ask
                return rc
            if run_id is None:
                status = RunStatus(None, UNKNOWN, "flwr run exited 0 without printing \"Successfully started run "
                                                  f"N\"; see {self.home / 'logs' / 'flwr-run.log'}")
            else:
                status = self.run_status(run_id)
            self.last_run = status
            report_status(status, log, echo)
            return 0 if status.completed else RUN_NOT_COMPLETED

    def run_status(self, run_id: int, *, timeout: float = 60.0, tries: int = 3) -> RunStatus:
        """The SuperLink's status of run `run_id` (`flwr ls`, runtime/flwr_run.py `ask_run_status`). Asking
        Flower, not reading the ServerApp's own files (summary.json), also catches a run whose files are those
        of an earlier run in the same folder."""
        return ask_run_status(executable("flwr"), CONNECTION, run_id, cwd=self.root, env=self._env(),
                              timeout=timeout, tries=tries)


def kill_process(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Send `sig` to `proc`'s process group (it runs in a session of its own) and to all of its descendants
    (read first: an orphan is re-parented and no longer found), and wait for them."""
    if proc.poll() is None:
        below = descendants(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        kill_all(below, sig)


@contextlib.contextmanager
def federation(nodes: int, home: Path, *, tls: bool = False, auth: bool = False,
               node_config: dict[int, dict[str, str]] | None = None,
               env: dict[int | str, dict[str, str]] | None = None,
               task_poll: float | None = TASK_POLL, threads: int | None = 1,
               root: Path = ROOT, sleep_cap: float | None = SLEEP_CAP, warm: bool = True,
               durable_state: bool = True, client_app: str = "") -> Iterator[Federation]:
    """Start a federation and stop all of its processes on exit, also on an exception or SIGINT/SIGTERM."""
    fed = Federation(nodes=nodes, home=home, tls=tls, auth=auth, node_config=node_config or {}, env=env or {},
                     task_poll=task_poll, threads=threads, root=root, sleep_cap=sleep_cap, warm=warm,
                     durable_state=durable_state, client_app=client_app)
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def interrupted(signum, frame):  # turn SIGTERM into an exception so the finally below runs
        raise KeyboardInterrupt(f"signal {signum}")

    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        for s in previous:
            signal.signal(s, interrupted)
    try:
        yield fed.start()
    finally:
        fed.stop()
        if in_main:
            for s, h in previous.items():
                signal.signal(s, h)


@dataclass(frozen=True)
class Owners:
    """A federation of data owners who keep their own files (federation.data = owners): node i reads only
    its file, and each node and the server get their own UEDP_CACHE_DIR (separate disks on loopback)."""

    files: list[Path]
    server_cache: Path

    @classmethod
    def from_dir(cls, owners_dir: Path, out: Path) -> Owners:
        """The owners of `owners_dir` (uedp/owner_files.py layout: owner-*/data.jsonl)."""
        files = sorted(p.resolve() for p in owners_dir.glob("owner-*/data.jsonl"))
        if not files:
            raise ConfigError(f"--owners {owners_dir}: no owner-*/data.jsonl (make them with "
                              "python -m experiments.owner_files)")
        return cls(files, (out / "server-cache").resolve())

    def node_config(self) -> dict[int, dict[str, str]]:
        return {i: {"data-path": str(f)} for i, f in enumerate(self.files)}

    def env(self) -> dict[int | str, dict[str, str]]:
        return {"server": {"UEDP_CACHE_DIR": str(self.server_cache)},
                **{i: {"UEDP_CACHE_DIR": str(f.parent / "cache")} for i, f in enumerate(self.files)}}

    def overrides(self) -> dict[str, Any]:
        return {"federation.data": DataSource.OWNERS.value, "federation.num_nodes": len(self.files)}
