"""The preflight of UeDP's wrapper (uedp.flower.strategy.UserEntityDP.preflight), before any budget is spent:
the place map against the grid, a simulation's nodes (they register after the ServerApp starts: the wrapper waits
for them, and refuses more places than nodes), and UeDP's client mod: on a deployment's grid the app bundle's
ClientApp must mount `uedp_mod`, read from the bundle (uedp.flower.bundle: the same whoever is connected); on a
simulation's, every node that stands in a place is sent one probe (uedp.protocol), which the mod answers itself;
answers of which none carries the marker refuse the run, naming `uedp_mod`; silence (and the SuperLink's error
reply for a node) decides nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from flwr.app import Message
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid

from uedp.errors import ConfigError
from uedp.flower.bundle import bundle_client_app, in_bundle, mounts_uedp_mod
from uedp.flower.places import IN_PROCESS, SIMULATION, Assignment, Places, SortedNodes
from uedp.privacy.replies import stamp
from uedp.protocol import has_probe_marker, probe_content

log = logging.getLogger("flwr.uedp")  # Flower's handler prints it with the ServerApp's output (public lines only)

REGISTRATION_WAIT = 60.0  # seconds a simulation's nodes get to register before too few is an error
REGISTRATION_SETTLED = 2.0  # ... and how long an unchanged, non-zero node count counts as settled
PROBE_TIMEOUT = 600.0  # the probe's time-out when configure_train is driven without `start` (no timeout known)
# The SuperLink's own error replies (a node or message unavailable): silence to the probe, not an answer
SUPERLINK_ERRORS = (ErrorCode.MESSAGE_UNAVAILABLE, ErrorCode.REPLY_MESSAGE_UNAVAILABLE, ErrorCode.NODE_UNAVAILABLE)


class MissingClientMod(ConfigError):
    """The ClientApp answered the probe without UeDP's client mod (`uedp_mod`)."""


def run_preflight(grid: Grid, places: Places, *, kind: str, timeout: float, clock: Callable[[], float],
                  sleep: Callable[[float], None]) -> None:
    """The preflight on a grid of kind `kind` (uedp.flower.places.grid_kind; module docstring): the place map
    against the grid (SortedNodes refuses a deployment's), a simulation's nodes, then the client mod: read from
    the app bundle on a deployment's grid (`check_bundle`), asked of the nodes by the probe on a simulation's or
    an in-process grid (`probe`)."""
    assignment = places.assign(grid)  # SortedNodes refuses a deployment's grid here
    if kind == SIMULATION:  # Flower's simulation: its nodes register after the ServerApp starts
        assignment = wait_for_simulated_nodes(grid, places, clock=clock, sleep=sleep)
    if kind in (SIMULATION, IN_PROCESS) and isinstance(places, SortedNodes) and assignment.connected < places.size:
        n = places.size
        raise ConfigError(
            f"places={n} but this simulation has {assignment.connected} node(s): more places than nodes would "
            f"leave places empty in every round and divide each step by a denominator Z for {n} places. Start "
            f"the simulation with {n} nodes (num-supernodes = {n}), or set places to the number of nodes")
    if kind in (SIMULATION, IN_PROCESS):
        probe(grid, [n for n in assignment.nodes if n is not None], timeout)
    else:
        check_bundle()


