"""The project's own strategy: its server optimizer (torch SGD or Adam on the server's model, model_optimizer.py)
and the strategy the ServerApp runs, assembled from a RunConfig (build.py: `build_strategy` wraps the optimizer in
UeDP's Flower component, uedp.flower.UserEntityDP, with the run's place map, `run_places`, and the paper's
denominator where privacy.paper_z asks for it, `paper_denominator`). Every mechanism (UeDP f_E+ / f_E, split,
user-level DP, noiseless FedAvg, de-identification) is that wrapper with a spec of the registry in
uedp.privacy.mechanisms.
"""

from strategies.build import PAPER_Z_WARNING, build_strategy, paper_denominator, run_places
from strategies.model_optimizer import ModelOptimizer, TorchServerOptimizer

__all__ = ["PAPER_Z_WARNING", "ModelOptimizer", "TorchServerOptimizer", "build_strategy", "paper_denominator",
           "run_places"]
