"""Real separate Flower processes on loopback: one flower-superlink, N flower-supernodes (one per user, each
with its own port and `partition-id`), the app submitted with `flwr run`, and every process stopped by
process id when the run ends, fails or is interrupted.

    python -m experiments.federation --nodes 3 [--tls | --auth] [--out outputs/federation] \
        [-c federation.rounds=2 -c privacy.target_epsilon=4 ...] [--kill-node-after-round 1]

What it does, and how to read its output: studies/federation.py and runtime/federation.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import UsageError, command
from studies.federation import run_federation
from uedp.commands.options import parse_options, toml_value
from uedp.errors import ConfigError


def add_parser(ap: argparse.ArgumentParser) -> None:
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


def run(options: argparse.Namespace) -> int:
    try:
        config = {k.strip(): v for k, v in parse_options(options.config, value=toml_value).items()}
    except ConfigError as exc:
        raise UsageError(f"-c: {exc}") from exc
    return run_federation(options.nodes, options.out, config=config, tls=options.tls, auth=options.auth,
                          owners_dir=options.owners, kill_node_after_round=options.kill_node_after_round,
                          timeout=options.timeout)


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
