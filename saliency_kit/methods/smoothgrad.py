"""SmoothGrad (Smilkov et al. 2017): any non-CAM method averaged over noisy copies of each input.

``a = agg_s base(x + ε_s)``, ``ε_s ~ N(0, σ²)``, ``σ = noise · (max x − min x)`` per input, with
``agg`` the mean, the mean of squares (``"square"``) or the variance ``E[a²] − E[a]²``. The noise
of sample ``s`` of input ``b`` is drawn from a stateless generator keyed by ``(seed, b, s)``, so a
seed fixes the result whatever ``batch_size`` is. The map is reduced like the base method's.
"""
from __future__ import annotations

import numbers

import numpy as np

from .base import Option, get, names, register

AGGREGATES = ("mean", "square", "variance")


def _base(name):
    method = get(name)
    if method.cam or method.extends is not None:
        usable = [m for m in names() if not get(m).cam and get(m).extends is None]
        raise ValueError(f"base must be a pixel method ({', '.join(usable)}); received {name!r}.")
    return method


def prepare(request, options: dict) -> dict:
    base = _base(options["base"])
    if options["samples"] < 1:
        raise ValueError(f"samples must be a positive int; received {options['samples']!r}.")
    noise = options["noise"]
    if not (isinstance(noise, numbers.Real) and 0 <= noise < np.inf):
        raise ValueError(f"noise must be a non-negative number (a fraction of max − min); received {noise!r}.")
    seed = options["seed"]
    if seed is None:
        seed = int(np.random.default_rng().integers(2**31))
    own = {option.name for option in base.options}
    resolved = {**options, "seed": int(seed)}
    if base.prepare is not None:
        resolved.update(base.prepare(request, {k: v for k, v in resolved.items() if k in own}))
    return resolved


def cost(options: dict) -> int:
    base = get(options["base"])
    return options["samples"] * (base.cost(options) if base.cost else 1)


@register(
    "smoothgrad",
    title="SmoothGrad",
    summary="a pixel method (base=...) aggregated over noisy copies of the input (Smilkov et al. 2017); "
            "map: as the base method",
    options=[
        Option("base", "gradient", help="the method averaged over noisy copies (any non-CAM method)"),
        Option("samples", 50, help="noisy copies of each input"),
        Option("noise", 0.15, help="noise σ as a fraction of each input's max − min"),
        Option("aggregate", "mean", choices=AGGREGATES, help="mean, mean of squares or variance"),
        Option("seed", None, type=int, help="random seed, for repeatable maps"),
    ],
    extends="base",
    noisy=True,
    prepare=prepare,
    cost=cost,
)
def smoothgrad(ctx, base, samples, noise, aggregate, seed, **base_options):
    from keras import ops

    method = get(base)
    x = ctx.inputs
    n, axes, ones = x.shape[0], tuple(range(1, len(x.shape))), [1] * len(ctx.shape)
    sigma = ops.reshape(noise * (ops.max(x, axis=axes) - ops.min(x, axis=axes)), [n, 1, *ones])

    def noisy(ids):  # copies ids of each input, [m] -> base attributions [n, m, K, *input]
        copies = x[:, None] + sigma * ctx.normal(ids, samples)
        a = method.compute(ctx.at(copies), **base_options)
        a = a["attributions"] if isinstance(a, dict) else a
        a = ops.reshape(a, [n, ids.shape[0], *a.shape[1:]])
        return a if aggregate == "mean" else (a, ops.square(a))

    if aggregate == "mean":
        return ctx.sum(samples, noisy) / samples
    first, second = ctx.sum(samples, noisy)
    if aggregate == "square":
        return second / samples
    return ops.relu(second / samples - ops.square(first / samples))  # variance, never negative
