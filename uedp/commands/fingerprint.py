"""`uedp fingerprint`: the public place map of a deployment, from the invited owners' public keys.

    uedp fingerprint keys/owner-0.pub keys/owner-1.pub ... > places.txt

Prints one line per key, in the order given (place i is the i-th key): its SHA-256 fingerprint
(uedp.flower.places.key_fingerprint: of the key's DER SubjectPublicKeyInfo, whatever its encoding: OpenSSH
`.pub` as `flwr supernode register` reads it, or PEM), then `# FILE`. The file is the run's
federation.places (owners mode); the order is the places' public order, fixed before the run, and the keys
must be the ones registered with the SuperLink under --enable-supernode-auth. A file that is not a public
key is refused naming it (exit status 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from uedp.errors import ConfigError


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("fingerprint", help="the place map of a deployment: fingerprints of owners' keys",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("keys", nargs="+", type=Path, help="public key files (OpenSSH .pub or PEM), in place order")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from uedp.flower.places import key_fingerprint

    lines = []
    for path in args.keys:
        try:
            lines.append(f"{key_fingerprint(path.read_bytes())}  # {path}")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot be read ({exc})") from None
        except ValueError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    print("\n".join(lines))
    return 0
