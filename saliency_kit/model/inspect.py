"""Facts about a user's Keras model that the engine needs: its input signature, the channel axis
of its inputs, how to copy its weights into a rewritten copy, and the state it keeps outside its
variables (which keys the engine's caches). Importing it imports no framework but Keras: TensorFlow
is imported on its path only.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np

from . import keras_private
from .copy import input_signature as copy_signature
from .input_axes import SPATIAL_LAYER_KINDS, may_move_axes, traced_channel_axis
from .walker import walk

__all__ = [
    "input_signature",
    "channel_axis",
    "layer_channel_axis",
    "weight_sync",
    "derived_state",
    "outside_any_trace",
    "traced_shape",
]


def input_signature(model: keras.Model) -> tuple[tuple, str]:
    """``(shape [None, ...], dtype)`` of ``model``'s single input.

    Functional and Sequential models give it through ``model.inputs``; a subclassed model that
    was built or called gives it through its build shape. ``TypeError`` for anything that is not
    a Keras model; ``ValueError`` for unbuilt or multi-input models.
    """
    if not isinstance(model, keras.Model):
        kind = "None" if model is None else f"a {type(model).__name__}"
        raise TypeError(f"model must be a keras.Model (functional, Sequential or subclassed); received {kind}.")
    signatures = copy_signature(model)
    if len(signatures) != 1:
        raise ValueError(
            f"saliency_kit explains single-input models; this one has {len(signatures)} inputs; "
            f"received {model.name!r}."
        )
    shape, dtype = signatures[0]
    return (None, *shape[1:]), dtype


def _sublayers(model: keras.Model) -> Iterator[keras.layers.Layer]:
    """``model`` and every layer inside it (nested models, wrappers, cells): the one walker."""
    yield model
    for visit in walk(model):
        yield visit.layer


def outside_any_trace(fn: Callable) -> Any:
    """``fn()`` run eagerly, on the variables' own values, even while a kernel is being traced:
    tracing or probing a model must not land in the kernel (TensorFlow's ``init_scope``; on JAX,
    compile-time evaluation outside the kernel's stateless scope; PyTorch runs it as it is)."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        with tf.init_scope():
            return fn()
    if keras.backend.backend() == "torch":
        return fn()  # PyTorch traces nothing
    import jax

    with jax.ensure_compile_time_eval(), keras_private.outside_stateless_scope():
        return fn()


def layer_channel_axis(model: keras.Model, rank: int) -> int:
    """The channel axis of the model's spatial layers (``-1`` channels-last, ``0`` channels-first),
    from their ``data_format``: where a CAM layer's channels are.

    ``ValueError`` when they mix both formats (which axis is spatial cannot be told then).
    Non-image inputs (rank < 2 per input) are channels-last.
    """
    formats: dict[str, str] = {}
    for layer in _sublayers(model):
        kind = type(layer).__name__
        data_format = getattr(layer, "data_format", None)
        if data_format in ("channels_first", "channels_last") and any(k in kind for k in SPATIAL_LAYER_KINDS):
            formats.setdefault(data_format, layer.name)
    if len(formats) > 1:
        raise ValueError(
            f"model {model.name!r} mixes channels_first (layer {formats['channels_first']!r}) and "
            f"channels_last (layer {formats['channels_last']!r}) spatial layers, so its spatial axes "
            "cannot be told; saliency_kit refuses rather than reduce the wrong axis; received a mixed model."
        )
    return 0 if "channels_first" in formats and rank >= 2 else -1


_traced_axes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {(shape, dtype): Traced}


def _refuse_axes(model: keras.Model, why: str) -> ValueError:
    return ValueError(
        f"cannot tell which input axis of model {model.name!r} holds the channels ({why}); pass "
        "channels_axis=1 for [B, C, H, W] inputs or channels_axis=-1 for [B, H, W, C]; received a model "
        "whose input axes could not be followed."
    )


def channel_axis(model: keras.Model, rank: int, shape: tuple | None = None, dtype: str = "float32") -> int:
    """The channel axis of one input (``-1`` channels-last, ``0`` channels-first).

    From the spatial layers' ``data_format`` (:func:`layer_channel_axis`), unless the model may
    move its input's axes before them (a ``Permute`` or a transpose, as models converted from
    PyTorch do): then the model is traced on ``[None, *shape]`` and the graph is followed from
    the input to its first convolution or pooling through the transposes
    (:mod:`saliency_kit.model.input_axes`), once per model and input shape. ``ValueError`` when
    the channels land on an axis that is neither first nor last, or when a transpose lies on a
    way that cannot be followed: ``explain(..., channels_axis=)`` says it then.
    """
    declared = layer_channel_axis(model, rank)
    if rank < 2 or shape is None or not may_move_axes(model):
        return declared

    known = _traced_axes.setdefault(model, {})
    key = (tuple(shape), str(dtype))
    if key not in known:
        known[key] = outside_any_trace(lambda: traced_channel_axis(model, tuple(shape), dtype))
    found = known[key]
    if found.unsure:
        if found.moved:
            raise _refuse_axes(model, "a transpose lies before its first convolution, on a way that cannot be followed")
        return declared
    if found.axis is None:
        return declared
    if found.axis == rank:
        return -1
    if found.axis == 1:
        return 0
    raise _refuse_axes(
        model,
        f"its first convolution takes its channels from input axis {found.axis}, "
        "neither the first nor the last after the batch axis",
    )


def weight_sync(source: Any, copy: Any) -> Callable[[], None]:
    """``sync()`` copying ``source``'s weights into ``copy`` (same architecture): one compiled
    function on TensorFlow, the variables assigned one by one elsewhere."""
    pairs = list(zip(source.weights, copy.weights))
    # The rewrite rebuilds the same graph, so its variables come in the same order; names can
    # differ (Keras numbers unnamed variables: "variable" becomes "variable_1").
    if len(source.weights) != len(copy.weights) or any(
        tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype for a, b in pairs
    ):
        raise RuntimeError(f"the rewrite of {source.name!r} does not mirror its weights")
    if keras.backend.backend() != "tensorflow":

        def assign() -> None:
            for a, b in pairs:
                b.assign(a.value)

        return assign
    import tensorflow as tf

    @tf.function(autograph=False)
    def sync() -> None:
        for a, b in pairs:
            b.value.assign(a.value)

    return sync


def _tensor_type() -> type:
    """The backend's concrete tensor type (variables are not of it)."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return type(tf.constant(0.0))
    if keras.backend.backend() == "torch":
        import torch

        return torch.Tensor
    import jax

    return jax.Array


def derived_state(layer: Any) -> tuple:
    """``(attribute, dtype, shape, digest)`` of each tensor ``layer`` holds outside its variables
    (``Normalization``'s mean and variance, derived from its variables by ``finalize_state``): a
    compiled function captures such tensors as constants, so they key the engine's caches, by
    value (small per-channel statistics in practice)."""
    state, tensor = [], _tensor_type()
    for name, value in vars(layer).items():
        if isinstance(value, tensor):
            data = np.ascontiguousarray(keras.ops.convert_to_numpy(value))
            state.append((name, data.dtype.str, data.shape, hashlib.blake2b(data.tobytes(), digest_size=16).digest()))
    return tuple(state)


def traced_shape(fn: Callable, shape: tuple, dtype: str) -> tuple:
    """The shape of ``fn``'s output on an input of ``shape``, traced by the active backend (nothing runs)."""
    if keras.backend.backend() == "jax":
        import jax

        return tuple(getattr(jax.eval_shape(fn, jax.ShapeDtypeStruct(shape, dtype)), "shape", ()))
    if keras.backend.backend() == "torch":
        import torch

        with torch.no_grad():  # PyTorch traces nothing: run it once on zeros
            return tuple(getattr(fn(keras.ops.zeros(shape, dtype)), "shape", ()))
    import tensorflow as tf

    traced = tf.function(fn, autograph=False).get_concrete_function(tf.TensorSpec(shape, dtype))
    return tuple(getattr(traced.structured_outputs, "shape", ()))
