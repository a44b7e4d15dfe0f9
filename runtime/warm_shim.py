"""The `flwr-clientapp` a warm node's SuperExec finds first on its PATH (the SuperNode launcher writes this
file there, under the interpreter with `-S`: standard library only, so it starts in tens of milliseconds).

It hands its argv, environment, working directory and stdin/stdout/stderr to the node's fork server
(runtime/forkserver.py; socket in UEDP_WARM_SOCKET), relays the signals it gets to the forked ClientApp, and
exits with the ClientApp's status (killed by a signal: the same signal). Without a fork server, or when the
server says so, it runs the real `flwr-clientapp` (UEDP_REAL_CLIENTAPP) in its place: a cold start.
"""

import contextlib
import json
import os
import signal
import socket
import struct
import sys

FORKED, COLD = b"P", b"F"  # as runtime/forkserver.py
LENGTH, INT = struct.Struct("!I"), struct.Struct("!i")
RELAYED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def cold(why: str) -> None:
    real = os.environ.get("UEDP_REAL_CLIENTAPP", "")
    print(f"flwr-clientapp shim: {why}; starting {real or 'flwr-clientapp'} cold", file=sys.stderr, flush=True)
    if not real:
        sys.exit(127)
    os.execv(real, [real, *sys.argv[1:]])


def recv_exact(conn, n):
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def main():
    path = os.environ.get("UEDP_WARM_SOCKET", "")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError as e:
        conn.close()
        cold(f"no fork server at {path!r} ({e})")
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:  # a closed standard stream: the child gets /dev/null there
            fds.append(os.open(os.devnull, os.O_RDWR))
    body = json.dumps({"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    try:
        socket.send_fds(conn, [LENGTH.pack(len(body))], fds)
        conn.sendall(body)
        tag = recv_exact(conn, 1)
    except OSError as e:
        tag, why = None, str(e)
    else:
        why = "the fork server closed the connection"
    if tag != FORKED:
        conn.close()
        cold("the fork server declined" if tag == COLD else why)
    raw = recv_exact(conn, INT.size)
    pid = INT.unpack(raw)[0] if raw else None

    def relay(sig, _frame):
        with contextlib.suppress(OSError):
            conn.sendall(bytes([sig]))

    for sig in RELAYED:
        signal.signal(sig, relay)
    raw = recv_exact(conn, INT.size) if pid else None
    if raw is None:  # the fork server died: its child must not outlive us (it also has PDEATHSIG)
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        print("flwr-clientapp shim: the fork server vanished", file=sys.stderr, flush=True)
        sys.exit(1)
    code = INT.unpack(raw)[0]
    if code < 0:  # die of the same signal, so that the SuperExec sees what the ClientApp saw
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        sys.exit(128 - code)
    sys.exit(code)


if __name__ == "__main__":
    main()
