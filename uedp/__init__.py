"""UeDP: user-entity differential privacy for federated language models.

Library code shared by the Flower apps (client/, server/, strategies/) and the experiments:
corpora (`uedp.data`), sensitive-entity detection (`uedp.entities`), models and tokenizers
(`uedp.models`), tasks and metrics (`uedp.tasks`) and privacy accounting (`uedp.privacy`).
"""

from uedp.errors import UedpError

__all__ = ["UedpError"]
__version__ = "0.1.0"
