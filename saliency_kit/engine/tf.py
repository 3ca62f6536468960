"""The TensorFlow backend of the engine: every TensorFlow-specific piece lives in it.

This module is the backend object :func:`saliency_kit.engine.backend.active` returns: its
``__all__`` is the backend's surface (:class:`saliency_kit.engine.backend.Backend`). It builds
the ``tf.function`` kernels and says how a model's backward passes run; the :class:`Context` a
method sees is in :mod:`saliency_kit.engine.tf_context`, the gradient tapes and target selection
in :mod:`saliency_kit.engine.tf_gradients`. Gradient tapes and while loops are in these modules
and nowhere else in the engine or the methods (the seeded draws and the resizing are
backend-neutral: :mod:`.draws`, :mod:`.resize`);
a ``jax.py`` sibling offering the same :class:`Context` and kernel builders could be added later.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from ..errors import translated
from ..model.inspect import derived_state, weight_sync
from ..model.rewrite import rewrite
from ..model.scores import ScoreView, score_columns
from ..model.walker import is_recurrent
from .context import run_method, run_values
from .selection import Selection
from .spec import KernelSpec
from .tf_context import Context

if TYPE_CHECKING:
    import keras

__all__ = [
    "Context",
    "ScoreView",
    "Selection",
    "build_kernel",
    "build_values_kernel",
    "vectorise_classes",
    "eagerly",
    "array_spec",
    "to_numpy",
    "translating",
    "rewrite",
    "weight_sync",
    "derived_state",
    "score_columns",
]


class _OwnKernelsFilter(logging.Filter):
    """Drop TensorFlow's "frequent retracing" warning for the engine's kernels.

    Each cache entry is its own ``tf.function`` built from the same Python code, which that
    heuristic mistakes for retracing; real retracing is counted by ``engine.trace_count``.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("triggered tf.function retracing" in message and "kernel" in message)


tf.get_logger().addFilter(_OwnKernelsFilter())


# ------------------------------------------------------------------------------------ models
def vectorise_classes(model: keras.Model) -> bool:
    """Whether K backward passes should run vectorised (``pfor``) rather than in a loop.

    Vectorised on a GPU. On a CPU a loop of K backward passes over the shared forward pass is
    faster (measured on ResNet50: about 0.6–0.8 of K separate calls, ``pfor`` about 0.9, since
    a K× larger backward batch runs less efficiently there). Recurrent models always loop:
    ``pfor`` takes many seconds to convert their while loops.
    """
    return bool(tf.config.list_logical_devices("GPU")) and not is_recurrent(model)


def eagerly(fn: Callable) -> Any:
    """``fn()`` run eagerly even while a kernel is being traced (building a view or a rewrite
    runs the model on probe inputs, which must not land in the kernel's graph)."""
    with tf.init_scope():
        return fn()


# ----------------------------------------------------------------------------------- kernels
def build_kernel(spec: KernelSpec) -> Callable:
    """The compiled ``kernel(x, targets, index, keys, seed, payload, *arrays) -> dict`` of one method
    (what it is built from: :class:`~saliency_kit.engine.spec.KernelSpec`).

    ``compute(ctx, **options)`` returns attributions ``[n, K, ...]`` or a dict holding them under
    ``"attributions"`` plus per-target extras ``[n, K, ...]`` (``"scores"`` among them when the
    method has the scores at the inputs already); the kernel adds the target scores at the
    inputs when they came free (the method took gradients there). Otherwise it returns none:
    a forward pass of the ``n`` clean inputs in every call would cost more than one batched pass
    over all of them afterwards (:func:`saliency_kit.engine.run` does that, or reuses the scores
    ``"topK"`` targets were ranked by).
    Options named in ``spec.array_names`` arrive as tensors (so a new baseline does not
    recompile); ``keys`` (uint32 ``[n, 2]``) and ``seed`` (uint32 ``[2]``) arrive as the words of
    the int64 noise keys and seed (:func:`saliency_kit.engine.draws.words`), the seed also as the
    method's ``seed`` option. While it is traced, the reports of the op-level
    backward rules it applies are appended to ``spec.reports``. An error raised inside leaves as
    one line naming ``spec.doing`` (:func:`translating`). The target's payload leaves arrive as
    the tuple argument ``payload``; with ``spec.space``, the payload is ``{"held": model inputs,
    "target": the target's payload}`` and ``x`` are the space's rows: its points, or token ids
    the kernel embeds first (:attr:`~saliency_kit.engine.space.Space.lookup`).
    """
    n, group = spec.layout.n, spec.layout.group
    views = tf.autograph.experimental.do_not_convert(spec.views)  # cache look-ups, not model code
    spec = dataclasses.replace(spec, views=views)
    leaf_specs = spec.payload[2]

    def kernel(x: Any, targets: Any, index: int, keys: Any, seed: int, leaves: Any, *arrays: Any) -> dict:
        return run_method(spec, Context, (x, targets, index, keys, seed, leaves, arrays))

    signature = [
        tf.TensorSpec([n, *spec.shape], spec.dtype),
        tf.TensorSpec([n, group], tf.int32),
        tf.TensorSpec([n], tf.int32),
        tf.TensorSpec([n, 2], tf.uint32),
        tf.TensorSpec([2], tf.uint32),
        tuple(leaf_specs),
        *spec.array_specs,
    ]
    return translating(tf.function(kernel, input_signature=signature, autograph=False), spec.doing)


def translating(compiled: Any, doing: str) -> Callable:
    """``compiled`` (a ``tf.function`` with a complete ``input_signature``) called so that an error
    raised while it is traced or run reaches the user as one line
    (:func:`saliency_kit.errors.translated`), never as TensorFlow's trace.

    Its one concrete function is traced at the first call and called directly from then on:
    the same graph, without the dispatch a ``tf.function`` repeats on every call to choose it
    (a fixed cost of about half a millisecond, the whole difference on a small model)."""

    concrete: list = []

    def call(*args: Any) -> Any:
        try:
            if not concrete:
                concrete.append(compiled.get_concrete_function())
            return concrete[0](*args)
        except Exception as error:  # noqa: BLE001 - every error leaves as the project's one line
            raise translated(error, doing) from None

    return call


def build_values_kernel(
    views: Any,
    n: int,
    shape: tuple,
    dtype: Any,
    traced: Any,
    doing: str = "the forward pass",
    raw: bool | str = False,
    taps: tuple = (),
) -> Callable:
    """The compiled ``kernel(x [n, ...]) -> [n, C]``: the whole score vector, forward only
    (``raw=True``: the model's output structure, float32 leaves ``[n, ...]``; ``taps``: instead,
    ``{path: activations}`` of those layers, in their own dtype). For a model with
    several inputs ``shape`` and ``dtype`` are lists (one per input, graph order) and ``x`` a
    tuple of them."""

    views = tf.autograph.experimental.do_not_convert(views)
    several = isinstance(shape, list)

    def kernel(x: Any) -> Any:
        traced()
        return run_values(views(), x, several, raw, taps)

    if several:
        spec: Any = tuple(tf.TensorSpec([n, *s], d) for s, d in zip(shape, dtype))
    else:
        spec = tf.TensorSpec([n, *shape], dtype)
    return translating(tf.function(kernel, input_signature=[spec], autograph=False), doing)


def array_spec(value: np.ndarray) -> tf.TensorSpec:
    return tf.TensorSpec(value.shape, tf.as_dtype(value.dtype))


def to_numpy(tensor: Any) -> np.ndarray:
    return np.asarray(tensor)
