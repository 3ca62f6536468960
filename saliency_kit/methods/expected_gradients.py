"""Expected gradients (Erion et al. 2021), Captum's GradientSHAP.

Integrated gradients averaged over baselines drawn from a reference set, with the integral
itself replaced by one random point per draw:

    a = E_{x′ ~ D, α ~ U(0, 1)} [ (x − x′) ⊙ ∂s/∂x |_{x′ + α (x − x′)} ]
      ≈ (1 / S) Σ_{s < S} (x − x′_s) ⊙ ∂s/∂x |_{x′_s + α_s (x − x′_s)}

with ``x′_s`` drawn uniformly from ``baselines`` ``[N, ...]`` and ``α_s`` uniform on [0, 1).
The draws of an input come from a stateless generator keyed by the seed and the input's key
(``ctx.uniform``, as SmoothGrad's noise): a seed fixes the result whatever ``batch_size`` is,
and with ``explain(..., input_keys=)`` wherever the input sits in a batch. In expectation the attributions sum to
``s(x) − E[s(x′)]``. Captum's ``GradientShap`` also adds Gaussian noise to the input
(``stdevs``, 0 by default); there is none here. Map: signed sum over the last axis.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Option, Request, register

__all__ = ["expected_gradients", "draws", "prepare"]


def prepare(request: Request, options: dict) -> dict:
    baselines = options["baselines"]
    shape = request.inputs.shape[1:]
    if baselines is None:
        raise ValueError(
            f"expected_gradients needs baselines=, an array [N, {', '.join(map(str, shape))}] of "
            "reference inputs (e.g. a sample of training inputs); received None."
        )
    try:
        array = np.asarray(baselines, dtype=request.inputs.dtype)
    except (TypeError, ValueError):
        raise TypeError(
            f"baselines must be an array [N, ...] of numbers; received {type(baselines).__name__}."
        ) from None
    if array.ndim == len(shape):  # one baseline
        array = array[None]
    if array.shape[1:] != shape or len(array) == 0:
        raise ValueError(
            f"baselines must have shape [N, {', '.join(map(str, shape))}] like the inputs; received {array.shape}."
        )
    if not np.all(np.isfinite(array)):
        raise ValueError("baselines must be finite; received NaN or infinite values.")
    return {**options, "baselines": np.ascontiguousarray(array)}


def draws(ctx: Any, ids: Any, samples: int, count: int) -> Any:
    """``(baseline indices [n, m] int32, α [n, m] float64)`` of draws ``ids [m]`` of each input:
    two uniform numbers ``u`` per draw (``ctx.uniform``), the baseline ``⌊u₀ · count⌋`` and
    ``α = u₁``."""
    from keras import ops

    u = ctx.uniform(ids, samples, [2], dtype="float64")  # [n, m, 2]
    which = ops.minimum(ops.cast(ops.floor(u[..., 0] * count), "int32"), count - 1)
    return which, u[..., 1]


@register(
    "expected_gradients",
    title="Expected Gradients",
    summary="integrated gradients over random baselines and random path points (Erion et al. 2021; "
    "GradientSHAP); needs baselines=[N, ...]; map: sum over the last axis",
    options=[
        Option("samples", 50, low=1, help="random (baseline, path point) draws per input"),
        Option("baselines", None, type=float, array=True, help="reference inputs [N, ...] (required)"),
        Option.seed(),
    ],
    reduce="sum",
    signed=True,
    prepare=prepare,
    cost=lambda options: options["samples"],
)
def expected_gradients(ctx: Any, samples: int, baselines: Any, seed: int) -> Any:
    from keras import ops

    x = ctx.inputs
    ones = [1] * len(ctx.shape)

    def draw(i: Any) -> Any:  # draws i [m] -> (x − x′) ⊙ ∂s/∂x at x′ + α (x − x′): [n, m, K, *input]
        which, alpha = draws(ctx, i, samples, baselines.shape[0])  # [n, m] each
        reference = ops.take(baselines, which, axis=0)  # [n, m, *input]
        a = ops.reshape(ops.cast(alpha, x.dtype), [x.shape[0], -1, *ones])
        delta = x[:, None] - reference
        return delta[:, :, None] * ctx.gradients(reference + a * delta)

    return ctx.sum(samples, draw) / samples
