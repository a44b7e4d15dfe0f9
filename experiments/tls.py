"""Self-signed certificates for running a federation over TLS (SuperLink and SuperNodes).

What it does, and how to read its output: runtime/tls.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from runtime.tls import make_certificates, make_node_keys


def main(argv: list[str] | None = None) -> int:
    """python -m experiments.tls OUT_DIR HOST [HOST ...]: write ca.pem, server.pem, server.key (and ca.key).
    python -m experiments.tls keys OUT_DIR NAME [NAME ...]: write NAME.key (0600) and NAME.pub per SuperNode."""
    import argparse

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["keys"]:  # (certificates into a folder called "keys": python -m experiments.tls ./keys HOST)
        ap = argparse.ArgumentParser(prog="python -m experiments.tls keys", description=main.__doc__)
        ap.add_argument("out", type=Path)
        ap.add_argument("names", nargs="+", help="one per SuperNode (data owner), e.g. owner-17")
        args = ap.parse_args(argv[1:])
        try:
            keys = make_node_keys(args.out, args.names)
        except ValueError as exc:
            ap.error(str(exc))
        for k in keys:
            print(f"{k.name}: private {k.private} (give to the owner), public {k.public} "
                  "(flwr supernode register)")
        return 0
    ap = argparse.ArgumentParser(prog="python -m experiments.tls", description=main.__doc__)
    ap.add_argument("out", type=Path)
    ap.add_argument("hosts", nargs="+", help="the SuperLink's addresses as the SuperNodes reach it (IPs or names)")
    ap.add_argument("--days", type=int, default=30)
    args = ap.parse_args(argv)
    certs = make_certificates(args.out, hosts=args.hosts, days=args.days)
    print(f"CA {certs.ca}\nserver certificate {certs.cert} (SAN: {', '.join(args.hosts)})\nserver key {certs.key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
