"""Compiled kernels shared by the path and masking methods (Blur IG, expected gradients, RISE,
Score-CAM, LayerCAM).

Two shapes of work recur:

* :func:`weighted_gradients` — ``Σ_t w_t ⊙ ∂s_k/∂z |_{z = p_t}`` over ``steps`` points ``p_t``
  built from each input (a blur path, random baselines and path positions), with running sums
  over blocks of points, so memory does not grow with ``steps``.
* :func:`masked_scores` — ``Σ_t f(s_k(x ⊙ M_t)) · M_t`` over ``count`` masks built from each
  input (RISE's random masks, Score-CAM's normalised activations), forward passes only.

Both run inside one ``tf.function`` per (model, method, options, shapes), cached weakly per model
by the engine, chunked so that one compiled call evaluates at most ``batch_size`` rows (input ×
class × point), and key any randomness by the input's index in the whole batch: results do not
depend on ``batch_size``.
"""
from __future__ import annotations

import hashlib
import math
from typing import Callable

import numpy as np
import tensorflow as tf

from .. import engine
from ._base import Request


def layout(batch_size: int, num_inputs: int, num_classes: int, points: int):
    """``(n inputs, class group, points per block)`` with ``n · group · points ≤ batch_size``
    (at least one of each)."""
    group = min(num_classes, batch_size)
    rows = max(1, batch_size // group)
    per_block = min(points, rows)
    return engine._bucket(num_inputs, max(1, rows // per_block)), group, per_block


def _chunks(request: Request, n: int, group: int):
    """Yield ``(start, stop, k0, k1, x [n, ...], targets [n, group], index [n])``, padded."""
    inputs, targets = request.inputs, request.targets
    for start in range(0, len(inputs), n):
        stop = min(start + n, len(inputs))
        x = engine._pad(inputs[start:stop], n)
        index = engine._pad(np.arange(start, stop, dtype=np.int32), n)
        for k0, k1, columns in engine._class_groups(targets[start:stop], group):
            yield start, stop, k0, k1, x, engine._pad(columns, n).astype(np.int32), index


def weighted_gradients(
    request: Request,
    key: tuple,
    steps: int,
    block: Callable,
    constants: tuple = (),
    *,
    extra: np.ndarray | None = None,
) -> np.ndarray:
    """``[B, K, *input]``: ``Σ_{t < steps} w_t ⊙ ∂s_k/∂z`` at the points ``z = p_t``.

    ``block(x [n, ...], index [n], t [m] int32, extra [n, ...] or None, *constants) ->
    (points [n, m, *input], weights [n, m, *input])`` builds ``m`` points of each input and
    their weights in TensorFlow; rows with ``t ≥ steps`` (padding of the last block) are
    dropped. ``extra`` ``[B, ...]`` is per-input data (e.g. random draws) passed chunk by chunk;
    ``constants`` are tensors shared by every input. ``key`` names the method and its options
    for the compiled-function cache.
    """
    model, inputs, targets = request.model, request.inputs, request.targets
    engine.check_batch_size(request.batch_size)
    view = engine.score_view(model, request.score, request.score_fn)
    shape, dtype = inputs.shape[1:], inputs.dtype
    B, K = targets.shape
    n, group, m = layout(request.batch_size, B, K, steps)
    blocks = math.ceil(steps / m)
    rank = len(shape)
    const_specs = [tf.TensorSpec(np.shape(c), tf.as_dtype(np.asarray(c).dtype)) for c in constants]
    extra_spec = [] if extra is None else [tf.TensorSpec([n, *extra.shape[1:]], tf.as_dtype(extra.dtype))]

    def _build_kernel():
        def kernel(x, columns, index, *rest):
            engine._traced()
            more, consts = (rest[0], rest[1:]) if extra is not None else (None, rest)

            def one_block(j, total):
                t = j * m + tf.range(m, dtype=tf.int32)
                points, weights = block(x, index, t, more, *consts)
                rows = tf.reshape(tf.cast(points, dtype), [n * m, *shape])
                repeated = tf.reshape(tf.repeat(columns[:, None], m, axis=1), [n * m, group])
                _, g = engine._gradient_at(view, rows, repeated)
                g = tf.reshape(g, [n, m, group, *shape])
                valid = tf.reshape(tf.cast(t < steps, dtype), [1, m] + [1] * rank)
                weights = tf.cast(weights, dtype) * valid
                return j + 1, total + tf.reduce_sum(weights[:, :, None] * g, axis=1)

            total = tf.zeros([n, group, *shape], dtype)
            if blocks == 1:
                return one_block(0, total)[1]
            return tf.while_loop(lambda j, _: j < blocks, one_block, (0, total), parallel_iterations=1)[1]

        signature = [
            tf.TensorSpec([n, *shape], dtype),
            tf.TensorSpec([n, group], tf.int32),
            tf.TensorSpec([n], tf.int32),
            *extra_spec,
            *const_specs,
        ]
        return tf.function(kernel, input_signature=signature)

    full_key = ("weighted_gradients", engine._view_key(request.score, request.score_fn, None), key,
                steps, shape, dtype.name, n, group, m, _layout_of(constants),
                None if extra is None else (extra.shape[1:], extra.dtype.name))
    kernel = engine._compiled(model, full_key, _build_kernel)
    out = np.zeros((B, K, *shape), np.float32)
    for start, stop, k0, k1, x, columns, index in _chunks(request, n, group):
        args = [x, columns, index]
        if extra is not None:
            args.append(engine._pad(extra[start:stop], n))
        engine._stats["calls"] += 1
        a = kernel(*args, *constants)
        out[start:stop, k0:k1] = np.asarray(a, np.float32)[: stop - start, : k1 - k0]
    return out


def masked_scores(
    request: Request,
    key: tuple,
    count: int,
    prepare: Callable,
    masks: Callable,
    finish: Callable,
    constants: tuple = (),
    *,
    softmax: bool = False,
    map_shape: tuple,
    out_shape: tuple | None = None,
) -> np.ndarray:
    """``[B, K, *map_shape]``: ``finish(Σ_{t < count} f(s_k(x ⊙ M_t)) · W_t, state)``.

    ``prepare(x, index, *constants) -> state`` runs once per chunk of inputs (e.g. a layer's
    activations); ``masks(state, x, t [m], *constants) -> (M [n, m, *input-broadcastable],
    W [n, m, *map_shape])`` gives the masks that multiply the input and what each score weighs;
    ``f`` is the identity, or the softmax over the score vector when ``softmax``. Forward
    passes only. ``finish(total [n, K, *map_shape], state) -> [n, K, *out_shape]`` (default
    ``out_shape = map_shape``).
    """
    model, inputs, targets = request.model, request.inputs, request.targets
    engine.check_batch_size(request.batch_size)
    view = engine.score_view(model, request.score, request.score_fn)
    shape, dtype = inputs.shape[1:], inputs.dtype
    B, K = targets.shape
    # forward passes only: all K classes come from one forward pass of each masked copy
    group = K
    m = min(count, request.batch_size)
    n = engine._bucket(B, max(1, request.batch_size // m))
    blocks = math.ceil(count / m)
    const_specs = [tf.TensorSpec(np.shape(c), tf.as_dtype(np.asarray(c).dtype)) for c in constants]

    def _build_kernel():
        def kernel(x, columns, index, *consts):
            engine._traced()
            state = prepare(x, index, *consts)

            def one_block(j, total):
                t = j * m + tf.range(m, dtype=tf.int32)
                mask, weight = masks(state, x, t, *consts)
                copies = tf.reshape(x[:, None] * tf.cast(mask, dtype), [n * m, *shape])
                values = tf.cast(view(copies), tf.float32)
                if softmax:
                    values = tf.nn.softmax(values, axis=-1)
                repeated = tf.reshape(tf.repeat(columns[:, None], m, axis=1), [n * m, group])
                s = tf.reshape(tf.gather(values, repeated, batch_dims=1), [n, m, group])
                s = s * tf.cast(t < count, tf.float32)[None, :, None]
                weight = tf.cast(weight, tf.float32)
                flat = tf.reshape(weight, [n, m, -1])
                added = tf.einsum("nmk,nmp->nkp", s, flat)
                return j + 1, total + tf.reshape(added, [n, group, *map_shape])

            total = tf.zeros([n, group, *map_shape], tf.float32)
            if blocks == 1:
                total = one_block(0, total)[1]
            else:
                total = tf.while_loop(lambda j, _: j < blocks, one_block, (0, total), parallel_iterations=1)[1]
            return finish(total, state)

        signature = [
            tf.TensorSpec([n, *shape], dtype),
            tf.TensorSpec([n, group], tf.int32),
            tf.TensorSpec([n], tf.int32),
            *const_specs,
        ]
        return tf.function(kernel, input_signature=signature)

    full_key = ("masked_scores", engine._view_key(request.score, request.score_fn, None), key, count,
                softmax, shape, dtype.name, n, group, m, _layout_of(constants))
    kernel = engine._compiled(model, full_key, _build_kernel)
    out = np.zeros((B, K, *(map_shape if out_shape is None else out_shape)), np.float32)
    for start, stop, k0, k1, x, columns, index in _chunks(request, n, group):
        engine._stats["calls"] += 1
        a = kernel(x, columns, index, *constants)
        out[start:stop, k0:k1] = np.asarray(a, np.float32)[: stop - start, : k1 - k0]
    return out


def input_keys(seed: int, inputs: np.ndarray) -> list:
    """One generator seed per input, from ``seed`` and the input's own bytes: random draws keyed
    this way do not depend on the input's position in a batch, nor on ``batch_size``."""
    return [
        [int(seed), int.from_bytes(hashlib.blake2b(np.ascontiguousarray(x).tobytes(), digest_size=8).digest(), "little")]
        for x in inputs
    ]


def _layout_of(constants) -> tuple:
    """The shapes and dtypes of kernel arguments, for cache keys."""
    return tuple((tuple(np.shape(c)), tf.as_dtype(np.asarray(c).dtype).name) for c in constants)


def target_scores(request: Request) -> np.ndarray:
    """``[B, K]`` scores of the targets at the inputs (one batched forward pass)."""
    values = engine.all_scores(request.model, request.inputs, **request.view_args)
    return np.take_along_axis(values, request.targets, axis=1)
