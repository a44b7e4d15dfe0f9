"""The SuperNode launcher (runtime/supernode_launcher.py): Flower's sleeps bounded, and warm ClientApps forked
from a per-node fork server (runtime/forkserver.py) through the `flwr-clientapp` shim (runtime/warm_shim.py).

A stand-in node here is a Python process that starts the fork server as the launcher does, with a probe entry
point in place of Flower's `flwr_clientapp` (what a child sees at its start: modules, argv, environment,
working directory, stdio, random streams); the real ClientApp through real SuperNodes is in the e2e tests."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

import psutil
import pytest

from runtime import supernode_launcher as launcher

ROOT = Path(__file__).parents[1]

PROBE = textwrap.dedent('''
    import json, os, signal, sys, time
    AT_START = sorted(sys.modules)

    def main():
        before = set(sys.modules)
        import torch, numpy
        loaded = sorted(set(sys.modules) - before)
        args = sys.argv[1:]
        out = {"modules": AT_START, "loaded": loaded, "argv": sys.argv, "cwd": os.getcwd(),
               "marker": os.environ.get("PROBE_MARKER"), "pid": os.getpid(), "ppid": os.getppid(),
               "torch": torch.randn(4).tolist(), "numpy": numpy.random.rand(4).tolist(),
               "threads": torch.get_num_threads()}
        if "--sleep" in args:  # the handler first: the test signals once the file below exists
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
        print("probe stdout", flush=True)
        print("probe stderr", file=sys.stderr, flush=True)
        with open(os.environ["PROBE_OUT"] + "." + args[0], "w") as f:
            json.dump(out, f)
        if "--sleep" in args:
            time.sleep(60)
        if "--die" in args:
            os.kill(os.getpid(), signal.SIGTERM)
        sys.exit(int(args[args.index("--exit") + 1]) if "--exit" in args else 0)
''')
THREAD = "import threading, time\nthreading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"

NODE = textwrap.dedent('''
    import sys, time
    from runtime.supernode_launcher import start_forkserver
    server = start_forkserver(preload=sys.argv[1], entry="probe:main")
    print(server.pid, flush=True)
    time.sleep(600)
''')


class Node:
    """A stand-in SuperNode: starts the fork server (as the launcher does) and waits; `clientapp(...)` runs
    the shim with the node's environment, as its SuperExec would."""

    def __init__(self, tmp: Path, preload: str = "numpy,torch,flwr.supernode.cli") -> None:
        (tmp / "probe.py").write_text(PROBE)
        (tmp / "spawns_thread.py").write_text(THREAD)
        self.out = tmp / "probe-out"
        self.env = {**os.environ, "PYTHONPATH": f"{tmp}:{ROOT}", "PROBE_OUT": str(self.out), "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, "-c", NODE, preload], cwd=ROOT, env=self.env,
                                     stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.server = int(self.proc.stdout.readline())
        node = psutil.Process(self.proc.pid)
        deadline = time.monotonic() + 60
        while not (env := self._server_env()) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.shim_env = {**self.env, **env}
        assert node.children()[0].pid == self.server

    def _server_env(self) -> dict[str, str]:
        env = psutil.Process(self.server).environ()  # the node's environment, as the server started
        sock = Path(env.get(launcher.SOCKET_ENV, "/nonexistent"))
        if not sock.exists():
            return {}
        return {launcher.SOCKET_ENV: str(sock), launcher.REAL_ENV: env[launcher.REAL_ENV],
                "PATH": f"{sock.parent / 'bin'}:{os.environ['PATH']}"}

    def clientapp(self, *args: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(["flwr-clientapp", *args], env={**self.shim_env, **kw.pop("env", {})}, **kw)

    def result(self, tag: str) -> dict:
        return json.loads(Path(f"{self.out}.{tag}").read_text())

    def wait_result(self, tag: str, timeout: float = 30) -> None:
        """Until the ClientApp `tag` has written its whole result: the file exists as soon as it is opened,
        before its JSON is in it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                self.result(tag)
                return
            time.sleep(0.05)

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = Node(tmp_path_factory.mktemp("warm"))
    yield n
    n.close()


def wait_gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_child_starts_with_torch_imported_and_none_of_the_apps_own_modules(node, tmp_path):
    p = node.clientapp("a", "--exit", "0", cwd=tmp_path, env={"PROBE_MARKER": "m-1"},
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    r = node.result("a")
    mods = set(r["modules"])
    assert {"torch", "numpy", "flwr", "flwr.supernode.cli"} <= mods
    own = sorted(m for m in mods if m.split(".")[0] in {"uedp", "client", "server", "strategies", "runtime",
                                                        "studies", "experiments", "tls", "processes"})
    assert own == []  # Flower loads the app from the FAB: a pre-imported copy would shadow it
    assert r["loaded"] == []  # `import torch, numpy` loads nothing: a dictionary lookup, not 1.5 s of loading
    # the shim's argv, working directory, environment and stdio are the child's
    assert r["argv"][1:] == ["a", "--exit", "0"] and Path(r["cwd"]) == tmp_path and r["marker"] == "m-1"
    assert out == "probe stdout\n" and err == "probe stderr\n"
    assert r["ppid"] == node.server and r["threads"] == 1


def test_exit_status_and_death_by_signal_reach_the_supexec(node):
    assert node.clientapp("b", "--exit", "3").wait(timeout=60) == 3
    assert node.clientapp("c", "--die").wait(timeout=60) == -signal.SIGTERM


def test_a_signal_to_the_shim_is_relayed_and_a_killed_shim_takes_its_child(node):
    p = node.clientapp("d", "--sleep")
    node.wait_result("d")
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 7  # the child's SIGTERM handler ran
    p = node.clientapp("e", "--sleep")
    node.wait_result("e")
    child = node.result("e")["pid"]
    p.kill()
    p.wait()
    assert wait_gone(child)


def test_children_draw_fresh_random_streams(node):
    for tag in ("f", "g"):
        assert node.clientapp(tag).wait(timeout=60) == 0
    f, g = node.result("f"), node.result("g")
    assert f["pid"] != g["pid"]
    assert f["torch"] != g["torch"] and f["numpy"] != g["numpy"]  # a fork repeats its parent's streams


def test_sigkill_of_the_node_alone_takes_the_fork_server_and_its_children(tmp_path):
    n = Node(tmp_path)
    try:
        p = n.clientapp("h", "--sleep")
        n.wait_result("h")
        child = n.result("h")["pid"]
        sock_dir = Path(n.shim_env[launcher.SOCKET_ENV]).parent
        os.kill(n.proc.pid, signal.SIGKILL)  # the node's pid ALONE, not its process group
        n.proc.wait()
        assert wait_gone(n.server), "the fork server outlived its SuperNode"
        assert wait_gone(child), "a forked ClientApp outlived its fork server"
        assert p.wait(timeout=10) != 0
        assert not sock_dir.exists()
    finally:
        n.close()


def test_without_a_server_or_when_it_has_a_thread_the_real_clientapp_runs_cold(tmp_path):
    env = {launcher.REAL_ENV: "/bin/echo", launcher.SOCKET_ENV: str(tmp_path / "none")}
    shim = tmp_path / "flwr-clientapp"
    shim.write_text(f"#!{sys.executable} -S\n" + (ROOT / "runtime" / "warm_shim.py").read_text())
    shim.chmod(0o700)
    p = subprocess.run([str(shim), "--x", "1"], env={**os.environ, **env}, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0 and p.stdout == "--x 1\n" and "cold" in p.stderr
    (tmp_path / "node").mkdir()
    n = Node(tmp_path / "node", preload="spawns_thread")
    try:
        p = subprocess.run(["flwr-clientapp", "--y"], env={**n.shim_env, launcher.REAL_ENV: "/bin/echo"},
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0 and p.stdout == "--y\n" and "declined" in p.stderr
    finally:
        n.close()


# -- the sleeps -------------------------------------------------------------------------------------------
def test_the_patched_flower_is_the_pinned_one_and_its_sleeps_are_where_they_were():
    # the repository's dev install pins the Flower the launcher patches (the installed package takes a range)
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    pinned = next(re.fullmatch(r"flwr\[[^]]*\]==(\S+)", d).group(1) for d in pins if d.startswith("flwr"))
    assert pinned == launcher.FLWR_VERSION
    launcher.check_flower()  # the installed Flower: names and sleeps where the launcher patches them
    with pytest.raises(launcher.PatchError, match="patches Flower 1.42.0, this is flwr 1.43.0"):
        launcher.check_flower("1.43.0")


def test_sleeps_after_empty_pulls_back_off_from_the_cap_to_the_bound(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(launcher.time, "sleep", slept.append)
    proxy, pulled = launcher.bounded_time(0.1, 1.0)
    proxy.sleep(0.5)  # a reply poll before any pull
    for empty in (True, True, True, True, True, True, False):
        pulled(empty)
        proxy.sleep(3)  # Flower's sleep after an empty pull
    proxy.sleep(0.5)
    # a back-off doubled from 0.1 and capped at 1.0: products of decimals, a few ulps (default rel 1e-6)
    assert slept == pytest.approx([0.1, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 0.1, 0.1])
    assert proxy.monotonic is time.monotonic  # everything else is the real module


def test_the_launcher_caps_the_sleeps_of_flowers_module_and_refuses_bad_settings(monkeypatch):
    import flwr.supernode.start_client_internal as mod

    monkeypatch.setattr(mod, "time", mod.time)
    monkeypatch.setattr(mod, launcher.PULL, getattr(mod, launcher.PULL))
    launcher.cap_sleeps(0.05, 0.5)
    assert mod.time is not time and mod.time.sleep is not time.sleep
    slept: list[float] = []
    monkeypatch.setattr(launcher.time, "sleep", slept.append)
    mod.time.sleep(3)  # Flower's 3-s sleep, as the patched module calls it
    assert slept == [0.05]
    for bad in (["--sleep-cap", "nan"], ["--sleep-cap", "5"], ["--sleep-cap", "0.5", "--sleep-max", "0.1"]):
        p = subprocess.run([sys.executable, "-m", "runtime.supernode_launcher", *bad, "--"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and "--sleep-" in p.stderr


def test_object_pull_backoff_patches_agree_and_start_at_the_given_wait(monkeypatch):
    """The SuperNode, warm ClientApps (runtime/forkserver.py) and the ServerApp (server/polling.py) patch the
    same keyword defaults of Flower's object pulls: from Flower's 1 s first wait to the given one."""
    import importlib

    from runtime import forkserver
    from server import polling

    assert (forkserver.PULL_MODULE, forkserver.PULL_FUNCTIONS, forkserver.PULL_DEFAULTS) == \
           (polling.PULL_MODULE, polling.PULL_FUNCTIONS, polling.PULL_DEFAULTS)
    module = importlib.import_module(forkserver.PULL_MODULE)
    for name in forkserver.PULL_FUNCTIONS:
        fn = getattr(module, name)
        # Flower's own defaults (another test in this worker may have patched this process already)
        monkeypatch.setattr(fn, "__kwdefaults__", {**fn.__kwdefaults__, **forkserver.PULL_DEFAULTS})
    forkserver.faster_object_pulls(0.05, 0.2)
    polling.faster_object_pulls(0.1)  # already patched: unchanged
    for name in forkserver.PULL_FUNCTIONS:
        kw = getattr(module, name).__kwdefaults__
        assert (kw["initial_backoff"], kw["backoff_cap"], kw["max_tries_per_object"]) == (0.05, 0.2, None)


def test_the_shim_and_the_fork_server_speak_one_wire_format():
    """The shim and the fork server run as separate scripts that share no import: their framing structs, the
    signals the shim relays and the environment names the launcher sets must agree, or a ClientApp would hang
    or run cold. Checked on the scripts themselves (imported by path, not through the package)."""
    import importlib.util

    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"_probe_{name}", launcher.HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    shim, server = load("warm_shim"), load("forkserver")
    assert (shim.LENGTH.format, shim.INT.format) == (server.LENGTH.format, server.INT.format)
    shim_source = (launcher.HERE / "warm_shim.py").read_text()
    for name in (launcher.SOCKET_ENV, launcher.REAL_ENV):
        assert f'os.environ.get("{name}"' in shim_source, name
    assert signal.SIGTERM in shim.RELAYED and signal.SIGKILL not in shim.RELAYED


def test_another_flower_runs_plain_with_a_warning(monkeypatch, capsys):
    """On a Flower other than the pinned one the launcher starts plain flower-supernode (no fork server, Flower's
    own sleeps) and says so; the ServerApp's polling grid keeps Flower's object-pull backoff where it moved."""
    import importlib

    import flwr.supernode.cli

    from server import polling

    def other(version: str | None = None) -> None:
        raise launcher.PatchError("runtime/supernode_launcher.py patches Flower 1.42.0, this is flwr 1.43.0")

    started: list[list[str]] = []
    monkeypatch.setattr(launcher, "check_flower", other)
    monkeypatch.setattr(launcher, "start_forkserver", lambda **_: pytest.fail("no fork server on another Flower"))
    monkeypatch.setattr(launcher, "cap_sleeps", lambda *_: pytest.fail("no sleep patch on another Flower"))
    monkeypatch.setattr(flwr.supernode.cli, "flower_supernode", lambda: started.append(list(sys.argv)))
    launcher.main(["--warm-clientapps", "--sleep-cap", "0.1", "--", "--insecure"])
    assert started == [["flower-supernode", "--insecure"]]
    err = capsys.readouterr().err
    assert "WARNING" in err and "this is flwr 1.43.0" in err and "plain flower-supernode" in err

    module = importlib.import_module(polling.PULL_MODULE)
    fn = getattr(module, polling.PULL_FUNCTIONS[0])
    monkeypatch.setattr(fn, "__kwdefaults__", {**fn.__kwdefaults__, "initial_backoff": 2, "max_tries_per_object": 9})
    with pytest.warns(RuntimeWarning, match="keep Flower's own backoff"):
        assert polling.faster_object_pulls(0.1) is False
    assert fn.__kwdefaults__["initial_backoff"] == 2  # unchanged
