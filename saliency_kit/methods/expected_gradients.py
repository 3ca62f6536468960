"""Expected gradients (Erion et al. 2021), Captum's GradientSHAP.

Integrated gradients averaged over baselines drawn from a reference set, with the integral
itself replaced by one random point per draw:

    a = E_{x′ ~ D, α ~ U(0, 1)} [ (x − x′) ⊙ ∂s/∂x |_{x′ + α (x − x′)} ]
      ≈ (1 / S) Σ_{s < S} (x − x′_s) ⊙ ∂s/∂x |_{x′_s + α_s (x − x′_s)}

with ``x′_s`` drawn uniformly from ``baselines`` ``[N, ...]`` and ``α_s`` uniform on [0, 1).
The draws of an input come from a generator keyed by the seed and the input's own bytes, so a
seed fixes the result whatever ``batch_size`` is and wherever the input sits in a batch. In expectation the attributions sum to
``s(x) − E[s(x′)]``. Captum's ``GradientShap`` also adds Gaussian noise to the input
(``stdevs``, 0 by default); there is none here. Map: signed sum over the last axis.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from ._base import Method, Request, Result, check_positive_int, reduce_map, register
from ._kernels import input_keys, target_scores, weighted_gradients

DEFAULTS = {"samples": 50, "baselines": None, "seed": None}


def _settings(request: Request, options: dict):
    samples = check_positive_int("samples", options["samples"])
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
        raise ValueError(f"baselines must be an array [N, ...] of numbers; received {type(baselines).__name__}.") from None
    if array.ndim == len(shape):  # one baseline
        array = array[None]
    if array.shape[1:] != shape or len(array) == 0:
        raise ValueError(
            f"baselines must have shape [N, {', '.join(map(str, shape))}] like the inputs; received {array.shape}."
        )
    if not np.all(np.isfinite(array)):
        raise ValueError("baselines contain NaN or infinite values.")
    seed = options["seed"]
    if seed is None:
        seed = int(np.random.default_rng().integers(2**31))
    elif isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an int or None; received {seed!r}.")
    return samples, array, int(seed)


def check(request: Request, **options) -> None:
    _settings(request, options)


def draws(key: list, samples: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``(baseline indices [samples] int32, α [samples] float64)`` for one input's ``key``
    (:func:`~saliency_kit.methods._kernels.input_keys`)."""
    rng = np.random.default_rng(key)
    return rng.integers(count, size=samples).astype(np.int32), rng.uniform(0.0, 1.0, size=samples)


def compute(request: Request, **options) -> Result:
    samples, baselines, seed = _settings(request, options)
    picks = [draws(key, samples, len(baselines)) for key in input_keys(seed, request.inputs)]
    # per input: [samples] baseline indices and [samples] alphas, packed as float64 columns
    extra = np.stack([np.stack([p[0].astype(np.float64), p[1]], axis=-1) for p in picks])
    rank = request.inputs.ndim - 1

    def block(x, index, t, extra, baselines):
        i = tf.minimum(t, samples - 1)
        chosen = tf.gather(extra, i, axis=1)  # [n, m, 2]
        reference = tf.gather(baselines, tf.cast(chosen[..., 0], tf.int32))  # [n, m, ...]
        alpha = tf.reshape(tf.cast(chosen[..., 1], x.dtype), [*chosen.shape[:2]] + [1] * rank)
        delta = x[:, None] - reference
        return reference + alpha * delta, delta / samples

    key = ("expected_gradients", samples)
    attributions = weighted_gradients(request, key, samples, block, (baselines,), extra=extra)
    resolved = {**options, "samples": samples, "seed": seed}
    return Result(attributions, reduce_map(attributions, "sum"), target_scores(request), resolved)


register(
    Method(
        "expected_gradients",
        "integrated gradients over random baselines and random path points (Erion et al. 2021; "
        "GradientSHAP); needs baselines=[N, ...]; map: sum over the last axis",
        compute,
        defaults=dict(DEFAULTS),
        check=check,
    )
)

__all__ = ["draws"]
