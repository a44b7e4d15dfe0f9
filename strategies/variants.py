"""The strategies of the paper, each a `StrategySpec` over the shared core (strategies/base.py).

- `UeDP` (f_E+): sentences whose entities are all sampled, plus sampled extended entities; the naive
  f_E (`estimator="f_E"`) never uses extended entities. Sensitivity s_u + s_e, truncation at m_max.
- `UserLevelDP` (DP-FedAvg, McMahan et al. 2018, estimator f_f): every sentence of a sampled user,
  Z = q_u W_u, sigma = z * w_max * beta, Poisson sampling without truncation.
- `FedAvg`: noiseless, unclipped, mean of the replies. No guarantee: the utility reference.
- `DeIdentification`: FedAvg on text whose detected protected entities the clients replaced by category
  placeholders before training (the paper's baseline). No formal guarantee either.
"""

from __future__ import annotations

from typing import Any

from strategies.base import STRATEGIES, PrivateFedStrategy, StrategySpec


class UeDP(PrivateFedStrategy):
    def __init__(self, *, estimator: str = "f_E+", **options: Any) -> None:
        if estimator not in ("f_E+", "f_E"):
            raise ValueError(f"estimator must be f_E+ or f_E, got {estimator!r}")
        naive = estimator == "f_E"
        self.spec = StrategySpec(method="uedp_naive" if naive else "uedp",
                                 client_mode="uedp_naive" if naive else "uedp", truncate=True, private=True)
        super().__init__(**options)


class UserLevelDP(PrivateFedStrategy):
    spec = StrategySpec(method="user_dp", client_mode="user_dp", truncate=False, private=True)


class FedAvg(PrivateFedStrategy):
    spec = StrategySpec(method="noiseless", client_mode="all", truncate=False, private=False)


class DeIdentification(PrivateFedStrategy):
    spec = StrategySpec(method="noiseless", client_mode="deid", truncate=False, private=False)


STRATEGIES.register("uedp")(UeDP)
STRATEGIES.register("user_dp")(UserLevelDP)
STRATEGIES.register("fedavg")(FedAvg)
STRATEGIES.register("deid")(DeIdentification)
