"""The places of a run: which connected Flower node, if any, stands in each of the N public places.

The mechanism samples N public places (docs/proofs.md section 1): Poisson coins, truncation and slots are
drawn over places, never over whatever nodes happen to be connected, so that one owner's presence cannot
change another's part in a round. A `Places` object maps a grid's nodes onto the places each round:

    places.size                 N, public (the accountant's num_users, Z = q_u N)
    places.assign(grid)         -> Assignment: node id per place (None: the place is empty this round)
    places.not_private          -> why the map makes the run not private, or None

Two maps:

- `KeyedPlaces(fingerprints)` (deployments: owners mode). A PUBLIC map fixed before the run: place i is the
  node whose registered public key has fingerprint i (`key_fingerprint`: SHA-256 of the key's DER
  SubjectPublicKeyInfo). The grid reports each node's registered key (Flower's `Grid.get_nodes()`,
  `NodeInfo.public_key`). A node whose key is not in the map is never sent a message and never stops,
  delays or changes a round: it is not a place. The map is only sound with SuperNode authentication
  (`flower-superlink --enable-supernode-auth`, every invited key registered with `flwr supernode
  register`): without it a node chooses the key it reports, and a fresh one at each start. It is read from
  a file, one fingerprint per line in place order (`read_places`); `uedp fingerprint KEY.pub ...` prints
  the lines for the owners' public keys.
- `SortedNodes(n)` (an int `places=N` becomes one; SIMULATIONS only): the connected node ids, sorted, fill the
  first places; places beyond them are empty, and node ids beyond the N places are never sent a message
  (`Assignment.ignored` counts them, for the operator log). In a simulation the operator starts the nodes and
  they hold the corpus's users, so the node set does not depend on the data (docs/proofs.md section 1, corpus
  mode). In a DEPLOYMENT node ids are whatever the SuperLink assigned to whoever connected: an extra node, or
  an owner's absence, moves every later owner to another place and changes which node is sent what (an
  adversarial read built such a world: epsilon infinite). So `assign` looks at the grid (`grid_kind`, through
  wrappers of it) and refuses anything but Flower's simulation grid (`InMemoryGrid`) or an in-process grid of
  one's own (not Flower's) that declares `in_process_simulation = True` (the project's runtime/local_grid.py),
  naming `KeyedPlaces` and `uedp fingerprint`. `SortedNodes(n, outside_simulation=True)` is the explicit
  opt-in for processes an operator starts by hand; the run is then NOT private (`NODE_ORDER_LABEL`, which the
  wrapper's report lists under `not_private`).

An in-process grid (runtime/local_grid.py) reports one public key per node it was built with; its owners'
map is built from those keys by the runner (the grid cannot be joined by any other node).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import types
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from uedp.checks import positive_int
from uedp.errors import ConfigError

FINGERPRINT = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Assignment:
    """One round's map: `nodes[i]` is the node id standing in place i (None: empty this round); `ignored`
    counts the connected nodes that stand in no place (never sent a message)."""

    nodes: tuple[int | None, ...]
    ignored: int = 0

    @property
    def connected(self) -> int:
        return sum(n is not None for n in self.nodes)


class Places(Protocol):
    @property
    def size(self) -> int: ...

    @property
    def not_private(self) -> str | None: ...

    def assign(self, grid: Any) -> Assignment: ...


SIMULATION, IN_PROCESS, DEPLOYMENT, UNKNOWN = "simulation", "in_process", "deployment", "unknown"
# Attributes through which a grid wrapper holds the grid it wraps (read from the wrapper's own __dict__, never
# through a delegating __getattr__).
WRAPPED_GRID_ATTRIBUTES = ("grid", "_grid", "inner", "_inner", "wrapped", "_wrapped", "__wrapped__")
NODE_ORDER_LABEL = ("not private: places by node order (SortedNodes outside a simulation: which node stands in "
                    "which place depends on who connected)")


@functools.lru_cache(maxsize=1)
def _flower_grids() -> tuple[type, type] | None:
    try:
        from flwr.serverapp import Grid
        from flwr.superlink.grid.inmemory_grid import InMemoryGrid
    except ImportError:  # pragma: no cover - every supported Flower release has both (tests/test_flower_versions.py)
        return None
    return Grid, InMemoryGrid


def _flower_grid_kind(grid: Any) -> str | None:
    classes = _flower_grids()
    if classes is None:  # pragma: no cover
        return None
    if isinstance(grid, classes[1]):
        return SIMULATION
    if isinstance(grid, classes[0]):  # HttpGrid (a deployment's SuperLink), or any other grid of Flower's
        return DEPLOYMENT
    return None


def grid_kind(grid: Any) -> str:
    """The kind of grid a ServerApp runs on: DEPLOYMENT if a Flower grid other than the simulation's (HttpGrid,
    also subclassed) is the grid or is reachable from it (`_reachable`: attributes, slots, containers, bound
    methods, partials, closures, weak references, a few levels deep: a wrapper of one's own cannot hide one);
    else SIMULATION if Flower's InMemoryGrid is; else IN_PROCESS if an object of the wrapper chain (the grid, and
    what it holds under WRAPPED_GRID_ATTRIBUTES) is of a class that declares `in_process_simulation = True`:
    every node runs in this process and no one else can join it, as the project's runtime/local_grid.py; an
    author's claim, like SortedNodes' opt-in; else UNKNOWN."""
    kinds = {k for k in map(_flower_grid_kind, _reachable(grid)) if k is not None}
    if DEPLOYMENT in kinds:
        return DEPLOYMENT
    if SIMULATION in kinds:
        return SIMULATION
    seen: set[int] = set()
    while grid is not None and id(grid) not in seen:
        seen.add(id(grid))
        if getattr(type(grid), "in_process_simulation", False) is True:
            return IN_PROCESS
        own = _attributes(grid)
        grid = next((own[a] for a in WRAPPED_GRID_ATTRIBUTES if own.get(a) is not None), None)
    return UNKNOWN


_LEAVES = (str, bytes, int, float, bool, complex, type(None), types.ModuleType, type)


def _children(obj: Any) -> list[Any]:
    """What `obj` holds: its attributes and slots, a container's items, a bound method's instance, a partial's
    function and arguments, a function's closure cells, a weak reference's target."""
    if isinstance(obj, dict):
        return [*obj.keys(), *obj.values()]
    if isinstance(obj, list | tuple | set | frozenset):
        return list(obj)
    if isinstance(obj, weakref.ref):
        return [obj()]
    if isinstance(obj, types.MethodType):
        return [obj.__self__, obj.__func__]
    if isinstance(obj, functools.partial):
        return [obj.func, *obj.args, *obj.keywords.values()]
    if isinstance(obj, types.FunctionType):
        return [c.cell_contents for c in obj.__closure__ or () if _filled(c)]
    return list(_attributes(obj).values())


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _reachable(root: Any, depth: int = 4, limit: int = 2000) -> list[Any]:
    """`root` and what it holds (`_children`), breadth first, to `depth` levels and at most `limit` objects."""
    seen: set[int] = set()
    found: list[Any] = []
    level = [root]
    for _ in range(depth + 1):
        following: list[Any] = []
        for obj in level:
            if isinstance(obj, _LEAVES) or id(obj) in seen or len(found) >= limit:
                continue
            seen.add(id(obj))
            found.append(obj)
            if _flower_grid_kind(obj) is None:  # a Flower grid's own insides are not wrappers
                following.extend(_children(obj))
        level = following
    return found


def _attributes(obj: Any) -> dict[str, Any]:
    """An object's own attributes: its __dict__ and its __slots__ (never through a delegating __getattr__)."""
    try:
        own = dict(object.__getattribute__(obj, "__dict__"))
    except (AttributeError, TypeError):
        own = {}
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            try:
                own.setdefault(name, object.__getattribute__(obj, name))
            except (AttributeError, TypeError):
                continue
    return own


