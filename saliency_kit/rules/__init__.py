"""Backward rules: the forward pass stays, the gradient changes.

``relu``: rules for ReLU-family activations (guided backprop, deconvnet, your own
:class:`ModifiedBackprop`). ``lrp``: layer-wise relevance propagation rules for linear layers
(:class:`Epsilon`, :class:`Gamma`, :class:`ZPlus`, :class:`AlphaBeta`, :class:`Flat`,
:class:`WSquare`, :class:`ZBox`) and :class:`Pass` for activations.
"""
from ..propagation.rules import AlphaBeta, Epsilon, Flat, Gamma, LinearRule, Pass, WSquare, ZBox, ZPlus
from .relu import (
    _KNOWN_RELU,
    _LEAKY,
    _LEAKY_DEFAULT,
    _NAMED_RULES,
    PLAIN_RELU,
    DeconvBackprop,
    GuidedBackprop,
    ModifiedBackprop,
    ReluFamily,
    _known_relu_functions,
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
]