def check_bundle() -> None:
    """A deployment's nodes run the app bundle `flwr run` submitted, which the ServerApp runs from too: its
    ClientApp must mount UeDP's client mod (uedp.flower.bundle). Read from the bundle, the answer is the
    same whoever is connected (asking the nodes would make it depend on who answers)."""
    found = bundle_client_app()
    if found is None:
        raise ConfigError(
            "cannot find the app bundle's ClientApp to check that it mounts uedp_mod: no directory on sys.path "
            "has a pyproject.toml with [tool.flwr.app.components] clientapp (flwr-serverapp puts the submitted "
            "app's directory there). Run the ServerApp with `flwr run` from the app's directory")
    if not in_bundle(found):
        raise ConfigError(f"{found.pyproject}: the ClientApp it names ({found.reference}) is imported from outside "
                          "the app bundle, so it says nothing of what the nodes run: keep its module in the app")
    if not mounts_uedp_mod(found.app):
        raise MissingClientMod(
            f"the app bundle's ClientApp ({found.reference}, {found.pyproject}) does not mount UeDP's client "
            "mod: build it as ClientApp(mods=[uedp_mod]) (from uedp.flower import uedp_mod), so that every "
            "update is clipped as a whole and nothing else leaves a node; without it every reply would be "
            "refused and the budget spent on noise. Nothing was sampled, sent or charged")
    log.info("client mod: %s mounts uedp_mod", found.reference)


def wait_for_simulated_nodes(grid: Grid, places: Places, *, clock: Callable[[], float],
                             sleep: Callable[[float], None]) -> Assignment:
    """Flower's simulation: its nodes register after the ServerApp starts. Wait until every place has its
    node, or until the count has settled (REGISTRATION_SETTLED) or REGISTRATION_WAIT passed (how many nodes
    a simulation starts is the operator's choice, not an owner's). A keyed map that no simulated node
    matches is an error (simulated nodes get random keys); places by node order with fewer nodes than
    places are refused by the preflight."""
    n = places.size
    t0 = last_change = clock()
    assignment = places.assign(grid)
    seen = assignment.connected
    while seen < n:
        now = clock()
        if (seen > 0 and now - last_change >= REGISTRATION_SETTLED) or now - t0 >= REGISTRATION_WAIT:
            break
        sleep(0.1)
        assignment = places.assign(grid)
        if assignment.connected != seen:
            seen, last_change = assignment.connected, clock()
    if seen == 0 and not isinstance(places, SortedNodes):
        raise ConfigError(
            f"none of this simulation's nodes stands in one of the {n} places: a simulation's nodes get random "
            "keys, so a KeyedPlaces map (a deployment's) matches none of them; pass places=N (its number of "
            "nodes)")
    return assignment


def probe(grid: Grid, nodes: list[int], timeout: float) -> None:
    """A simulation's (the operator starts its nodes): send each node that stands in a place one probe and
    read the client mod's marker from the answers. Every node runs the submitted app, so ONE marker shows
    that the app has the mod; answers without any marker (the app's own reply, or its error replies: a
    ClientApp without the mod fails on a message with no model) refuse the run. Silence decides nothing: no
    answer, or the SuperLink's error reply for a node (unavailable), is no decision."""
    if not nodes:
        return
    messages = [stamp(Message(probe_content(), dst_node_id=node, message_type="train", group_id="0"))
                for node in nodes]
    replies = list(grid.send_and_receive(messages, timeout=timeout))
    # the grid gave each message its own id when it pushed it (the same Message objects): read them now
    sent = {m.metadata.message_id: m.metadata.dst_node_id for m in messages}

    def answered(reply: Any) -> bool:  # an answer of the probed node itself (not the SuperLink's: silence)
        meta = getattr(reply, "metadata", None)
        node = sent.get(getattr(meta, "reply_to_message_id", None))
        unavailable = reply.has_error() and getattr(reply.error, "code", None) in SUPERLINK_ERRORS
        return node is not None and meta.src_node_id == node and not unavailable

    answers = [r for r in replies if answered(r)]
    if not answers or any(has_probe_marker(r) for r in answers):
        return
    raise MissingClientMod(
        "the ClientApp answered the probe without UeDP's client mod: mount it, ClientApp(mods=[uedp_mod]) (from "
        "uedp.flower import uedp_mod), so that every update is clipped as a whole and nothing else leaves a "
        "node; without it every reply would be refused and the budget spent on noise. Nothing was sampled, "
        "sent or charged")
