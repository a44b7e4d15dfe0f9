"""Flower strategies: UeDP (f_E+ / f_E), user-level DP (DP-FedAvg) and noiseless FedAvg, one core."""

from strategies.base import STRATEGIES, PrivateFedStrategy, StrategySpec, build_strategy
from strategies.variants import FedAvg, UeDP, UserLevelDP

__all__ = ["STRATEGIES", "FedAvg", "PrivateFedStrategy", "StrategySpec", "UeDP", "UserLevelDP", "build_strategy"]
