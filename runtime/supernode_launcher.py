"""Start a Flower SuperNode without Flower 1.42's fixed sleeps, and with warm ClientApps.

    python -m runtime.supernode_launcher [--sleep-cap 0.1] [--sleep-max 1.0] [--warm-clientapps] \\
        -- --superlink HOST:PORT --node-config "..." [every other flower-supernode argument]

What it patches, and why (both pinned to FLWR_VERSION, the flwr of pyproject.toml's dev pin; on another version,
or where the patched names moved, the launcher warns and starts plain flower-supernode with its speed-ups off,
and tests/test_supernode_launcher.py fails if the patched names move in the pinned Flower):

1. Sleeps (`--sleep-cap S`, 0 = Flower's own): flwr/supernode/start_client_internal.py sleeps a fixed 3 s
   after every pull that found no message (line 263), and right after pushing its reply a node pulls before
   the next round exists, so every round waits up to 3 s per node; `_push_messages` polls every 0.5 s for the
   ClientApp's reply (lines 470, 506). No flag, variable or node config changes them, and the module uses
   `time` only for them: the launcher gives that module a `time` whose `sleep` is bounded, and wraps its
   `_pull_and_store_message` to count consecutive empty pulls. After the k-th empty pull in a row a node
   waits min(3, S x 2^(k-1), --sleep-max) s; a reply is waited for in steps of min(0.5, S). The pull rate
   it costs the SuperLink: at most 1/S pulls a second per node right after a reply, halving with every empty
   pull down to 1/sleep-max a second while idle (Flower's own: 1/3). With S = 0.1, max 1.0: 4 pulls in the
   first 0.7 s, then one a second.
2. Warm ClientApps (`--warm-clientapps`): a fork server (runtime/forkserver.py) started here, before Flower
   is imported, that has imported torch, numpy and flwr, and a shim `flwr-clientapp` (runtime/warm_shim.py)
   first on the PATH that the SuperExec (and so its `flwr-clientapp` lookup, supercore/constant.py:269-276)
   inherits: each message's ClientApp is a fork of the server, not a fresh interpreter. The server watches
   this process's id and exits with it (taking its children along); see its docstring for the rules it
   keeps (one thread at fork, reseeded generators, peer uid checked).

Telemetry is off in this process and every process it starts (FLWR_TELEMETRY_ENABLED=0, unless set).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path

from runtime.forkserver import alive, faster_object_pulls

FLWR_VERSION = "1.42.0"  # the Flower these patches were read against (pyproject.toml pins it)
SLEEPS_MODULE = "flwr.supernode.start_client_internal"
PULL = "_pull_and_store_message"  # returns the run id of the message it pulled, None when there was none
FLOWER_SLEEPS = {"time.sleep(3)": 1, "time.sleep(0.5)": 2}  # the calls patched, as Flower 1.42 writes them
HERE = Path(__file__).resolve().parent
SOCKET_ENV, REAL_ENV = "UEDP_WARM_SOCKET", "UEDP_REAL_CLIENTAPP"
WARM_PREFIX = "uedp-warm-"  # /tmp/uedp-warm-<node pid>-XXXX: short, since AF_UNIX paths fit 107 bytes


class PatchError(RuntimeError):
    """What the launcher patches is not where it was in the Flower it was written for."""


def check_flower(version: str | None = None) -> None:
    """Refuse a Flower other than FLWR_VERSION, and a module whose patched names or sleeps moved."""
    version = version or importlib.metadata.version("flwr")
    if version != FLWR_VERSION:
        raise PatchError(f"runtime/supernode_launcher.py patches Flower {FLWR_VERSION}, this is flwr {version}: "
                         f"re-read {SLEEPS_MODULE} and update it, or start the node without --sleep-cap/"
                         f"--warm-clientapps (plain flower-supernode)")
    import inspect

    mod = importlib.import_module(SLEEPS_MODULE)
    if getattr(mod, "time", None) is not time or not callable(getattr(mod, PULL, None)):
        raise PatchError(f"{SLEEPS_MODULE} no longer has `time` and `{PULL}` as module globals")
    source = inspect.getsource(mod)
    found = {call: len(re.findall(re.escape(call), source)) for call in FLOWER_SLEEPS}
    other = len(re.findall(r"time\.\w+\(", source)) - sum(found.values())
    if found != FLOWER_SLEEPS or other:
        raise PatchError(f"{SLEEPS_MODULE}'s sleeps moved: {found} (expected {FLOWER_SLEEPS}), {other} other "
                         f"uses of time")


def bounded_time(cap: float, most: float) -> tuple[types.ModuleType, Callable[[bool], None]]:
    """A stand-in for the `time` module whose sleep(s) waits min(s, most, cap x 2^(k-1)) after the k-th
    empty pull in a row (min(s, cap) while k = 0), and the callback that tells it whether a pull was empty."""
    state = {"empty": 0}
    proxy = types.ModuleType("time", "time, with SuperNode sleeps bounded by runtime/supernode_launcher.py")
    proxy.__dict__.update({k: v for k, v in vars(time).items() if not k.startswith("__")})

    def sleep(seconds: float) -> None:
        time.sleep(max(0.0, min(seconds, most, cap * 2 ** max(0, state["empty"] - 1))))

    def pulled(empty: bool) -> None:
        state["empty"] = state["empty"] + 1 if empty else 0

    proxy.sleep = sleep  # type: ignore[attr-defined]
    return proxy, pulled


def cap_sleeps(cap: float, most: float) -> None:
    check_flower()
    mod = importlib.import_module(SLEEPS_MODULE)
    proxy, pulled = bounded_time(cap, most)
    pull = getattr(mod, PULL)

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        run_id = pull(*args, **kwargs)
        pulled(run_id is None)
        return run_id

    mod.time = proxy
    setattr(mod, PULL, counted)


def _real_clientapp(shim_dir: Path) -> str:
    path = os.pathsep.join(p for p in [str(Path(sys.executable).parent), os.environ.get("PATH", "")]
                           if p and Path(p) != shim_dir)
    found = shutil.which("flwr-clientapp", path=path)
    if found is None:
        raise FileNotFoundError("flwr-clientapp not found next to the interpreter or on PATH; install flwr")
    return found


def remove_stale_dirs(tmp: Path | None = None) -> None:
    """Directories of warm nodes that died by SIGKILL with their whole group (the server had no chance to
    remove its own): those whose node pid no longer runs."""
    for d in (tmp or Path(tempfile.gettempdir())).glob(f"{WARM_PREFIX}*-*"):
        pid = d.name[len(WARM_PREFIX):].split("-", 1)[0]
        with contextlib.suppress(OSError, ValueError):
            if d.stat().st_uid == os.getuid() and not alive(int(pid)):
                shutil.rmtree(d, ignore_errors=True)


def start_forkserver(*, timeout: float = 120.0, preload: str | None = None, entry: str | None = None
                     ) -> subprocess.Popen:
    """Start this node's fork server and put its shim first on PATH (for the processes started from here
    on); returns once the server listens."""
    remove_stale_dirs()
    d = Path(tempfile.mkdtemp(prefix=f"{WARM_PREFIX}{os.getpid()}-"))  # 0700: only this user's processes
    sock = d / "s"
    shim = d / "bin" / "flwr-clientapp"
    shim.parent.mkdir()
    shim.write_text(f"#!{sys.executable} -S\n" + (HERE / "warm_shim.py").read_text())
    shim.chmod(0o700)
    os.environ[REAL_ENV] = _real_clientapp(shim.parent)
    os.environ[SOCKET_ENV] = str(sock)
    argv = [sys.executable, str(HERE / "forkserver.py"), "--socket", str(sock), "--watch-pid", str(os.getpid())]
    if preload is not None:
        argv += ["--preload", preload]
    if entry is not None:
        argv += ["--entry", entry]
    server = subprocess.Popen(argv)  # same process group and stdio as the node
    deadline = time.monotonic() + timeout
    while not sock.exists():
        if server.poll() is not None:
            raise RuntimeError(f"the fork server exited ({server.returncode}) before listening")
        if time.monotonic() > deadline:
            server.kill()
            raise TimeoutError(f"the fork server did not listen on {sock} within {timeout:.0f} s")
        time.sleep(0.05)
    os.environ["PATH"] = f"{shim.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return server


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ours, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else ([], argv)
    ap = argparse.ArgumentParser(prog="python -m runtime.supernode_launcher", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sleep-cap", type=float, default=0.1,
                    help="bound of the SuperNode's sleeps right after a reply, seconds (0: Flower's fixed sleeps)")
    ap.add_argument("--sleep-max", type=float, default=1.0, help="bound of its sleeps while idle, seconds")
    ap.add_argument("--warm-clientapps", action="store_true", help="fork ClientApps from a warm fork server")
    args = ap.parse_args(ours)
    for name in ("sleep_cap", "sleep_max"):
        v = getattr(args, name)
        if not (v == v and 0 <= v <= 3):  # NaN too
            ap.error(f"--{name.replace('_', '-')} must be between 0 and 3 seconds, got {v}")
    if args.sleep_cap and args.sleep_max < args.sleep_cap:
        ap.error(f"--sleep-max ({args.sleep_max}) must be at least --sleep-cap ({args.sleep_cap})")
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    try:
        check_flower()  # before any process starts
    except PatchError as e:  # another Flower: its own sleeps and cold ClientApps, slower but correct
        if args.warm_clientapps or args.sleep_cap:
            print(f"supernode_launcher: WARNING: {e}; starting plain flower-supernode (--sleep-cap and "
                  "--warm-clientapps off)", file=sys.stderr, flush=True)
    else:
        if args.warm_clientapps:
            start_forkserver()
        if args.sleep_cap:
            cap_sleeps(args.sleep_cap, args.sleep_max)
            # the SuperNode's own pulls of a message's objects from the SuperLink (listed before its objects
            # are all pushed; Flower waits 1 s, then 2, 4, ... 10) back off from the cap to sleep-max
            faster_object_pulls(args.sleep_cap, args.sleep_max)
    from flwr.supernode.cli import flower_supernode

    sys.argv = ["flower-supernode", *rest]
    flower_supernode()


if __name__ == "__main__":
    main()
