"""An in-process stand-in for Flower's Grid: each message is answered by the project's ClientApp itself
(client/app.py's `make_client_app`, the app every Flower node runs, its mods included: `app(message,
context)`), called one after the other in this process with the Context a SuperNode would pass. Same
strategy, same server loop, same message path as a Flower run, without Ray or gRPC: used to tune defaults
quickly and, side by side with a Flower simulation, to measure Flower's round overhead (studies/benchmark.py).

Node ids are partition ids (node config partition-id), or with federation.data = owners index the owners'
files (node config data-path). The app is `make_client_app(cfg, update=client_fn, mods=[mod])`: the client
round `client_fn` (default: the real one, client.update.client_update; the audit passes a broken control)
inside the client mod `mod` (default uedp.flower.mod.uedp_mod; the audit's per-step control passes one with
its broken bound); or `app`, a ClientApp given whole (the benchmark's, with its timing mod: studies/), which
then replaces both.

Places. Like a SuperLink, the grid reports each node with a public key (`get_nodes`): node i's is a fixed
EC key derived from i, the stand-in for an owner's registered SuperNode key. The in-process grid is joined
by no one but the nodes it is built with, so its owners' place map is built from those keys by the runner
(`owner_places`: place i is owner file i); a test adds an intruder by giving the grid more files than places.

A node listed in `failing` raises (like a crashing client) and comes back as an error reply; so does any exception the
client code raises (as in Flower, where a raising ClientApp yields an error reply and the round goes on).
Only the exception's type is kept: its message could hold data. Every reply is a flwr Message built with
`reply_to` the message it answers (as a SuperLink ties a reply to its message: source node, reply-to id,
group), whatever the client code put in its own reply's metadata: the strategy counts only replies tied to
its round's messages (uedp.privacy.replies).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode

from client.app import ClientFn, make_client_app
from client.update import client_update
from server.setup import Components
from uedp.config import RunConfig
from uedp.flower.mod import UeDPMod, uedp_mod
from uedp.flower.places import KeyedPlaces, key_fingerprint
from uedp.protocol import is_probe


@dataclass(frozen=True)
class LocalNode:
    """What Flower's NodeInfo says of a node, for the place map: its id and registered public key (PEM)."""

    node_id: int
    public_key: bytes
    status: str = "online"
    last_activated_at: str = ""


@functools.lru_cache(maxsize=4096)
def node_key(node: int) -> bytes:
    """Node `node`'s stand-in public key (PEM): P-256, private scalar node + 1 (public by construction: the
    in-process grid authenticates nothing, it is simply not reachable by anyone else)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    public = ec.derive_private_key(node + 1, ec.SECP256R1()).public_key()
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def owner_places(num_owners: int) -> KeyedPlaces:
    """The in-process owners' place map: place i is node i's key (the first `num_owners` files)."""
    return KeyedPlaces(tuple(key_fingerprint(node_key(i)) for i in range(num_owners)), source="in-process grid")


@dataclass
class LocalGrid:
    # Every node runs in this process and no one else can join: a simulation's grid for the place map
    # (uedp.flower.places.grid_kind; SortedNodes accepts it).
    in_process_simulation = True
    cfg: RunConfig
    num_nodes: int
    failing: frozenset[int] = frozenset()
    client_fn: ClientFn = client_update
    data_paths: Sequence[str] = ()  # federation.data = owners: node i reads only data_paths[i]
    mod: UeDPMod = uedp_mod  # the client mod around every training message (the ClientApp's)
    app: ClientApp | None = None  # the ClientApp every node runs (None: make_client_app of the fields above)
    calls: int = 0
    # per answered training message (not the server's probe), seconds in the ClientApp, in this process
    client_seconds: list[float] = field(default_factory=list)
    _contexts: dict[int, Context] = field(default_factory=dict, repr=False)  # each node's, kept for the run

    def __post_init__(self) -> None:
        if self.app is None:
            self.app = make_client_app(self.cfg, update=self.client_fn, mods=[self.mod])
        elif self.client_fn is not client_update or self.mod is not uedp_mod:
            raise ValueError("LocalGrid: give either app or client_fn/mod, not both (app replaces them)")

    def get_node_ids(self) -> Iterable[int]:
        return range(len(self.data_paths) if self.data_paths else self.num_nodes)

    def get_nodes(self) -> Iterable[LocalNode]:
        return [LocalNode(i, node_key(i)) for i in self.get_node_ids()]

    def context(self, node: int) -> Context:
        """The Context a SuperNode gives its ClientApp: this node's id and node config, and its state, which
        (as Flower's) the node keeps from one message of the run to the next."""
        context = self._contexts.get(node)
        if context is None:
            node_config: dict[str, bool | float | int | str] = (
                {"data-path": self.data_paths[node]} if self.data_paths else {"partition-id": node})
            context = Context(run_id=0, node_id=node, node_config=node_config, state=RecordDict(), run_config={})
            self._contexts[node] = context
        return context

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        replies = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            self.calls += 1
            if node in self.failing:
                replies.append(_error_reply(msg, "client raised"))
                continue
            assert self.app is not None  # __post_init__
            t0 = time.perf_counter()
            try:
                reply = self.app(msg, self.context(node))
            except Exception as exc:  # as in Flower: a raising ClientApp is an error reply, the round goes on
                replies.append(_error_reply(msg, f"client raised {type(exc).__name__}"))
                continue
            if reply.has_error():  # the client mod's own error reply (its reason names no data)
                replies.append(_error_reply(msg, reply.error.reason))
                continue
            replies.append(Message(reply.content, reply_to=msg))
            if msg.metadata.message_type == "train" and not is_probe(msg):
                self.client_seconds.append(time.perf_counter() - t0)
        return replies


def _error_reply(msg: Message, reason: str) -> Message:
    return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=msg)


def set_local_task_identity() -> None:
    """Building a flwr Message outside a running app needs a task identity (run 0, server node 0)."""
    from flwr.supercore.task_identity import TaskIdentity

    if TaskIdentity._run_id is None:
        TaskIdentity.run_id = 0
        TaskIdentity.node_id = 0
        TaskIdentity.task_id = 0


def run_local(cfg: RunConfig, *, components: Components | None = None, **grid_options) -> dict:
    """run_server over a LocalGrid with one node per participating user (`grid_options`: LocalGrid's
    failing, client_fn, mod, app, data_paths; `components`: the server's injected parts, see server.setup.Components).
    With federation.data = owners the nodes are the owners whose files `data_paths` lists, and this process
    prepares no corpus."""
    from server.app import run_server
    from uedp.pipeline import prepare

    set_local_task_identity()
    import logging

    import torch

    torch.set_num_threads(1)  # small per-client models: threads only contend (as in the Flower client)
    # Flower's loop (Strategy.start) logs every round's metrics at INFO; an in-process run prints its own
    # progress lines, as a simulation does (runtime/simulate.py)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    logging.getLogger("flwr.uedp").setLevel(logging.INFO)  # UeDP's own set-up and resume lines stay
    nodes = cfg.federation.num_nodes if cfg.owners else len(prepare(cfg).users)
    components = components or Components()
    if cfg.owners and components.places is None and not cfg.federation.places:
        components = dataclasses.replace(components, places=owner_places(nodes))
    return run_server(LocalGrid(cfg, nodes, **grid_options), cfg, components=components)