@dataclass(frozen=True)
class SortedNodes:
    """The first `size` connected node ids, sorted, are places 0, 1, ... on a simulation's grid (see the
    module docstring); `outside_simulation=True` accepts any grid and labels the run not private."""

    size: int
    outside_simulation: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", positive_int("the number of places", self.size))

    @property
    def not_private(self) -> str | None:
        """Why this map makes a run not private (None: it does not, on the grids it accepts)."""
        return NODE_ORDER_LABEL if self.outside_simulation else None

    def check_grid(self, grid: Any) -> None:
        """ConfigError unless `grid` is a simulation's (or the map was opted in outside one)."""
        if self.outside_simulation:
            return
        kind = grid_kind(grid)
        if kind not in (SIMULATION, IN_PROCESS):
            what = ("a deployment's grid (HttpGrid)" if kind == DEPLOYMENT else
                    f"a grid of type {type(grid).__name__} that is not known to be a simulation's")
            raise ConfigError(
                f"places={self.size} (an int, or SortedNodes) maps places by sorted node id, which is sound only in "
                f"a simulation; this ServerApp runs on {what}. In a deployment pass places=KeyedPlaces(...) or "
                "read_places(PATH): the place map of the owners' registered SuperNode keys (`uedp fingerprint "
                "KEY.pub ...` prints its lines; flower-superlink --enable-supernode-auth). For processes you start "
                "yourself, SortedNodes(N, outside_simulation=True) runs, labelled not private")

    def assign(self, grid: Any) -> Assignment:
        self.check_grid(grid)
        nodes = sorted(grid.get_node_ids())
        kept: list[int | None] = list(nodes[: self.size])
        return Assignment(tuple(kept + [None] * (self.size - len(kept))), ignored=max(0, len(nodes) - self.size))


