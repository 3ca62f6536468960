"""Backward rules: the forward pass stays, the gradient changes.

``relu``: rules for ReLU-family activations (guided backprop, deconvnet, your own
:class:`ModifiedBackprop`). The layer-wise relevance propagation rules for linear layers
(:class:`Epsilon`, :class:`Gamma`, :class:`ZPlus`, :class:`AlphaBeta`, :class:`Flat`,
:class:`WSquare`, :class:`ZBox`) and :class:`Pass` for activations live in
:mod:`saliency_kit.propagation` and are offered here too (looked up on first use, so that the
propagation package may itself import :mod:`.relu`).
"""

import importlib
from typing import Any

from .relu import (
    DeconvBackprop,
    GuidedBackprop,
    ModifiedBackprop,
    ReluFamily,
    as_rule,
    relu_family_of_activation,
    relu_family_of_function,
)

__all__ = [
    "AlphaBeta",
    "DeconvBackprop",
    "Epsilon",
    "Flat",
    "Gamma",
    "GuidedBackprop",
    "LinearRule",
    "ModifiedBackprop",
    "Pass",
    "ReluFamily",
    "WSquare",
    "ZBox",
    "ZPlus",
    "as_rule",
    "relu_family_of_activation",
    "relu_family_of_function",
]

_PROPAGATION = {
    "LinearRule": "core",
    **dict.fromkeys(("AlphaBeta", "Epsilon", "Flat", "Gamma", "Pass", "WSquare", "ZBox", "ZPlus"), "lrp_rules"),
}


def __getattr__(name: str) -> Any:
    if name not in _PROPAGATION:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"saliency_kit.propagation.{_PROPAGATION[name]}"), name)
    globals()[name] = value
    return value
