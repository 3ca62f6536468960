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
The path bookkeeping runs in float64, as PAIR's. Map: signed sum over the last axis.

Anchor: PAIR's ``saliency.core.GuidedIG`` (``guided_ig_impl``); same path and attributions. PAIR
loops forever if no feature is left to move before the target is met (possible only through
rounding); here that row's step ends.
"""
from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from .. import engine
from ._base import Method, Request, Result, check_positive_int, reduce_map, register
from ._kernels import target_scores
from .integrated_gradients import _baseline

DEFAULTS = {"steps": 50, "baseline": 0.0, "fraction": 0.25, "max_dist": 0.02}
EPSILON = 1e-9  # PAIR's tolerance for "the target is met"


def _settings(request: Request, options: dict):
    steps = check_positive_int("steps", options["steps"])
    for name, low_open in (("fraction", True), ("max_dist", False)):
        value = options[name]
        bad = isinstance(value, bool) or not isinstance(value, (int, float, np.floating))
        if bad or not ((0 < value <= 1) if low_open else (0 <= value <= 1)):
            interval = "(0, 1]" if low_open else "[0, 1]"
            raise ValueError(f"{name} must be a number in {interval}; received {value!r}.")
    return steps, _baseline(request, options["baseline"]), float(options["fraction"]), float(options["max_dist"])


def check(request: Request, **options) -> None:
    _settings(request, options)


def _build_guided_ig_kernel(view, steps, fraction, max_dist, n, group, shape, dtype):
    rows = n * group
    features = int(np.prod(shape))
    quantile_index = int(math.floor((features - 1) * fraction))  # NumPy's "lower" quantile
    f64 = tf.float64

    def flat_l1(v):
        return tf.reduce_sum(tf.abs(tf.reshape(v, [rows, -1])), axis=1)

    def per_row(v):  # [rows] -> [rows, 1, ..., 1]
        return tf.reshape(v, [rows] + [1] * len(shape))

    def kernel(x, targets, baseline):
        engine._traced()
        end = tf.cast(tf.reshape(tf.repeat(x[:, None], group, axis=1), [rows, *shape]), f64)
        start = tf.broadcast_to(tf.cast(baseline, f64), [rows, *shape])
        classes = tf.reshape(targets, [rows, 1])
        span = end - start
        moving = tf.not_equal(span, 0.0)
        total = flat_l1(span)

        def position(alpha):
            return start + span * alpha

        def step(t, z, attributions):
            _, g = engine._gradient_at(view, tf.cast(z, dtype), classes)
            g = tf.cast(g[:, 0], f64)
            alpha = tf.cast(t + 1, f64) / steps
            alpha_min, alpha_max = tf.maximum(alpha - max_dist, 0.0), tf.minimum(alpha + max_dist, 1.0)
            low, high = position(alpha_min), position(alpha_max)
            target = total * (1.0 - alpha)

            def inner(active, z, attributions):
                old = z
                where_alpha = tf.where(moving, (z - start) / tf.where(moving, span, 1.0), alpha_max)
                z = tf.where(per_row(active) & (where_alpha < alpha_min), low, z)
                current = flat_l1(z - end)
                met = tf.abs(target - current) <= tf.maximum(EPSILON * tf.maximum(tf.abs(target), tf.abs(current)), EPSILON)
                magnitude = tf.where(tf.equal(z, high), tf.constant(np.inf, f64), tf.abs(g))
                flat = tf.reshape(magnitude, [rows, -1])
                threshold = tf.sort(flat, axis=1)[:, quantile_index]
                chosen = (magnitude <= per_row(threshold)) & tf.math.is_finite(magnitude)
                room = tf.reduce_sum(tf.reshape(tf.abs(z - high) * tf.cast(chosen, f64), [rows, -1]), axis=1)
                gamma = tf.where(room > 0, (current - target) / tf.where(room > 0, room, 1.0), np.inf)
                moves = active & ~met & (room > 0)
                jump = tf.where(per_row(gamma > 1.0), high, z + (high - z) * per_row(tf.minimum(gamma, 1.0)))
                z = tf.where(per_row(moves) & chosen, jump, z)
                attributions = attributions + tf.where(per_row(active), (z - old) * g, 0.0)
                return active & moves & (gamma > 1.0), z, attributions

            active = tf.ones([rows], tf.bool)
            _, z, attributions = tf.while_loop(
                lambda active, z, a: tf.reduce_any(active), inner, (active, z, attributions)
            )
            return t + 1, z, attributions

        zero = tf.zeros([rows, *shape], f64)
        _, _, attributions = tf.while_loop(
            lambda t, z, a: t < steps, step, (tf.constant(0), start, zero), parallel_iterations=1
        )
        return tf.cast(tf.reshape(attributions, [n, group, *shape]), tf.float32)

    signature = [tf.TensorSpec([n, *shape], dtype), tf.TensorSpec([n, group], tf.int32), tf.TensorSpec(shape, dtype)]
    return tf.function(kernel, input_signature=signature)


def compute(request: Request, **options) -> Result:
    steps, baseline, fraction, max_dist = _settings(request, options)
    inputs, targets = request.inputs, request.targets
    view = engine.score_view(request.model, request.score, request.score_fn)
    shape, dtype = inputs.shape[1:], inputs.dtype
    B, K = targets.shape
    group = min(K, request.batch_size)
    n = engine._bucket(B, max(1, request.batch_size // group))
    key = ("guided_ig", engine._view_key(request.score, request.score_fn, None), steps, fraction, max_dist,
           shape, dtype.name, n, group)
    kernel = engine._compiled(
        request.model, key, lambda: _build_guided_ig_kernel(view, steps, fraction, max_dist, n, group, shape, dtype)
    )
    attributions = np.zeros((B, K, *shape), np.float32)
    for start in range(0, B, n):
        stop = min(start + n, B)
        x = engine._pad(inputs[start:stop], n)
        for k0, k1, columns in engine._class_groups(targets[start:stop], group):
            engine._stats["calls"] += 1
            a = kernel(x, engine._pad(columns, n).astype(np.int32), baseline)
            attributions[start:stop, k0:k1] = np.asarray(a)[: stop - start, : k1 - k0]
    resolved = {**options, "steps": steps, "fraction": fraction, "max_dist": max_dist}
    return Result(attributions, reduce_map(attributions, "sum"), target_scores(request), resolved)


register(
    Method(
        "guided_ig",
        "guided integrated gradients (Kapishnikov et al. 2021): an adaptive path moving the features of "
        "smallest gradient first; map: sum over the last axis",
        compute,
        defaults=dict(DEFAULTS),
        check=check,
    )
)