def key_fingerprint(key: bytes | str) -> str:
    """The fingerprint of a public key: SHA-256 (hex) of its DER SubjectPublicKeyInfo. Accepts the key as
    Flower stores it (PEM, `NodeInfo.public_key`), DER, or an OpenSSH public key line (`*.pub`, what `flwr
    supernode register` reads), so the same key has one fingerprint whatever its encoding."""
    return _fingerprint(key.encode() if isinstance(key, str) else bytes(key))


@functools.lru_cache(maxsize=65536)  # a round asks for every connected node's key: parse each key once
def _fingerprint(data: bytes) -> str:
    from cryptography.hazmat.primitives import serialization

    loaders = (serialization.load_pem_public_key, serialization.load_der_public_key,
               serialization.load_ssh_public_key)
    for load in loaders:
        try:
            public = load(data)
        except Exception:  # noqa: BLE001 - cryptography raises UnsupportedAlgorithm too: not a key, whatever it is
            continue
        der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        return hashlib.sha256(der).hexdigest()
    raise ValueError("not a public key (PEM, DER or OpenSSH)")


def _node_key(info: Any) -> bytes:
    key = getattr(info, "public_key", b"")
    return bytes(key) if isinstance(key, bytes | bytearray) else b""


@dataclass(frozen=True)
class KeyedPlaces:
    """Place i is the node whose registered public key has fingerprint `fingerprints[i]` (module docstring).
    Two connected nodes with one key (a node restarted while its old id is still listed) give the place to
    the one Flower lists as online, then to the most recently activated, then to the smaller id: a rule
    about node metadata only."""

    fingerprints: tuple[str, ...]
    source: str = field(default="", compare=False)  # where the map was read (error messages)

    def __post_init__(self) -> None:
        if not self.fingerprints:
            raise ConfigError(f"the place map{self._where} is empty: list one public-key fingerprint per place")
        for i, fp in enumerate(self.fingerprints):
            if not isinstance(fp, str) or not FINGERPRINT.fullmatch(fp):
                raise ConfigError(f"the place map{self._where}, place {i}: {fp!r} is not a SHA-256 fingerprint "
                                  "(64 lower-case hex digits: `uedp fingerprint KEY.pub`)")
        seen: dict[str, int] = {}
        for i, fp in enumerate(self.fingerprints):
            if fp in seen:
                raise ConfigError(f"the place map{self._where}: places {seen[fp]} and {i} have the same key")
            seen[fp] = i

    @property
    def _where(self) -> str:
        return f" ({self.source})" if self.source else ""

    @property
    def size(self) -> int:
        return len(self.fingerprints)

    @property
    def not_private(self) -> None:
        return None

    def assign(self, grid: Any) -> Assignment:
        index = {fp: i for i, fp in enumerate(self.fingerprints)}
        best: dict[int, tuple[tuple[Any, ...], int]] = {}
        ignored = 0
        for info in grid.get_nodes():
            key = _node_key(info)
            try:
                place = index.get(key_fingerprint(key)) if key else None
            except ValueError:
                place = None
            if place is None:
                ignored += 1
                continue
            rank = (getattr(info, "status", "") == "online", str(getattr(info, "last_activated_at", "")),
                    -int(info.node_id))
            if place not in best or rank > best[place][0]:
                if place in best:
                    ignored += 1
                best[place] = (rank, int(info.node_id))
            else:
                ignored += 1
        return Assignment(tuple(best[i][1] if i in best else None for i in range(self.size)), ignored=ignored)


def read_places(path: str | os.PathLike[str]) -> KeyedPlaces:
    """The place map in file `path`: one fingerprint per line in place order; blank lines and text after
    `#` are ignored. ConfigError naming the file and line for anything else."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"place map {p}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"place map {p}: cannot be read ({exc})") from None
    fingerprints = []
    for number, line in enumerate(text.splitlines(), 1):
        item = line.split("#", 1)[0].strip().lower()
        if not item:
            continue
        if not FINGERPRINT.fullmatch(item):
            raise ConfigError(f"place map {p}, line {number}: {item[:80]!r} is not a SHA-256 key fingerprint "
                              "(64 hex digits: `uedp fingerprint KEY.pub`)")
        fingerprints.append(item)
    return KeyedPlaces(tuple(fingerprints), source=str(p))


def write_places(path: str | os.PathLike[str], keys: Iterable[bytes | str], names: Sequence[str] = ()) -> Path:
    """Write the place map of `keys` (public keys, any encoding `key_fingerprint` reads) to `path`, each
    line commented with its name when `names` are given."""
    keys = list(keys)
    lines = ["# UeDP place map: one public-key fingerprint per place, in place order"]
    for i, key in enumerate(keys):
        note = f"  # {names[i]}" if i < len(names) else ""
        lines.append(key_fingerprint(key) + note)
    out = Path(path)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out
