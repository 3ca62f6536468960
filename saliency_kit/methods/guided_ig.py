"""Guided integrated gradients (Kapishnikov et al., CVPR 2021).

Integrated gradients along an adaptive path from the baseline ``x′`` to the input ``x``: at each
of ``steps`` steps the features whose gradients are smallest in magnitude move first, so the
path avoids regions where the model's gradients are large for reasons unrelated to the input.
With ``α_t = t / steps`` and the straight-line position ``x(α) = x′ + α (x − x′)``:

    for t = 1 … steps:
        g = ∂s/∂z at the current point z
        target: ‖z − x‖₁ = (1 − α_t) ‖x − x′‖₁
        repeat:
            features behind α_t − max_dist jump to x(α_t − max_dist)
            if the target is met: stop
            S = the ``fraction`` of features with the smallest |g| (not yet at x(α_t + max_dist))
            γ = (‖z − x‖₁ − target) / ‖(z − x(α_t + max_dist))_S‖₁
            move S to x(α_t + max_dist) if γ > 1 (and repeat), else a fraction γ of the way (stop)
            a += (z_new − z_old) ⊙ g

``max_dist`` bounds how far (as a fraction of α) a feature may lead or lag the straight line:
``max_dist=0`` is integrated gradients with a left Riemann sum. The quantile is NumPy's
``"lower"`` one over all features. Each of the K classes of an input follows its own path; all
paths of a chunk run together in one compiled function, one forward and backward pass per step.
The path bookkeeping runs in float64, as PAIR's; the steps and the data-dependent inner loop are
``keras.ops.while_loop`` loops. The quantile is a radix selection (:mod:`.selection`) in the
gradients' own dtype, where their magnitudes are exact, not a sort. Map: signed sum over the last axis.

Anchor: PAIR's ``saliency.core.GuidedIG`` (``guided_ig_impl``); same path and attributions. PAIR
loops forever if no feature is left to move before the target is met (possible only through
rounding); here that row's step ends.

Which features move is a discrete choice among near ties of ``|g|``, so it amplifies rounding:
a float32 model's convolutions round a batch of rows slightly apart from one row alone, and on
ResNet50 at 224² (4 steps) that moved attributions by 5% of the largest between ``batch_size=1``
(equal to PAIR's, which runs one row at a time, to 8e-8) and 8. ``batch_size=1`` takes PAIR's
path.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._common import baseline_array, start_option
from .base import Option, Request, register
from .selection import kth_smallest

__all__ = ["guided_ig", "prepare"]

EPSILON = 1e-9  # PAIR's tolerance for "the target is met"


def prepare(request: Request, options: dict) -> dict:
    return {
        **options,
        "baseline": baseline_array(options["baseline"], request.inputs),
        "fraction": float(options["fraction"]),
        "max_dist": float(options["max_dist"]),
    }


@register(
    "guided_ig",
    title="Guided IG",
    summary="guided integrated gradients (Kapishnikov et al. 2021): an adaptive path moving the features of "
    "smallest gradient first; map: sum over the last axis",
    options=[
        Option("steps", 50, low=1, help="steps of the adaptive path"),
        start_option("the path's start"),
        Option(
            "fraction", 0.25, low=0, high=1, low_open=True, help="fraction of the features moved at each inner step"
        ),
        Option("max_dist", 0.02, low=0, high=1, help="how far (in α) a feature may lead or lag the straight line"),
    ],
    reduce="sum",
    signed=True,
    prepare=prepare,
    cost=lambda options: 1,  # one point per input and target at a time, steps run in a loop
)
def guided_ig(ctx: Any, steps: int, baseline: Any, fraction: float, max_dist: float) -> Any:
    from keras import ops

    x = ctx.inputs
    n, group, shape = x.shape[0], ctx.num_targets, ctx.shape
    rows = n * group
    features = int(np.prod(shape))
    quantile_index = int(math.floor((features - 1) * fraction))  # NumPy's "lower" quantile
    f64 = "float64"
    # The bookkeeping runs on rows of flat features, [rows, F]: TensorFlow's element-wise select
    # is several times slower on rank-4 tensors than on rank-2 ones.
    end = ops.cast(ops.reshape(ops.repeat(x[:, None], group, axis=1), [rows, features]), f64)
    start = ops.reshape(ops.broadcast_to(ops.cast(baseline, f64), [rows, *shape]), [rows, features])
    span = end - start
    moving = ops.not_equal(span, 0.0)
    inf = ops.convert_to_tensor(np.inf, f64)

    def flat_l1(v: Any) -> Any:
        return ops.sum(ops.abs(v), axis=1)

    def per_row(v: Any) -> Any:  # [rows] -> [rows, 1]
        return v[:, None]

    total = flat_l1(span)
    safe_span = ops.where(moving, span, 1.0)
    inf_x = ops.convert_to_tensor(np.inf, x.dtype)

    def step(t: Any, z: Any, attributions: Any) -> Any:
        g = ops.reshape(ctx.gradients_per_target(ops.reshape(ops.cast(z, x.dtype), [n, group, *shape])), [rows, -1])
        size = ops.abs(g)  # |g| in x's dtype, where the quantile is selected: exact there
        g = ops.cast(g, f64)
        alpha = ops.cast(t + 1, f64) / steps
        alpha_min, alpha_max = ops.maximum(alpha - max_dist, 0.0), ops.minimum(alpha + max_dist, 1.0)
        low, high = start + span * alpha_min, start + span * alpha_max
        target = total * (1.0 - alpha)

        def inner(active: Any, z: Any, attributions: Any) -> Any:
            old = z
            lagging = moving & ((z - start) / safe_span < alpha_min)  # a fixed feature is never behind
            z = ops.where(per_row(active) & lagging, low, z)  # laggards catch up
            current = flat_l1(z - end)
            met = ops.abs(target - current) <= ops.maximum(
                EPSILON * ops.maximum(ops.abs(target), ops.abs(current)), EPSILON
            )
            magnitude = ops.where(ops.equal(z, high), inf_x, size)  # features at x(α_max) are done
            threshold = kth_smallest(magnitude, quantile_index)
            chosen = (magnitude <= per_row(threshold)) & ops.isfinite(magnitude)
            room = flat_l1((z - high) * ops.cast(chosen, f64))
            gamma = ops.where(room > 0, (current - target) / ops.where(room > 0, room, 1.0), inf)
            moves = active & ~met & (room > 0)
            jump = ops.where(per_row(gamma > 1.0), high, z + (high - z) * per_row(ops.minimum(gamma, 1.0)))
            z = ops.where(per_row(moves) & chosen, jump, z)
            # only active rows moved: elsewhere z - old is 0
            return active & moves & (gamma > 1.0), z, attributions + (z - old) * g

        _, z, attributions = ops.while_loop(
            lambda active, z, a: ops.any(active), inner, (ops.ones([rows], "bool"), z, attributions)
        )
        return t + 1, z, attributions

    _, _, attributions = ops.while_loop(
        lambda t, z, a: t < steps,
        step,
        (ops.convert_to_tensor(0, "int32"), start, ops.zeros([rows, features], f64)),
    )
    return ops.reshape(attributions, [n, group, *shape])
