"""Self-signed certificates for running a federation over TLS (SuperLink and SuperNodes).

    python -m experiments.tls OUT_DIR HOST [HOST ...]: write ca.pem, server.pem, server.key (and ca.key).
    python -m experiments.tls keys OUT_DIR NAME [NAME ...]: write NAME.key (0600) and NAME.pub per SuperNode.

(Certificates into a folder called "keys": python -m experiments.tls ./keys HOST.) What it does, and how to
read its output: runtime/tls.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import UsageError, command
from runtime.tls import make_certificates, make_node_keys


def add_parser(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("out", metavar="OUT_DIR|keys", help="where the certificates go, or `keys` (SuperNode keys)")
    ap.add_argument("hosts", nargs="+", metavar="HOST|OUT_DIR NAME",
                    help="the SuperLink's addresses as the SuperNodes reach it (IPs or names); after `keys`: "
                         "the keys' folder, then one name per SuperNode (data owner), e.g. owner-17")
    ap.add_argument("--days", type=int, default=30)


def run(options: argparse.Namespace) -> int:
    if options.out == "keys":  # (a folder called "keys" is ./keys)
        if len(options.hosts) < 2:
            raise UsageError("keys: give OUT_DIR and at least one NAME")
        try:
            keys = make_node_keys(Path(options.hosts[0]), options.hosts[1:])
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        for k in keys:
            print(f"{k.name}: private {k.private} (give to the owner), public {k.public} "
                  "(flwr supernode register)")
        return 0
    certs = make_certificates(Path(options.out), hosts=options.hosts, days=options.days)
    print(f"CA {certs.ca}\nserver certificate {certs.cert} (SAN: {', '.join(options.hosts)})\nserver key {certs.key}")
    return 0


main = command(__doc__, add_parser, run)

if __name__ == "__main__":
    raise SystemExit(main())
