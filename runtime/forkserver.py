"""Warm ClientApps: a per-node fork server that has already imported torch, numpy and flwr, and forks one
child per `flwr-clientapp` the node's SuperExec starts (Flower 1.42 runs every message in a fresh process that
pays ~1.5-2 s of imports: flwrlabs/flower#3670).

The SuperNode launcher (runtime/supernode_launcher.py) starts this file as a SCRIPT (not `-m`: nothing of the
app's own packages may be in sys.modules, since Flower loads the app from the FAB's copy,
flwr/supercore/object_ref.py:156-161) and puts a shim named `flwr-clientapp` (runtime/warm_shim.py) first on
the node's PATH. The shim connects to this server's Unix socket and hands over its argv, environment,
working directory and stdin/stdout/stderr (SCM_RIGHTS: the SuperExec may give DEVNULL); the server forks a
child that takes all of them, reseeds every random generator (a forked child would otherwise repeat its
parent's numpy and torch streams, round after round) and runs Flower's own `flwr_clientapp()`. The shim
relays signals to the child and exits with the child's status; if the shim dies, the child is SIGKILLed.

Safety rules it enforces:
- forks only while the server has ONE thread (checked in /proc before every fork); numpy's OpenBLAS would
  start a thread pool at import, so the server sets OPENBLAS_NUM_THREADS=1 unless it is set. If a thread is
  found anyway, the shim is told to run the real `flwr-clientapp` instead (a cold start, never a fork);
- FLWR_TELEMETRY_ENABLED=0 before flwr is imported (Flower reads it at import, supercore/telemetry.py:32);
- only processes of this user connect: the socket lives in a 0700 directory and every peer's uid is checked
  (SO_PEERCRED);
- it watches the SuperNode's process id (as Flower's own start_parent_process_monitor does,
  supercore/app_utils.py:47) and, on Linux, also asks the kernel for SIGTERM when its parent dies
  (PR_SET_PDEATHSIG): a process group does not die with its leader, and `kill PID` or an OOM kill of the node
  alone must not leave the server (or its children: each asks for SIGKILL when the server dies) behind.

    python runtime/forkserver.py --socket PATH --watch-pid PID [--preload numpy,torch,...] [--entry MOD:FN]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import json
import os
import random
import selectors
import shutil
import signal
import socket
import struct
import sys
import time
import traceback
from pathlib import Path

# Imported before the first fork: what every ClientApp of this project needs and that is not the app itself.
PRELOAD = ("numpy", "torch", "flwr.supernode.cli", "flwr.supernode.runtime.run_clientapp", "flwr.clientapp",
           "flwr.serverapp", "flwr.app")
# Wire format (all integers network order): shim -> server: "!I" header length with 3 fds, then the JSON
# header; server -> shim: FORKED + "!i" child pid, or COLD (run the real flwr-clientapp); shim -> server: one
# byte per signal to relay; server -> shim: "!i" exit code (negative: killed by that signal).
# Flower 1.42's SuperNode lists a message before it has pulled its objects from the SuperLink
# (supernode/start_client_internal.py:411-418), so a ClientApp that starts at once asks for objects that are not
# there yet and waits PULL_INITIAL_BACKOFF = 1 s (doubling, capped at 10 s) before asking again; a cold ClientApp
# hid that behind its 2 s of imports. Warm ones start the backoff at `--pull-backoff` s and cap it at
# WARM_PULL_CAP s (their pulls go to their own SuperNode), with no limit on tries: Flower's bound on the total
# wait, max_time 7200 s, stays (its 500 tries at up to 10 s each came to about as long).
PULL_MODULE = "flwr.supercore.inflatable.inflatable_utils"
PULL_FUNCTIONS = ("pull_objects", "pull_and_inflate_object_from_tree")
PULL_DEFAULTS = {"initial_backoff": 1, "backoff_cap": 10, "max_tries_per_object": 500}  # Flower 1.42's
WARM_PULL_CAP = 0.2
ENTRY = "flwr.supernode.cli:flwr_clientapp"  # what each child runs: the `flwr-clientapp` command's function
FORKED, COLD = b"P", b"F"
LENGTH, INT = struct.Struct("!I"), struct.Struct("!i")
MAX_HEADER = 16 << 20
_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int) -> None:
    """Linux: the kernel sends `sig` to this process when the thread that created it exits (a no-op
    elsewhere; the pid watch covers it)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)


def faster_object_pulls(initial: float, cap: float = WARM_PULL_CAP) -> None:
    """Object pulls of this process back off from `initial` to `cap` seconds, tries unlimited (within
    Flower's max_time); a second call changes nothing."""
    module = importlib.import_module(PULL_MODULE)
    for name in PULL_FUNCTIONS:
        defaults = getattr(module, name).__kwdefaults__
        if defaults.get("max_tries_per_object") is None:  # already patched in this process
            continue
        if {k: defaults.get(k) for k in PULL_DEFAULTS} != PULL_DEFAULTS:
            raise RuntimeError(f"{PULL_MODULE}.{name}'s defaults moved: {defaults}")
        defaults.update(initial_backoff=initial, backoff_cap=max(initial, cap), max_tries_per_object=None)


