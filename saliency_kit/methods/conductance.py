"""Layer conductance (Dhamdhere et al. 2018): how much of the score's change along the
integrated-gradients path flows through each unit ``j`` of an inner layer.

``c_j = ∫₀¹ ∂s/∂y_j (x′ + α(x − x′)) · dy_j/dα dα``, with ``y`` the layer's output, computed on
``steps`` evenly spaced points of the path as ``Σ_i ½(g_j(α_i) + g_j(α_{i+1})) · (y_j(α_{i+1}) −
y_j(α_i))`` (the trapezoid rule on each of the ``steps − 1`` intervals; two layer evaluations
each). The path runs in input space; the attributions have the layer's shape. Summed over the
layer they add up to ``s(x) − s(x′)`` (completeness, up to the quadrature error, reported as
``completeness_gap``); when the layer is linear in the input (a first ``Dense``), to exactly
what integrated gradients with the trapezoid rule and the same ``steps`` gives at the input.
Chosen with ``explain(..., method="conductance", attribute_to=LAYER)``. Map: sum over the
layer's last axis.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import baseline_array
from .base import Option, Request, register

__all__ = ["conductance", "prepare"]


def prepare(request: Request, options: dict) -> dict:
    from ..model.walker import find_layer

    if options["layer"] is None:
        raise ValueError("conductance needs the layer to attribute to: attribute_to=LAYER; received none.")
    return {
        **options,
        "layer": find_layer(request.model, options["layer"]),
        "baseline": baseline_array(options["baseline"], request.inputs),
    }


@register(
    "conductance",
    title="Conductance",
    summary="score change along the IG path flowing through each unit of a layer (Dhamdhere et al. 2018), "
    "with completeness_gap; attribute_to=LAYER; map: sum over the layer's last axis",
    options=[
        Option("layer", None, type=str, layer=True, help="the layer to attribute to (attribute_to=)"),
        Option("steps", 50, low=2, help="evenly spaced points on the path from the baseline to the input"),
        Option("baseline", 0.0, array=True, help="the path's start: a number or an array broadcastable to one input"),
    ],
    reduce="sum",
    signed=True,
    prepare=prepare,
    cost=lambda options: 2 * (options["steps"] - 1),
    layered=True,
)
def conductance(ctx: Any, layer: str, steps: int, baseline: Any) -> Any:
    from keras import ops

    alphas = np.linspace(0.0, 1.0, steps)
    x = ctx.inputs
    delta = x - baseline  # [n, *input]
    ones = [1] * len(ctx.shape)

    def interval(i: Any) -> Any:  # intervals i [m] -> their conductance [n, m, K, *layer]
        ends = ops.stack([ops.take(alphas, i), ops.take(alphas, i + 1)], axis=1)  # [m, 2]
        a = ops.reshape(ops.cast(ends, x.dtype), [1, *ends.shape, *ones])
        y, g = ctx.layer(layer, points=baseline + a * delta[:, None, None])  # [n, m, 2, *L], [n, m, 2, K, *L]
        y, g = ops.cast(y, "float32"), ops.cast(g, "float32")
        step = ops.expand_dims(y[:, :, 1] - y[:, :, 0], 2)  # [n, m, 1, *L]
        return 0.5 * (g[:, :, 0] + g[:, :, 1]) * step

    attributions = ctx.sum(steps - 1, interval)  # [n, K, *layer]
    at_input, at_baseline = ctx.scores(x), ctx.scores(baseline + 0 * x)
    total = ops.sum(ops.reshape(ops.cast(attributions, "float64"), [*attributions.shape[:2], -1]), axis=-1)
    gap = total - ops.cast(at_input - at_baseline, "float64")
    return {"attributions": attributions, "completeness_gap": gap, "scores": at_input}
