"""The project's own strategy: its server optimizer (torch SGD or Adam on the server's model), which
server/setup.py wraps in UeDP's Flower component, uedp.flower.UserEntityDP. Every mechanism (UeDP f_E+ / f_E,
split, user-level DP, noiseless FedAvg, de-identification) is that wrapper with a spec of the registry in
uedp.privacy.mechanisms.
"""

from strategies.model_optimizer import ModelOptimizer, TorchServerOptimizer

__all__ = ["ModelOptimizer", "TorchServerOptimizer"]