def os_threads() -> int:
    """Threads of this process (every native one, not only Python's); 1 where /proc is missing."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"peer closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def reseed() -> None:
    """Fresh OS entropy for every generator a forked child inherited (Python's `random` is reseeded by
    CPython at fork; numpy's legacy global state and torch's default generator are not)."""
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        torch.manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)


def _peer_uid(conn: socket.socket) -> int | None:
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


class ForkServer:
    def __init__(self, path: Path, watch_pid: int, entry: str = ENTRY) -> None:
        self.path, self.watch_pid, self.entry = path, watch_pid, entry
        self.children: dict[int, socket.socket] = {}  # child pid -> its shim's connection
        self.started: dict[int, float] = {}  # child pid -> time.monotonic() at fork
        self.stopping = False
        self.sel = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(64)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select() through the wakeup fd
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._stop)
        self.sel.register(self.listener, selectors.EVENT_READ, "accept")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")

    def _stop(self, *_: object) -> None:
        self.stopping = True

    def serve(self) -> None:
        try:
            while not self.stopping and alive(self.watch_pid) and os.getppid() == self.watch_pid:
                for key, _ in self.sel.select(timeout=0.2):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        with contextlib.suppress(BlockingIOError):
                            os.read(self.wake_r, 4096)
                    else:
                        self._relay(key.data)
                self._reap()
        finally:
            self._shutdown()

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        fds: list[int] = []
        try:
            conn.settimeout(10)
            if (uid := _peer_uid(conn)) is not None and uid != os.getuid():
                raise PermissionError(f"refused a connection from uid {uid}")
            msg, fds, _, _ = socket.recv_fds(conn, LENGTH.size, 3)
            if len(msg) < LENGTH.size:
                msg += recv_exact(conn, LENGTH.size - len(msg))
            (n,) = LENGTH.unpack(msg)
            if len(fds) != 3 or n > MAX_HEADER:
                raise ValueError(f"bad request: {len(fds)} fds, header of {n} bytes")
            request = json.loads(recv_exact(conn, n))
            if os_threads() != 1:  # never fork a process with another thread: run the ClientApp cold
                print(f"forkserver: {os_threads()} threads, telling the shim to start flwr-clientapp cold",
                      file=sys.stderr, flush=True)
                conn.sendall(COLD)
                raise ConnectionAbortedError
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                self._child(conn, request, fds)  # never returns
            conn.settimeout(None)
            conn.sendall(FORKED + INT.pack(pid))
            print(f"forkserver: forked ClientApp {pid}", file=sys.stderr, flush=True)
            self.children[pid] = conn
            self.started[pid] = time.monotonic()
            self.sel.register(conn, selectors.EVENT_READ, pid)
            conn = None  # kept
        except ConnectionAbortedError:
            pass
        except Exception as e:  # a bad or vanished peer must not stop the server
            print(f"forkserver: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            if conn is not None:
                conn.close()

    def _child(self, conn: socket.socket, request: dict, fds: list[int]) -> None:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            die_with_parent(signal.SIGKILL)  # the server gone: so is every ClientApp it forked
            self.sel.close()
            self.listener.close()
            for c in [conn, *self.children.values()]:
                c.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.argv = list(request["argv"])
            reseed()
            if (threads := os.environ.get("OMP_NUM_THREADS", "")).isdigit() and "torch" in sys.modules:
                sys.modules["torch"].set_num_threads(max(1, int(threads)))
            module, _, function = self.entry.partition(":")
            getattr(importlib.import_module(module), function)()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, int | None):
                print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)

    def _relay(self, pid: int) -> None:
        """The shim of child `pid` sent signals to relay, or closed (died): then the child is killed."""
        conn = self.children.get(pid)
        if conn is None:
            return
        try:
            data = conn.recv(64)
        except OSError:
            data = b""
        sigs = list(data) if data else [signal.SIGKILL]
        if not data:
            self.sel.unregister(conn)
        for sig in sigs:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(pid, sig)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            print(f"forkserver: ClientApp {pid} exited ({code}) after "
                  f"{time.monotonic() - self.started.pop(pid):.2f} s", file=sys.stderr, flush=True)
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(conn)
            with contextlib.suppress(OSError):
                conn.sendall(INT.pack(code))
            conn.close()

    def _shutdown(self) -> None:
        """The node is gone or the server was told to stop: its running ClientApps are stopped (SIGTERM, then
        SIGKILL after 2 s), the socket and its directory removed."""
        for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
            for pid in self.children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while self.children and time.monotonic() < deadline:
                self._reap()
                if self.children:
                    time.sleep(0.05)
        with contextlib.suppress(OSError):
            self.path.unlink()
        shutil.rmtree(self.path.parent, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    # Started as a script: its own directory (runtime/) must not be importable as top-level modules.
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != Path(here)]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", type=Path, required=True)
    ap.add_argument("--watch-pid", type=int, required=True, help="the SuperNode: exit when it dies")
    ap.add_argument("--preload", default=",".join(PRELOAD),
                    help="modules imported before the first fork (never the app's own)")
    ap.add_argument("--pull-backoff", type=float, default=0.05,
                    help="first wait, seconds, when an object is not at the SuperNode yet (0: Flower's 1 s)")
    ap.add_argument("--entry", default=ENTRY, help="MODULE:FUNCTION each child runs (tests use their own)")
    args = ap.parse_args(argv)
    die_with_parent(signal.SIGTERM)
    if os.getppid() != args.watch_pid:  # the parent died before the kernel was asked to tell us
        sys.exit(0)
    os.environ["FLWR_TELEMETRY_ENABLED"] = "0"
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    for name in filter(None, args.preload.split(",")):
        importlib.import_module(name)
    if args.pull_backoff > 0:
        faster_object_pulls(args.pull_backoff)
    ForkServer(args.socket, args.watch_pid, args.entry).serve()


if __name__ == "__main__":
    main()
