"""DP-BART: privatized text rewriting under local DP (docs/dp-bart-system.md).

mechanism: the pure privacy mechanisms of DP-BART-CLV / -PR (value clipping) and of the ADePT mechanism on our
model (norm clipping): sensitivities, the analytic Gaussian or Laplace noise, per-user composition over
documents. No model code.
"""

from __future__ import annotations

from uedp.rewriting.mechanism import (
    ClvMechanism,
    Composition,
    NormClipMechanism,
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    compose_documents,
    laplace_scale,
    norm_clip,
    norm_sensitivities,
    sensitivities,
)

__all__ = [
    "ClvMechanism",
    "Composition",
    "NormClipMechanism",
    "analytic_gaussian_delta",
    "analytic_gaussian_sigma",
    "classic_gaussian_sigma",
    "compose_documents",
    "laplace_scale",
    "norm_clip",
    "norm_sensitivities",
    "sensitivities",
]

# The rewriter model (uedp.rewriting.model, torch + transformers), its training (uedp.rewriting.training), its
# cache (uedp.rewriting.store) and its public training text (uedp.rewriting.public_text), exported lazily so that
# importing the mechanism stays light.
_LAZY = {
    "Rewriter": "uedp.rewriting.model",
    "RewriterConfig": "uedp.rewriting.model",
    "load_rewriter": "uedp.rewriting.store",
    "reconstruction_bleu": "uedp.rewriting.model",
    "train_rewriter": "uedp.rewriting.training",
    "PUBLIC_SOURCES": "uedp.rewriting.public_text",
    "public_text_for": "uedp.rewriting.public_text",
}
__all__ += list(_LAZY)


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
