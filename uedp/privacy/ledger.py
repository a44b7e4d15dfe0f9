"""The privacy ledger: every round's public mechanism parameters, in order (docs/mechanism.md step 9 and section 4).

A `RoundRecord` holds one round's mechanism parameters and nothing else: no key, no seed, no per-client
statistic, no count of sampled users. The `Ledger` is the list of records; epsilons are always computed
FROM it (consecutive identical rounds grouped, see uedp.privacy.accounting), never accumulated by hand.
In the file a record's keys are its field names, except where `FILE_KEYS` keeps an older one (the public
denominator `denominator` is saved as "Z", the accounting rule `rule` as "method"), so the file and every
hash are what they were before a rename.

`append` validates first (a valid record whose round is the next one: rounds are contiguous from 1) and
only then changes state, so a round can never be recorded (or spent) twice, nor skipped. A run records the
round BEFORE it releases or saves the model; the ledger is saved with each checkpoint (`save`: atomic write,
the file and its directory fsynced) and a resumed run continues it (`Ledger.resume`). `check_budget`
answers, before a round runs, whether it would take epsilon above the target.

Hash chain (version 2 files). Each record carries `prev`, the hash of the record before it (round 1: the
hash of the ledger's header, its format, delta and number of users), and `hash` = SHA-256 of `prev` and the
record's canonical JSON. The file ends with its `head` (last round, its hash); `Ledger.head_at(t)` gives the
head after round t, which the server writes into every metrics row and every checkpoint (uedp/flower/resume.py
requires them on resume). Loading refuses, naming the round, a record whose hash or `prev` does not match
(an edited, deleted, inserted or reordered round), rounds that are not 1, 2, ..., and a head other than the
last record's (the last rounds deleted). The chain is UNKEYED: it detects corruption and operator error
(an older copy restored, a round deleted by hand), not someone who rewrites the whole file consistently;
the metrics rows and checkpoint that carry the head are the second copy it is checked against.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from uedp.checks import non_negative_int, one_of, positive
from uedp.errors import ConfigError
from uedp.files import PRIVATE, atomic_write_json
from uedp.privacy.accounting import ADJACENCIES, DEFAULT_DELTA, Mechanism, epsilon_of, epsilons_of
from uedp.privacy.composition import check_delta

FORMAT = "uedp-ledger"
VERSION = 2  # 2: hash chain; version 1 files (no chain) are still read, and saved again as version 2
READABLE_VERSIONS = (1, 2)
HASH = "sha256"
# How the round's noise was drawn (uedp.privacy.noise); "unrecorded": a version 1 ledger (the noise was the
# CSPRNG-seeded Philox draw then: "philox").
NOISE_MODES = ("secure", "philox", "philox_fixed_seed", "none", "unrecorded")
# A RoundRecord field whose key in the file (ledger.json, and the checkpoint's copy) is the older name: the
# file and every record's hash are what they were before the field was renamed.
FILE_KEYS = {"denominator": "Z", "rule": "method"}


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


@dataclass(frozen=True)
class Head:
    """The ledger's last round and its hash (round 0 and the header's hash for an empty ledger)."""

    round: int
    hash: str

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.round, "hash": self.hash}

    @classmethod
    def from_dict(cls, data: Any, *, where: str) -> Head:
        if (not isinstance(data, Mapping) or set(data) != {"round", "hash"} or isinstance(data["round"], bool)
                or not isinstance(data["round"], int) or not isinstance(data["hash"], str)):
            raise ConfigError(f"{where}: the ledger head must be {{\"round\": int, \"hash\": str}}, got {data!r}")
        return cls(data["round"], data["hash"])


@dataclass(frozen=True)
class RoundRecord:
    """One round's public mechanism parameters. `sigma` (the absolute noise std) is derived, not stored."""

    round: int
    rule: str  # the accounting rule (uedp.privacy.sensitivity.RULES; the file's key "method": FILE_KEYS)
    q_u: float
    q_e: float
    q_s: float
    m_max: int | None
    k_cap: int | None
    beta: float
    w_max: float
    z: float
    denominator: float  # the public denominator Z (the file's key "Z": FILE_KEYS)
    gamma: float = 0.0  # uedp_split: the entity part's clip (absolute, like beta); 0 for every other rule
    noise: str = "unrecorded"  # how the noise was drawn: NOISE_MODES (the server records its noise source's)

    def __post_init__(self) -> None:
        object.__setattr__(self, "round", non_negative_int("round", self.round))
        one_of(f"round {self.round}: noise", self.noise, NOISE_MODES)
        object.__setattr__(self, "beta", positive("beta", self.beta))
        w_max = positive("w_max", self.w_max)
        if w_max > 1.0:
            raise ConfigError(f"w_max must lie in (0, 1], got {self.w_max!r}")
        object.__setattr__(self, "w_max", w_max)
        object.__setattr__(self, "denominator", positive("denominator", self.denominator))
        object.__setattr__(self, "gamma", float(self.gamma))
        mech = self.mechanism  # validates the rule, probabilities, z, m_max, k_cap
        for name in ("q_u", "q_e", "q_s", "z"):
            object.__setattr__(self, name, getattr(mech, name))

    @property
    def mechanism(self) -> Mechanism:
        return Mechanism(
            rule=self.rule, z=self.z, q_u=self.q_u, q_e=self.q_e, q_s=self.q_s,
            m_max=self.m_max, k_cap=self.k_cap, gamma=self.gamma / self.beta,
        )  # fmt: skip

    @property
    def sigma(self) -> float:
        """The noise std added to the sum of updates: mechanism sigma * w_max * beta."""
        return self.mechanism.sigma * self.w_max * self.beta

    def _file_dict(self) -> dict[str, Any]:
        """The record as the file holds it: its fields in order, under their file keys (FILE_KEYS)."""
        return {FILE_KEYS.get(k, k): v for k, v in asdict(self).items()}

    def to_dict(self) -> dict[str, Any]:
        return {**self._file_dict(), "sigma": self.sigma}

    def chained(self, prev: str) -> str:
        """The record's hash in a chain whose previous hash is `prev` (of its file keys: FILE_KEYS)."""
        return hashlib.sha256(prev.encode("ascii") + b"\n" + _canonical(self._file_dict())).hexdigest()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RoundRecord:
        """The record of a saved dict (its file keys: FILE_KEYS)."""
        keys = {FILE_KEYS.get(f.name, f.name): f.name for f in fields(cls)}  # file key -> field
        unknown = sorted(set(data) - set(keys) - {"sigma"})
        # ledgers written before uedp_split have no gamma, version 1 ledgers no noise mode
        missing = sorted(set(keys) - set(data) - {"gamma", "noise"})
        if unknown or missing:
            raise ConfigError(f"round record: unknown fields {unknown}, missing fields {missing}")
        record = cls(**{name: data[key] for key, name in keys.items() if key in data})
        if "sigma" in data and not math.isclose(float(data["sigma"]), record.sigma, rel_tol=1e-9):
            raise ConfigError(
                f"round {record.round}: recorded sigma {data['sigma']!r} differs from its parameters' "
                f"{record.sigma!r}"
            )
        return record


