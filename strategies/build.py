"""The project's strategy, assembled from a RunConfig: the server optimizer (`ModelOptimizer`, torch SGD or Adam
on the server's model: server.*) wrapped in UeDP's Flower component, `uedp.flower.UserEntityDP`, which holds the
noise multiplier (given, or calibrated so that every claimed epsilon reaches privacy.target_epsilon over
federation.rounds), the ledger and the checkpoints (the run store), and with federation.resume continues the
saved ledger from the last checkpoint, fail-closed (uedp.flower.resume).

The places (`run_places`, uedp.flower.places): in owners mode the invited owners, by the public place map
federation.places (a file of their registered public keys' fingerprints, needed by every private owners-mode run:
without SuperNode authentication there is no such map, so the run is refused); in corpus mode the corpus's users,
by the same kind of map where federation.places names one (real processes under SuperNode authentication), else
filled by the connected nodes in id order, which the wrapper accepts on a simulation's grid only, unless
federation.node_order_places opts in (real processes without authentication: labelled not private).

The denominator (`paper_denominator`): the public q_u N, or with privacy.paper_z the paper's data-derived Z
(labelled not private: `PAPER_Z_WARNING`).
"""

from __future__ import annotations

from strategies.model_optimizer import ModelOptimizer
from uedp.config import RunConfig
from uedp.errors import ConfigError
from uedp.flower.places import Places, SortedNodes, read_places
from uedp.flower.store import RunStore
from uedp.flower.strategy import Seams, UserEntityDP
from uedp.models.base import UedpModel
from uedp.privacy.aggregation import denominator
from uedp.privacy.mechanisms import MechanismSpec
from uedp.server_data import ServerData

PAPER_Z_WARNING = ("not private: privacy.paper_z computes Z from the entity and extended-entity counts of the "
                   "users' data (W_e, W_s), outside the privacy proof (docs/proofs.md section 7)")


def run_places(cfg: RunConfig, spec: MechanismSpec, population: int) -> Places:
    """The run's place map (module docstring): ConfigError for a private owners-mode run without one, or one
    whose size is not the number of places (federation.num_nodes, or the corpus's users)."""
    fed = cfg.federation
    if fed.node_order_places and fed.places:
        raise ConfigError("federation.node_order_places and federation.places exclude each other: a place map "
                          "needs no opt-in")
    if not fed.places and not spec.private:  # no guarantee to keep: places by node order, wherever it runs
        return SortedNodes(population, outside_simulation=True)
    if not cfg.owners and not fed.places:
        return SortedNodes(population, outside_simulation=fed.node_order_places)
    if not fed.places:
        raise ConfigError(
            "federation.data = owners: a private run needs federation.places, the public place map (a file of "
            "the invited owners' registered public-key fingerprints, one per line: `uedp fingerprint "
            "KEY.pub ...`), and SuperNode authentication (flower-superlink --enable-supernode-auth); without "
            "them any node could take an owner's place or push one out (docs/proofs.md section 1)")
    places = read_places(fed.places)
    if places.size != population:
        what = "federation.num_nodes is" if cfg.owners else "the corpus has users:"
        raise ConfigError(f"federation.places {fed.places} lists {places.size} places, {what} {population}: they "
                          "must agree (N is public)")
    return places


def paper_denominator(cfg: RunConfig, spec: MechanismSpec, data: ServerData, population: int) -> float | None:
    """The paper's Z = q_u N (q_e W_e + q_s W_s) with privacy.paper_z (labelled not private), else None."""
    p = cfg.privacy
    if not (spec.private and p.paper_z and spec.keyed):
        return None
    q_e, q_s = spec.rates(p)
    return denominator(spec.rule, q_u=p.q_u, num_users=population, paper_z=True, q_e=q_e,
                       W_e=float(data.num_entities), q_s=q_s, W_s=float(data.num_extended))


def build_strategy(cfg: RunConfig, spec: MechanismSpec, model: UedpModel, *, places: Places, store: RunStore,
                   records: dict | None, noise_multiplier: float | None, seams: Seams) -> UserEntityDP:
    """The strategy the ServerApp runs: UeDP's wrapper (`UserEntityDP.from_privacy`: z given as
    `noise_multiplier`, or privacy.noise_multiplier with privacy.target_epsilon = None, or calibrated to the target)
    around the project's server optimizer on `model` (server.optimizer, server.lr, server.momentum), with the run
    store (federation.out_dir, checkpoint_every, resume), the schedule (federation.round_period), the records
    every training message carries and the seams."""
    fed = cfg.federation
    optimizer = ModelOptimizer(model, name=cfg.server.optimizer, lr=cfg.server.lr, momentum=cfg.server.momentum)
    return UserEntityDP.from_privacy(
        optimizer, places=places, num_rounds=fed.rounds, privacy=cfg.privacy, mechanism=spec.name, store=store,
        noise_multiplier=noise_multiplier, round_period=fed.round_period, records=records, seams=seams)
