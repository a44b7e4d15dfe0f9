"""Self-signed certificates for running a federation over TLS (SuperLink and SuperNodes).

    certs = make_certificates(Path("certs"), hosts=("127.0.0.1", "localhost"))
    # SuperLink: --ssl-ca-certfile certs.ca --ssl-certfile certs.cert --ssl-keyfile certs.key
    # SuperNode and `flwr run`: --root-certificates certs.ca  (root-certificates in the connection)

A CA key and certificate, and a server certificate signed by it whose subject alternative names hold every
host given (IP addresses as IP SANs, names as DNS SANs). For production, use certificates from your own
PKI; these are for loopback and test federations. Private keys are written with mode 0600.

SuperNode authentication keys (one per data owner; the SuperLink admits only registered public keys):

    keys = make_node_keys(Path("keys"), ["owner-0", "owner-1"])
    # operator: flwr supernode register keys/owner-0.pub CONNECTION   (SuperLink: --enable-supernode-auth)
    # owner:    flower-supernode --auth-supernode-private-key keys/owner-0.key ...

Each is an ECDSA P-384 key pair in OpenSSH format (what `flwr supernode register` and
`flower-supernode --auth-supernode-private-key` read), the private key unencrypted with mode 0600.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from uedp.files import PRIVATE, atomic_write_bytes


@dataclass(frozen=True)
class Certificates:
    ca: Path
    cert: Path
    key: Path


def _san(host: str):
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def make_certificates(directory: Path, *, hosts: Sequence[str] = ("127.0.0.1", "localhost"),
                      days: int = 30) -> Certificates:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if not hosts:
        raise ValueError("make_certificates needs at least one host for the subject alternative names")
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "uedp federation test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    out = Certificates(ca=directory / "ca.pem", cert=directory / "server.pem", key=directory / "server.key")
    out.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(out.key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
    _write_private(directory / "ca.key", ca_key.private_bytes(serialization.Encoding.PEM,
                                                              serialization.PrivateFormat.PKCS8,
                                                              serialization.NoEncryption()))
    return out


@dataclass(frozen=True)
class NodeKey:
    name: str
    private: Path  # OpenSSH private key, mode 0600: flower-supernode --auth-supernode-private-key
    public: Path  # OpenSSH public key ("ecdsa-sha2-nistp384 ... NAME"): flwr supernode register


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def make_node_keys(directory: Path, names: Sequence[str]) -> list[NodeKey]:
    """Write DIRECTORY/NAME.key (private, 0600) and DIRECTORY/NAME.pub for each name: ECDSA P-384 key pairs in
    OpenSSH format, one per SuperNode (data owner). An existing key file is replaced."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    bad = [n for n in names if not _NAME.fullmatch(n)]
    if bad or len(set(names)) != len(names):
        raise ValueError(f"key names must be distinct file names of letters, digits, '_', '.', '-' (got {list(names)})")
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for name in names:
        key = ec.generate_private_key(ec.SECP384R1())
        nk = NodeKey(name=name, private=directory / f"{name}.key", public=directory / f"{name}.pub")
        _write_private(nk.private, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                                     serialization.NoEncryption()))
        nk.public.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                            serialization.PublicFormat.OpenSSH)
                              + f" {name}\n".encode())
        out.append(nk)
    return out


def _write_private(path: Path, data: bytes) -> None:
    atomic_write_bytes(path, data, mode=PRIVATE)  # a new file of mode 0600, also where one existed wider
