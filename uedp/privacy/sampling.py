"""Entity sampling by keyed hash, and the entity-cap slots (docs/mechanism.md step 3, and the slot rule of step 4).

Every sampled client receives the same secret round key `k_t` and decides locally, with no entity list ever
leaving the client, which entities are sampled in the round:

    h_int(k, tag, *parts) = int.from_bytes(BLAKE2b(encode(tag, *parts), key=k, digest_size=8), "big")
    h(k, tag, *parts)     = h_int(k, tag, *parts) / 2**64                       (uniform in [0, 1))

    entity e sampled           iff  h(k, "E", e) < q_e
    extended entity s sampled  iff  h(k, "S", *s) < q_s,   s = extended_entity(user, sid) = (user, sid)
    permitted slots of e       =    {h_int(k, "P", e, j) mod m_max : j < k_cap}

`encode` is prefix-free, hence unambiguous: each item is a type byte (`s` str, `i` int, `b` bytes), an
8-byte big-endian length and the payload (UTF-8 for str, signed big-endian for int), so ("ab", "c") and
("a", "bc") or "1" and 1 never collide. "h < q" is decided on integers: h_int < floor(q * 2**64), so that
the probability of a sampled entity is floor(q 2^64) / 2^64 <= q (the accountant's q is an upper bound):
exactly q for every float q >= 2^-12, whose q * 2^64 is an integer (docs/proofs.md section 2).

The round key is a `RoundKey`: 16 bytes from `secrets`, whose repr/str never show the key material. It is
sent to the sampled clients only (`to_bytes()`), never logged, never stored. A client that colludes with the
adversary reveals which entities were sampled in that round (see docs/mechanism.md section 1).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from fractions import Fraction

from uedp.checks import positive_int, probability

KEY_BYTES = 16
_HASH_RANGE = 1 << 64

TAG_ENTITY = "E"
TAG_EXTENDED = "S"
TAG_PERMIT = "P"


class RoundKey:
    """A secret 128-bit round key. Its repr and str are redacted; `to_bytes()` is for sending it to the
    sampled clients and nothing else. Equality is constant-time; keys are not hashable."""

    __slots__ = ("_material",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, material: bytes) -> None:
        if not isinstance(material, bytes | bytearray):
            raise TypeError(f"round key must be bytes, got {type(material).__name__}")
        if len(material) != KEY_BYTES:
            raise ValueError(f"round key must be {KEY_BYTES} bytes, got {len(material)}")
        self._material = bytes(material)

    @classmethod
    def generate(cls) -> RoundKey:
        return cls(secrets.token_bytes(KEY_BYTES))

    def to_bytes(self) -> bytes:
        return self._material

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RoundKey):
            return NotImplemented
        return hmac.compare_digest(self._material, other._material)

    def __repr__(self) -> str:
        return "RoundKey(<redacted>)"

    __str__ = __repr__


def new_round_key() -> RoundKey:
    """A fresh round key from the operating system's CSPRNG (`secrets`)."""
    return RoundKey.generate()


def as_round_key(key: RoundKey | bytes) -> RoundKey:
    return key if isinstance(key, RoundKey) else RoundKey(key)


def _encode_item(item: object) -> bytes:
    if isinstance(item, str):
        kind, payload = b"s", item.encode("utf-8")
    elif isinstance(item, bool):  # bool is an int subclass: refuse rather than guess
        raise TypeError("h_int: bool is not a valid hash part")
    elif isinstance(item, int):
        kind, payload = b"i", item.to_bytes(item.bit_length() // 8 + 1, "big", signed=True)
    elif isinstance(item, bytes):
        kind, payload = b"b", item
    else:
        raise TypeError(f"h_int: parts must be str, int or bytes, got {type(item).__name__}")
    return kind + len(payload).to_bytes(8, "big") + payload


def encode(tag: str, *parts: object) -> bytes:
    """The unambiguous (prefix-free) byte encoding of (tag, *parts)."""
    if not isinstance(tag, str):
        raise TypeError(f"h_int: tag must be str, got {type(tag).__name__}")
    return b"".join(_encode_item(item) for item in (tag, *parts))


def h_int(key: RoundKey | bytes, tag: str, *parts: object) -> int:
    """64-bit keyed hash of (tag, *parts): BLAKE2b with key = the round key, digest_size = 8, big-endian."""
    material = as_round_key(key).to_bytes()
    digest = hashlib.blake2b(encode(tag, *parts), key=material, digest_size=8).digest()
    return int.from_bytes(digest, "big")


def h(key: RoundKey | bytes, tag: str, *parts: object) -> float:
    """`h_int / 2**64`, in [0, 1). For decisions use `threshold` (exact), not this float."""
    return h_int(key, tag, *parts) / _HASH_RANGE


def check_probability(name: str, q: float) -> float:
    return probability(name, q)


def threshold(q: float, *, name: str = "q") -> int:
    """t = floor(q * 2**64): P(h_int < t) = t / 2**64 <= q for a uniform 64-bit h_int, equal to q whenever
    q * 2**64 is an integer (every float q >= 2**-12; t = 2**64 when q = 1)."""
    q = check_probability(name, q)
    return math.floor(Fraction(q) * _HASH_RANGE)


def extended_entity(user: str, sid: int) -> tuple[str, int]:
    """The identity of the extended entity of a sentence with no detected entity: (user, sentence id)."""
    if not isinstance(user, str):
        raise TypeError(f"user must be str, got {type(user).__name__}")
    return (user, int(sid))


def entity_sampled(key: RoundKey | bytes, e: str, q_e: float) -> bool:
    return h_int(key, TAG_ENTITY, e) < threshold(q_e, name="q_e")


def extended_sampled(key: RoundKey | bytes, s: tuple[str, int], q_s: float) -> bool:
    return h_int(key, TAG_EXTENDED, *s) < threshold(q_s, name="q_s")


def check_cap(k_cap: int | None, m_max: int | None) -> None:
    if k_cap is None:
        return
    positive_int("k_cap", k_cap, note="or None")
    positive_int("m_max", m_max, note="when k_cap is set")


def permitted_slots(key: RoundKey | bytes, e: str, k_cap: int, m_max: int) -> set[int]:
    """The slots in which entity e may be used this round: {h_int(k, "P", e, j) mod m_max : j < k_cap}.

    At most k_cap distinct slots, and slots hold distinct users, so at most k_cap clients use e."""
    check_cap(k_cap, m_max)
    key = as_round_key(key)
    return {h_int(key, TAG_PERMIT, e, j) % m_max for j in range(k_cap)}
