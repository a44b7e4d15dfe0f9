"""One run as real separate Flower processes on loopback (runtime/federation.py): a SuperLink, N SuperNodes
(or one per data owner's own file), the app submitted with `flwr run`; optionally one SuperNode killed after a
round; every process stopped by process id when the run ends, fails or is interrupted. What it prints: the
processes' ids, the run's exit status and, for a finished run, its summary line.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from runtime.federation import Owners, federation
from uedp.summary import RUN, has_summary, read_summary


def run_federation(nodes: int, out: Path, *, config: dict[str, Any], tls: bool = False, auth: bool = False,
                   owners_dir: Path | None = None, kill_node_after_round: int = 0, timeout: float = 3600.0) -> int:
    """The run with the flat settings `config` in OUT/run (Flower's home in OUT/flwr-home, emptied first), on
    `nodes` SuperNodes, or one per owner of `owners_dir` (owner-*/data.jsonl, each read by its node only); with
    `tls` a generated CA, with `auth` SuperNode authentication too. Returns `flwr run`'s exit status."""
    out = out.resolve()
    if out.exists():
        shutil.rmtree(out / "flwr-home", ignore_errors=True)
    owners = Owners.from_dir(owners_dir, out) if owners_dir else None
    nodes = len(owners.files) if owners else nodes
    overrides = {"federation.out_dir": str(out / "run"), **config, "federation.num_nodes": nodes,
                 **(owners.overrides() if owners else {})}
    t0 = time.perf_counter()
    with federation(nodes, out / "flwr-home", tls=tls, auth=auth,
                    node_config=owners.node_config() if owners else None,
                    env=owners.env() if owners else None) as fed:
        mode = "TLS, SuperNode auth" if auth else "TLS" if tls else "insecure"
        print(f"SuperLink on 127.0.0.1:{fed.port} ({mode}), {nodes} SuperNodes; "
              f"pids {', '.join(f'{n}={p.pid}' for n, p in fed.procs.items())}", flush=True)

        def on_round(r: int) -> None:
            if kill_node_after_round and r == kill_node_after_round:
                victim = f"supernode-{nodes - 1}"
                fed.kill(victim)
                print(f"*** killed {victim} (SIGKILL) after round {r}", flush=True)

        rc = fed.run(overrides, timeout=timeout, on_round=on_round)
    print(f"flwr run exited {rc} after {time.perf_counter() - t0:.1f} s; all processes stopped", flush=True)
    if rc == 0 and has_summary(out / "run"):
        s = read_summary(out / "run", require=RUN)
        shown = s["final"].get(s["metric"], float("nan"))
        print(f"summary: strategy={s['strategy']} rounds={s['rounds']} eps_uedp={s['eps_uedp']:.4g} "
              f"eps_user={s['eps_user']:.4g} {s['metric']}={shown:.4g}")
    return rc
