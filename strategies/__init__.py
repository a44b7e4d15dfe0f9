"""The Flower strategy of the project: one Message-API Strategy driven by a mechanism spec.

    MechanismStrategy(spec_for("uedp", "f_E+"), privacy=..., train=..., noise_multiplier=..., ...)

The mechanisms (UeDP f_E+ / f_E, user-level DP, noiseless FedAvg, de-identification) are entries of the
registry in uedp.privacy.mechanisms, not subclasses.
"""

from strategies.strategy import MechanismStrategy, RoundPlan

__all__ = ["MechanismStrategy", "RoundPlan"]
