"""Expected gradients (Erion et al. 2021), Captum's GradientSHAP.

Integrated gradients averaged over baselines drawn from a reference set, with the integral
itself replaced by one random point per draw:

    a = E_{x′ ~ D, α ~ U(0, 1)} [ (x − x′) ⊙ ∂s/∂x |_{x′ + α (x − x′)} ]
      ≈ (1 / S) Σ_{s < S} (x − x′_s) ⊙ ∂s/∂x |_{x′_s + α_s (x − x′_s)}

with ``x′_s`` drawn uniformly from ``baselines`` ``[N, ...]`` and ``α_s`` uniform on [0, 1).
The draws of an input come from a stateless generator keyed by the seed and a fingerprint of the
input's own bytes, so a seed fixes the result whatever ``batch_size`` is and wherever the input
sits in a batch (two equal inputs get the same draws). In expectation the attributions sum to
``s(x) − E[s(x′)]``. Captum's ``GradientShap`` also adds Gaussian noise to the input
(``stdevs``, 0 by default); there is none here. Map: signed sum over the last axis.
"""
from __future__ import annotations

import numpy as np

from .base import Option, register


def prepare(request, options: dict) -> dict:
    if options["samples"] < 1:
        raise ValueError(f"samples must be a positive int; received {options['samples']!r}.")
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
        raise TypeError(f"baselines must be an array [N, ...] of numbers; received {type(baselines).__name__}.") from None
    if array.ndim == len(shape):  # one baseline
        array = array[None]
    if array.shape[1:] != shape or len(array) == 0:
        raise ValueError(
            f"baselines must have shape [N, {', '.join(map(str, shape))}] like the inputs; received {array.shape}."
        )
    if not np.all(np.isfinite(array)):
        raise ValueError("baselines must be finite; received NaN or infinite values.")
    seed = options["seed"]
    if seed is None:
        seed = int(np.random.default_rng().integers(2**31))
    return {**options, "baselines": np.ascontiguousarray(array), "seed": int(seed)}


def draws(inputs, seed, samples: int, count: int):
    """``(baseline indices [n, samples] int32, α [n, samples])`` of each input ``[n, ...]``:
    uniform draws from a stateless generator keyed by ``(seed, fingerprint of the input)``."""
    import tensorflow as tf

    keys = tf.bitcast(tf.fingerprint(inputs), tf.int64)  # [n]: one key per input's bytes
    seed = tf.cast(seed, tf.int64)
    u = tf.map_fn(
        lambda key: tf.random.stateless_uniform([samples, 2], seed=tf.stack([seed, key]), dtype=tf.float64),
        keys, fn_output_signature=tf.TensorSpec([samples, 2], tf.float64),
    )
    which = tf.minimum(tf.cast(tf.floor(u[..., 0] * count), tf.int32), count - 1)
    return which, u[..., 1]


@register(
    "expected_gradients",
    title="Expected Gradients",
    summary="integrated gradients over random baselines and random path points (Erion et al. 2021; "
            "GradientSHAP); needs baselines=[N, ...]; map: sum over the last axis",
    options=[
        Option("samples", 50, help="random (baseline, path point) draws per input"),
        Option("baselines", None, type=float, array=True, help="reference inputs [N, ...] (required)"),
        Option("seed", None, type=int, help="random seed, for repeatable maps"),
    ],
    reduce="sum",
    signed=True,
    noisy=True,
    prepare=prepare,
    cost=lambda options: options["samples"],
)
def expected_gradients(ctx, samples, baselines, seed):
    from keras import ops

    x = ctx.inputs
    which, alpha = draws(x, seed, samples, baselines.shape[0])  # [n, samples] each
    ones = [1] * len(ctx.shape)

    def draw(i):  # draws i [m] -> (x − x′) ⊙ ∂s/∂x at x′ + α (x − x′): [n, m, K, *input]
        reference = ops.take(baselines, ops.take(which, i, axis=1), axis=0)  # [n, m, *input]
        a = ops.reshape(ops.cast(ops.take(alpha, i, axis=1), x.dtype), [x.shape[0], -1, *ones])
        delta = x[:, None] - reference
        return delta[:, :, None] * ctx.gradients(reference + a * delta)

    return ctx.sum(samples, draw) / samples


__all__ = ["draws"]
