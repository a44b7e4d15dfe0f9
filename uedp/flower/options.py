"""The options of UeDP's wrapper (uedp.flower.strategy.UserEntityDP), checked and resolved before anything runs:
the places (an int N or a `Places` map, whose size must be the accountant's N), round_period, the run store
(required by a private mechanism), the seams (`Seams`: what tests and the crafted-update audit inject) and the
mechanism's public parameters (`mechanism_settings`).
"""

from __future__ import annotations

import math
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from uedp.config_values import to_wire
from uedp.errors import ConfigError
from uedp.flower.places import Places, SortedNodes
from uedp.flower.plan import MechanismSettings
from uedp.flower.store import RunStore
from uedp.privacy.accountant import UeDPAccountant
from uedp.privacy.aggregation import Aggregator, aggregate
from uedp.privacy.aggregation import denominator as public_denominator
from uedp.privacy.noise import NoiseSource


@dataclass(frozen=True)
class Seams:
    """Parts that tests and the crafted-update audit inject; real runs pass none. `noise`: the Gaussian noise
    source (None: privacy.noise, or Philox from privacy.seed); `aggregator`: the re-check, sum and noise (the
    audit's broken controls); `denominator`: a Z other than the public q_u N (the paper's data-derived Z:
    outside the proof, the caller labels the run); `clock` / `sleep`: the round schedule's time."""

    noise: NoiseSource | None = None
    aggregator: Aggregator = aggregate
    denominator: float | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def place_count(places: int | Places) -> int:
    """N, of an int or a place map."""
    return places if isinstance(places, int) else places.size


def place_map(places: int | Places, *, num_users: int) -> Places:
    """The wrapper's place map: an int N becomes SortedNodes(N) (sorted node ids fill the places); a map must
    assign places, and its size must be the accountant's N."""
    mapped: Places = SortedNodes(places) if isinstance(places, int) and not isinstance(places, bool) else places
    if not callable(getattr(mapped, "assign", None)):
        raise ConfigError(f"places must be an int N or a place map (KeyedPlaces), got {places!r}")
    if mapped.size != num_users:
        raise ConfigError(f"places has {mapped.size} places, the accountant's num_users is "
                          f"{num_users}: they must agree (N is public)")
    return mapped


def check_options(*, round_period: float | None, store: RunStore | None, private: bool) -> None:
    """round_period None (no schedule) or a number of seconds > 0; store a RunStore, required by a private
    mechanism (the ledger is written there before each round's model is released)."""
    if round_period is not None and (isinstance(round_period, bool) or not (
            isinstance(round_period, int | float) and round_period > 0 and math.isfinite(round_period))):
        raise ConfigError(f"round_period must be a number of seconds > 0, or None (no schedule), got {round_period!r}")
    if store is not None and not isinstance(store, RunStore):
        raise TypeError(f"store must be a uedp.flower.RunStore, got {type(store).__name__}")
    if private and store is None:
        raise ConfigError("store: a private run writes its privacy ledger there before each round's model is "
                          "released (RunStore(out_dir))")


def round_rng(seed: int | None) -> random.Random:
    """The rounds' source of keys and cohorts: seeded for a reproduction (a seed), else the system CSPRNG."""
    return random.Random(seed) if seed is not None else secrets.SystemRandom()


def mechanism_settings(acc: UeDPAccountant, places: int, noise: NoiseSource, denominator: float | None, *,
                       seeded: bool) -> MechanismSettings:
    """The run's mechanism, every public parameter resolved (uedp.flower.plan), from its accountant: Z is the
    public q_u N unless a seam gives another (the paper's data-derived Z, labelled by the caller)."""
    spec, privacy = acc.spec, acc.privacy
    q_e, q_s = spec.rates(privacy)
    if not spec.private:
        z_denominator = 1.0
    elif denominator is not None:
        z_denominator = float(denominator)
    else:
        z_denominator = public_denominator(spec.rule, q_u=privacy.q_u, num_users=places)
    settings = MechanismSettings(
        spec=spec, places=places, q_u=privacy.q_u, q_e=q_e, q_s=q_s, m_max=spec.m_max(privacy),
        k_cap=spec.k_cap(privacy), m_max_sent=to_wire("privacy.m_max", privacy.m_max), beta=privacy.beta,
        w_max=privacy.w_max,
        gamma=spec.gamma(privacy), z=acc.noise_multiplier, denominator=z_denominator,
        noise=getattr(noise, "mode", "unrecorded") if spec.private else "none", seeded=seeded,
    )
    settings.record(0)  # every option of the mechanism checked before anything runs (round 0: none)
    return settings
