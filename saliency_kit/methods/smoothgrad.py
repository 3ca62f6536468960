"""SmoothGrad (Smilkov et al. 2017) and its square and variance aggregates, SquareGrad (Hooker et
al. 2019) and VarGrad (Adebayo et al. 2018): any pixel method aggregated over noisy copies of
each input.

* smoothgrad: ``a = (1/S) Σ_s base(x + ε_s)`` (``aggregate="mean"``, or ``"square"``/``"variance"``)
* squaregrad: ``a = (1/S) Σ_s base(x + ε_s)²``
* vargrad: ``a = (1/S) Σ_s d_s² − ((1/S) Σ_s d_s)²`` with ``d_s = base(x + ε_s) − base(x)`` (the variance,
  summed about the clean input's attributions so that float32 keeps its digits)

with ``ε_s ~ N(0, σ²)``, ``σ = noise · (max x − min x)`` per input (per explained input when a
model's several inputs are explained together; ``noise`` may then be given per input, or as an
array broadcastable to one input, a σ fraction per element). The noise of sample ``s`` of
input ``b`` is drawn from a stateless generator keyed by ``(seed, b, s)`` (``ctx.normal``), so a
seed fixes the result whatever ``batch_size`` is. squaregrad and vargrad take smoothgrad's
options but ``aggregate``, which their name fixes (as Xplique names them). The map is reduced
like the base method's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import base_cost, input_shaped
from .base import Option, Request, get, register

__all__ = ["smoothgrad", "squaregrad", "vargrad", "AGGREGATES", "cost", "prepare"]

AGGREGATES = ("mean", "square", "variance")

BASE = Option("base", "gradient", help="the method averaged over noisy copies (any non-CAM method)")
SAMPLES = Option("samples", 50, low=1, help="noisy copies of each input")
NOISE = Option("noise", 0.15, low=0, array=True, help="noise σ as a fraction of each input's max − min")
AGGREGATE = Option("aggregate", "mean", choices=AGGREGATES, help="mean, mean of squares or variance")
SEED = Option.seed()


def cost(options: dict) -> int:
    return options["samples"] * base_cost(options)


def prepare(request: Request, options: dict) -> dict:
    """A ``noise`` array (one fraction per element of an input) checked: broadcastable to one
    input, finite and non-negative; cast to the inputs' dtype."""
    noise = options["noise"]
    if not np.isscalar(noise):
        options = {**options, "noise": input_shaped(noise, request.inputs, "noise", non_negative=True)}
    return options


@register(
    "smoothgrad",
    title="SmoothGrad",
    summary="a pixel method (base=...) aggregated over noisy copies of the input (Smilkov et al. 2017); "
    "map: as the base method",
    options=[BASE, SAMPLES, NOISE, AGGREGATE, SEED],
    extends="base",
    cost=cost,
    prepare=prepare,
)
def smoothgrad(ctx: Any, base: str, samples: int, noise: Any, aggregate: str, seed: int, **base_options: Any) -> Any:
    from keras import ops

    method = get(base)
    x = ctx.inputs
    n = x.shape[0]
    sigma = ops.expand_dims(ops.cast(noise, x.dtype) * ctx.spread(x), 1)  # [n, 1, ...]: per input (or part)

    # the variance is summed about the clean input's attributions, close to the samples' mean: the
    # difference of two nearly equal means of squares would leave only float32 rounding
    centre = None
    if aggregate == "variance":
        centre = method.compute(ctx, **base_options)
        centre = ops.expand_dims(centre["attributions"] if isinstance(centre, dict) else centre, 1)

    def noisy(ids: Any) -> Any:  # copies ids of each input, [m] -> base attributions [n, m, K, *input]
        copies = x[:, None] + sigma * ctx.normal(ids, samples)
        a = method.compute(ctx.at(copies), **base_options)
        a = a["attributions"] if isinstance(a, dict) else a
        a = ops.reshape(a, [n, ids.shape[0], *a.shape[1:]])
        if centre is not None:
            a = a - ops.cast(centre, a.dtype)
        return a if aggregate == "mean" else (a, ops.square(a))

    if aggregate == "mean":
        return ctx.sum(samples, noisy) / samples
    first, second = ctx.sum(samples, noisy)
    if aggregate == "square":
        return second / samples
    return ops.relu(second / samples - ops.square(first / samples))  # variance, never negative


@register(
    "squaregrad",
    title="SquareGrad",
    options=[BASE, SAMPLES, NOISE, SEED],
    extends="base",
    cost=cost,
    prepare=prepare,
    summary="SmoothGrad with the mean of squares (SquareGrad, Hooker et al. 2019); map: as the base method",
)
def squaregrad(ctx: Any, **options: Any) -> Any:
    return smoothgrad(ctx, aggregate="square", **options)


@register(
    "vargrad",
    title="VarGrad",
    options=[BASE, SAMPLES, NOISE, SEED],
    extends="base",
    cost=cost,
    prepare=prepare,
    summary="SmoothGrad with the variance (VarGrad, Adebayo et al. 2018); map: as the base method",
)
def vargrad(ctx: Any, **options: Any) -> Any:
    return smoothgrad(ctx, aggregate="variance", **options)
