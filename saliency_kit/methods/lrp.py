"""Layer-wise relevance propagation (Bach et al. 2015; Montavon et al. 2019) with Zennit's composites.

``a = R(x)``: the relevance of the target score at the input, the input gradient of
``rewrite_lrp(model, composite, input_relevance=True)`` (see :mod:`saliency_kit.propagation.lrp`): every linear
layer passes relevance back by its rule (ε, z⁺, γ, α2β1, flat, ZBox), activations pass it
unchanged. With zero biases and ε → 0 it sums to the score. Map: signed sum over the last axis.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..propagation import composites
from .base import Option, Request, register

__all__ = ["prepare", "lrp"]


def _bound(name: Any, value: Any) -> Any:
    if value is None:
        return None
    array = np.asarray(value, dtype=np.float64)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be a finite number or array; received {value!r}.")
    return float(array) if array.ndim == 0 else array.tolist()


def prepare(request: Request, options: dict) -> dict:
    resolved = {**options, "low": _bound("low", options["low"]), "high": _bound("high", options["high"])}
    composites.get(resolved["composite"], **_composite_options(resolved))  # checks names and bounds now
    return resolved


def _composite_options(options: dict) -> dict:
    return {k: options[k] for k in ("epsilon", "gamma", "low", "high")}


def _freeze(value: Any) -> Any:
    return tuple(_freeze(v) for v in value) if isinstance(value, list) else value


@register(
    "lrp",
    title="LRP",
    summary="layer-wise relevance propagation with a composite of rules (Zennit's); map: sum over the last axis",
    options=[
        Option(
            "composite",
            "epsilon_plus_flat",
            choices=tuple(composites.names()),
            array=True,
            help="which rule each layer gets: a registered name, or a saliency_kit.propagation.composites.Composite",
        ),
        Option("epsilon", 1e-6, help="ε of the ε-rule (dense layers)"),
        Option("gamma", 0.25, help="γ of the γ-rule (convolutions in epsilon_gamma_box and gamma)"),
        Option("low", None, type=float, array=True, help="ZBox lower bound of the input (model input space)"),
        Option("high", None, type=float, array=True, help="ZBox upper bound of the input (model input space)"),
    ],
    reduce="sum",
    signed=True,
    prepare=prepare,
)
def lrp(ctx: Any, composite: str, epsilon: float, gamma: float, low: Any, high: Any) -> Any:
    options = {
        k: _freeze(v)
        for k, v in _composite_options({"epsilon": epsilon, "gamma": gamma, "low": low, "high": high}).items()
        if v is not None
    }
    rule = composites.LRPRewrite(composite, tuple(sorted(options.items())), input_relevance=True)
    return ctx.gradients(ctx.inputs, rule=rule)
