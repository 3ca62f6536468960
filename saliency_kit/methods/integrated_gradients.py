"""Integrated gradients (Sundararajan et al. 2017) and its quadrature rules.

``a = (x − x′) · Σ_i w_i ∂s/∂x (x′ + α_i (x − x′))`` with points ``α_i`` on [0, 1] whose weights
sum to 1, so that for a linear score the attributions are exact for every rule. The completeness
gap ``Σ a − (s(x) − s(x′))`` measures the quadrature error. Map: signed sum over the last axis.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import RULES, baseline_array, quadrature, start_option
from .base import Option, Request, register

__all__ = ["integrated_gradients", "RULES", "quadrature", "prepare"]


def prepare(request: Request, options: dict) -> dict:
    quadrature(options["rule"], options["steps"])
    return {**options, "baseline": baseline_array(options["baseline"], request.inputs)}


@register(
    "integrated_gradients",
    title="Integrated Gradients",
    summary="(x − baseline) × path-averaged gradient (Sundararajan et al. 2017), with completeness_gap; "
    "map: sum over the last axis",
    options=[
        Option("steps", 50, low=1, help="points on the path from the baseline to the input"),
        start_option("the path's start"),
        Option("rule", "riemann_trapezoid", choices=RULES, help="quadrature rule of the path integral"),
    ],
    reduce="sum",
    signed=True,
    prepare=prepare,
    cost=lambda options: options["steps"],
)
def integrated_gradients(ctx: Any, steps: int, baseline: Any, rule: str) -> Any:
    from keras import ops

    alphas, weights = quadrature(rule, steps)
    ends = np.stack([alphas == 1.0, alphas == 0.0], axis=-1).astype(np.float32)  # [steps, 2]
    x = ctx.inputs
    delta = x - baseline  # [n, *input]
    ones = [1] * len(ctx.shape)

    def along_path(i: Any) -> Any:  # points i of the path [m] -> weighted gradients [n, m, K, *input]
        a = ops.reshape(ops.cast(ops.take(alphas, i), x.dtype), [1, -1, *ones])
        w = ops.reshape(ops.cast(ops.take(weights, i), "float32"), [1, -1, 1, *ones])
        scores, g = ctx.gradients(baseline + a * delta[:, None], with_scores=True)  # [n, m, K], ...
        at_ends = scores[..., None] * ops.reshape(ops.take(ends, i, axis=0), [1, -1, 1, 2])
        return w * ops.cast(g, "float32"), at_ends  # the scores where α = 1 and α = 0 come free

    path, at_ends = ctx.sum(steps, along_path)  # float32 whatever the model's dtype
    attributions = ops.cast(delta, "float32")[:, None] * path  # [n, K, *input]
    at_input = at_ends[..., 0] if ends[:, 0].any() else ctx.scores(x)
    at_baseline = at_ends[..., 1] if ends[:, 1].any() else ctx.scores(baseline + 0 * x)
    total = ops.sum(ops.reshape(ops.cast(attributions, "float64"), [*attributions.shape[:2], -1]), axis=-1)
    gap = total - ops.cast(at_input - at_baseline, "float64")  # Σ a − (s(x) − s(x′))
    return {"attributions": attributions, "completeness_gap": gap, "scores": at_input}
