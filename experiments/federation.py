"""Real separate Flower processes on loopback: one flower-superlink, N flower-supernodes (one per user, each
with its own port and `partition-id`), the app submitted with `flwr run`, and every process stopped by
process id when the run ends, fails or is interrupted.

    python -m experiments.federation --nodes 3 [--tls | --auth] [--out outputs/federation] \
        [-c federation.rounds=2 -c privacy.target_epsilon=4 ...] [--kill-node-after-round 1]

What it does, and how to read its output: runtime/federation.py.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from runtime.federation import Owners, federation
from uedp.commands.options import parse_options, toml_value
from uedp.errors import ConfigError
from uedp.summary import RUN, has_summary, read_summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--tls", action="store_true", help="TLS with a generated CA (default: --insecure, loopback only)")
    ap.add_argument("--auth", action="store_true",
                    help="only registered SuperNodes join (one generated key per node; implies --tls)")
    ap.add_argument("--out", type=Path, default=Path("outputs/federation"))
    ap.add_argument("-c", "--config", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--kill-node-after-round", type=int, default=0, metavar="R")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds before the run is stopped")
    ap.add_argument("--owners", type=Path, default=None, metavar="DIR",
                    help="owners keep their own files: one node per DIR/owner-*/data.jsonl, which only it reads; "
                         "the server reads no private text (federation.data = owners; --nodes is ignored)")
    args = ap.parse_args(argv)
    try:
        config = {k.strip(): v for k, v in parse_options(args.config, value=toml_value).items()}
    except ConfigError as exc:
        ap.error(f"-c: {exc}")
    out = args.out.resolve()
    if out.exists():
        shutil.rmtree(out / "flwr-home", ignore_errors=True)
    owners = Owners.from_dir(args.owners, out) if args.owners else None
    nodes = len(owners.files) if owners else args.nodes
    overrides = {"federation.out_dir": str(out / "run"), **config, "federation.num_nodes": nodes,
                 **(owners.overrides() if owners else {})}
    t0 = time.perf_counter()
    with federation(nodes, out / "flwr-home", tls=args.tls, auth=args.auth,
                    node_config=owners.node_config() if owners else None,
                    env=owners.env() if owners else None) as fed:
        mode = "TLS, SuperNode auth" if args.auth else "TLS" if args.tls else "insecure"
        print(f"SuperLink on 127.0.0.1:{fed.port} ({mode}), {nodes} SuperNodes; "
              f"pids {', '.join(f'{n}={p.pid}' for n, p in fed.procs.items())}", flush=True)

        def on_round(r: int) -> None:
            if args.kill_node_after_round and r == args.kill_node_after_round:
                victim = f"supernode-{nodes - 1}"
                fed.kill(victim)
                print(f"*** killed {victim} (SIGKILL) after round {r}", flush=True)

        rc = fed.run(overrides, timeout=args.timeout, on_round=on_round)
    print(f"flwr run exited {rc} after {time.perf_counter() - t0:.1f} s; all processes stopped", flush=True)
    if rc == 0 and has_summary(out / "run"):
        s = read_summary(out / "run", require=RUN)
        shown = s["final"].get(s["metric"], float("nan"))
        print(f"summary: strategy={s['strategy']} rounds={s['rounds']} eps_uedp={s['eps_uedp']:.4g} "
              f"eps_user={s['eps_user']:.4g} {s['metric']}={shown:.4g}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