@dataclass(frozen=True)
class BudgetCheck:
    allowed: bool
    epsilon_after: float  # the largest of the claimed epsilons after the round
    target_epsilon: float
    epsilons_after: dict[str, float] = field(default_factory=dict)  # per claimed adjacency

    @property
    def exceeded(self) -> list[str]:
        """The claimed adjacencies the round would take above the target."""
        return [k for k, v in self.epsilons_after.items() if not v <= self.target_epsilon]


class Ledger:
    """The rounds run so far, with the delta (and number of users) the epsilons are reported at."""

    def __init__(
        self,
        *,
        delta: float = DEFAULT_DELTA,
        num_users: int | None = None,
        records: Iterable[RoundRecord] = (),
    ) -> None:
        self.delta = check_delta(delta, num_users)
        self.num_users = num_users
        self._records: list[RoundRecord] = []
        self._hashes: list[str] = []  # _hashes[i]: the chain's hash after record i
        for record in records:
            self.append(record)

    @property
    def records(self) -> tuple[RoundRecord, ...]:
        return tuple(self._records)

    def copy(self) -> Ledger:
        """An independent copy (the records are immutable; nothing is re-validated or re-hashed)."""
        other = Ledger(delta=self.delta, num_users=self.num_users)
        other._records, other._hashes = list(self._records), list(self._hashes)
        return other

    def __len__(self) -> int:
        return len(self._records)

    @property
    def last_round(self) -> int | None:
        return self._records[-1].round if self._records else None

    @property
    def genesis(self) -> str:
        """The chain's start: the hash of the header (format, delta, number of users)."""
        header = {"format": FORMAT, "delta": self.delta, "num_users": self.num_users}
        return hashlib.sha256(_canonical(header)).hexdigest()

    @property
    def head(self) -> Head:
        return self.head_at(self.last_round or 0)

    def head_at(self, round: int) -> Head:
        """The chain's head after round `round` (0: before any round)."""
        if round == 0:
            return Head(0, self.genesis)
        if not 1 <= round <= len(self._records):
            raise ConfigError(f"round {round} is not in the ledger (rounds 1..{len(self._records)})")
        return Head(round, self._hashes[round - 1])

    def _check_next(self, record: RoundRecord) -> None:
        if not isinstance(record, RoundRecord):
            raise TypeError(f"expected a RoundRecord, got {type(record).__name__}")
        expected = len(self._records) + 1
        if record.round != expected:
            if record.round < expected:
                why = "rounds must strictly increase (a round is never recorded twice)"
            else:
                why = (f"round(s) {expected}..{record.round - 1} are missing (rounds are contiguous from 1: a "
                       "round is never skipped)" if record.round > expected + 1 else
                       f"round {expected} is missing (rounds are contiguous from 1: a round is never skipped)")
            after = f"round {self._records[-1].round}" if self._records else "the start"
            raise ConfigError(f"round {record.round} cannot follow {after}: {why}")

    def append(self, record: RoundRecord) -> None:
        self._check_next(record)
        self._hashes.append(record.chained(self.head.hash))
        self._records.append(record)

    def runs(self, extra: Iterable[RoundRecord] = ()) -> list[tuple[Mechanism, int]]:
        """The runs the accountant composes (uedp.privacy.accounting): consecutive rounds (then `extra`) with the
        same mechanism, as (mechanism, count)."""
        out: list[tuple[Mechanism, int]] = []
        for record in (*self._records, *extra):
            mech = record.mechanism
            if out and out[-1][0] == mech:
                out[-1] = (mech, out[-1][1] + 1)
            else:
                out.append((mech, 1))
        return out

    def epsilons(self, delta: float | None = None) -> dict[str, float | int | str]:
        """eps_uedp, eps_user, eps_undetected, eps_rdp_bound (+ delta, rounds, the undetected bound's name
        and delta_trunc), computed from the records."""
        delta = self.delta if delta is None else check_delta(delta, self.num_users)
        return epsilons_of(self.runs(), delta=delta, num_users=self.num_users).as_dict()

    def check_budget(
        self, next_record: RoundRecord, *, target_epsilon: float, adjacency: str | Sequence[str] = "uedp"
    ) -> BudgetCheck:
        """Would running `next_record` take any claimed epsilon (`adjacency`: "uedp", "user", "undetected",
        or several, e.g. ("uedp", "undetected")) above the target?"""
        target = positive("target_epsilon", target_epsilon)
        claims = (adjacency,) if isinstance(adjacency, str) else tuple(adjacency)
        if not claims or any(c not in ADJACENCIES for c in claims):
            raise ConfigError(f"adjacency must be one or more of {', '.join(ADJACENCIES)}, got {adjacency!r}")
        self._check_next(next_record)
        runs = self.runs([next_record])
        after = {c: epsilon_of(runs, c, delta=self.delta, num_users=self.num_users) for c in claims}
        worst = max(after.values())
        return BudgetCheck(allowed=worst <= target, epsilon_after=worst, target_epsilon=target,
                           epsilons_after=after)

    # -- persistence -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        prevs = [self.genesis, *self._hashes[:-1]]
        return {
            "format": FORMAT,
            "version": VERSION,
            "chain": HASH,
            "delta": self.delta,
            "num_users": self.num_users,
            "rounds": [{**r.to_dict(), "prev": p, "hash": h} for r, p, h in zip(self._records, prevs, self._hashes)],
            "head": self.head.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ledger:
        """The ledger of a saved document; ConfigError naming the round for a broken chain (version 2), rounds
        that are not contiguous from 1, or a head that is not the last record's."""
        if (not isinstance(data, Mapping) or data.get("format") != FORMAT
                or data.get("version") not in READABLE_VERSIONS):
            raise ConfigError(f"not a {FORMAT} document of version {' or '.join(map(str, READABLE_VERSIONS))}")
        chained = data["version"] >= 2
        fields_ = {"format", "version", "delta", "num_users", "rounds"} | ({"chain", "head"} if chained else set())
        unknown, missing = sorted(set(data) - fields_), sorted(fields_ - set(data))
        if unknown or missing:
            raise ConfigError(f"ledger: unknown fields {unknown}, missing fields {missing}")
        if chained and data["chain"] != HASH:
            raise ConfigError(f"ledger: chain must be {HASH!r}, got {data['chain']!r}")
        if not isinstance(data["rounds"], list):
            raise ConfigError("ledger: rounds must be a list")
        ledger = cls(delta=data["delta"], num_users=data["num_users"])
        for i, raw in enumerate(data["rounds"], 1):
            if not isinstance(raw, Mapping):
                raise ConfigError(f"ledger: entry {i} of rounds is not an object")
            raw = dict(raw)
            links = {k: raw.pop(k, None) for k in ("prev", "hash")} if chained else {}
            try:
                record = RoundRecord.from_dict(raw)
            except (ConfigError, TypeError) as exc:
                raise ConfigError(f"ledger: entry {i} of rounds (round {raw.get('round')!r}): {exc}") from None
            ledger._check_next(record)
            if chained:
                if links["prev"] != ledger.head.hash:
                    raise ConfigError(
                        f"ledger: round {record.round}'s previous hash does not match "
                        f"{'the header' if i == 1 else f'round {i - 1}'}: a round before it was deleted, "
                        "inserted, reordered or edited (or the header's delta/num_users changed)")
                if links["hash"] != record.chained(links["prev"]):
                    raise ConfigError(f"ledger: round {record.round}'s hash does not match its record: round "
                                      f"{record.round} was edited")
            ledger.append(record)
        if chained:
            head = Head.from_dict(data["head"], where="ledger")
            if head != ledger.head:
                end = ledger.head.round
                why = f": round(s) {end + 1}..{head.round} were deleted" if head.round > end else " (or it was edited)"
                raise ConfigError(f"ledger: its head is round {head.round} but its records end at round {end}{why}")
        return ledger

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the ledger as JSON atomically (temporary file in the same directory, then rename)."""
        # mode 0600, as the ledger has always been written (tempfile.mkstemp's mode before uedp.files)
        return atomic_write_json(path, self.to_dict(), mode=PRIVATE, indent=1, allow_nan=False)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Ledger:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"ledger file {path} does not exist") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"ledger file {path}: invalid JSON ({exc})") from None
        try:
            return cls.from_dict(data)
        except (ConfigError, KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"ledger file {path}: {exc}") from None

    @classmethod
    def resume(
        cls, path: str | os.PathLike[str], *, delta: float = DEFAULT_DELTA, num_users: int | None = None
    ) -> Ledger:
        """The ledger saved at `path` (a resumed run continues it), or a new empty one if there is none.
        The saved delta and number of users must match the run's."""
        if not Path(path).exists():
            return cls(delta=delta, num_users=num_users)
        ledger = cls.load(path)
        if not math.isclose(ledger.delta, float(delta), rel_tol=1e-12) or ledger.num_users != num_users:
            raise ConfigError(
                f"ledger file {path} was written with delta={ledger.delta}, num_users={ledger.num_users}; "
                f"this run has delta={delta}, num_users={num_users}"
            )
        return ledger
