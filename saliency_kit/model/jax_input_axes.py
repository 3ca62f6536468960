"""Which axis of a model's input holds the channels, found by following its traced JAX program.

:func:`traced_channel_axis` is :func:`.input_axes.traced_channel_axis` on JAX: the model (or, for
a functional model, its front up to its first spatial layer) is traced with
:func:`jax.make_jaxpr` on a ``[2, *shape]`` input, and the program is followed from the input
to the first ``conv_general_dilated`` (whose dimension numbers say where its input's channels
are) or pooling window (the axis besides the batch whose window and stride are 1), composing
the ``transpose`` permutations on the way. Operations that keep axes where they are
(element-wise arithmetic, casts, padding, slices) are passed through; any other makes the answer
unsure.
"""

from __future__ import annotations

from typing import Any

import jax
import keras
from jax.extend import core

#: what following the program found: ``(axis, moved, unsure)`` as :class:`.input_axes.Traced`
Found = tuple[int | None, bool, bool]

__all__ = ["traced_channel_axis", "Found", "KEEP_AXES"]

_CONVOLUTION = "conv_general_dilated"
_POOLING = ("reduce_window_max", "reduce_window_min", "reduce_window_sum", "reduce_window")
#: JAX primitives whose output axes are their (first data) input's axes
KEEP_AXES = frozenset(
    {
        "convert_element_type", "copy", "copy_p", "stop_gradient", "reduce_precision",
        "add", "add_any", "sub", "mul", "div", "max", "min", "pow", "integer_pow", "square", "neg", "abs",
        "sqrt", "rsqrt", "exp", "exp2", "log", "log1p", "tanh", "logistic", "erf", "sign", "floor", "ceil",
        "round", "clamp", "select_n", "pad", "slice", "dynamic_slice", "nextafter", "rem",
    }
)  # fmt: skip


def _reaching(jaxpr: Any, source: Any) -> set:
    """``id`` of every variable of ``jaxpr`` computed from ``source``."""
    seen = {id(source)}
    for eqn in jaxpr.eqns:  # in order: inputs before their consumers
        if any(isinstance(v, core.Var) and id(v) in seen for v in eqn.invars):
            seen.update(id(v) for v in eqn.outvars)
    return seen


def _follow(jaxpr: Any, var: Any, source: Any, reaching: set) -> tuple[list | None, bool]:
    """``(axes, moved)``: ``axes[i]`` the axis of ``source`` at position ``i`` of ``var``, or
    ``None`` when the way cannot be followed; ``moved`` whether a transpose lies on the way."""
    producers = {id(v): eqn for eqn in jaxpr.eqns for v in eqn.outvars}
    chain = []
    while var is not source:
        eqn = producers.get(id(var))
        data = [v for v in eqn.invars if isinstance(v, core.Var) and id(v) in reaching] if eqn else []
        if not data:
            return None, False
        chain.append((eqn, data[0]))
        var = data[0]
    axes: list = list(range(len(source.aval.shape)))
    moved = False
    for eqn, data in reversed(chain):
        name, out = eqn.primitive.name, eqn.outvars[0]
        in_shape, out_shape = tuple(data.aval.shape), tuple(out.aval.shape)
        if name == "transpose":
            permutation = [int(p) for p in eqn.params["permutation"]]
            axes = [axes[p] for p in permutation]
            moved = moved or permutation != sorted(permutation)
        elif name == "squeeze":
            dims = [d % len(in_shape) for d in eqn.params["dimensions"]]
            axes = [a for i, a in enumerate(axes) if i not in dims]
        elif name in KEEP_AXES and len(in_shape) == len(out_shape):
            continue
        elif name == "reshape" and in_shape == out_shape:
            continue
        else:
            return None, moved
    return axes, moved


def _channel_position(eqn: Any) -> int | None:
    """Where the spatial operation ``eqn`` takes its input's channels, or ``None`` if unclear."""
    if eqn.primitive.name == _CONVOLUTION:
        return int(eqn.params["dimension_numbers"].lhs_spec[1])
    window, strides = eqn.params["window_dimensions"], eqn.params["window_strides"]
    kept = [i for i in range(1, len(window)) if window[i] == 1 and strides[i] == 1]
    return kept[0] if len(kept) == 1 else None


def _jaxpr(model: Any, shape: tuple, dtype: str) -> Any:
    spec = jax.ShapeDtypeStruct((2, *(2 if s is None else int(s) for s in shape)), dtype)
    values = [jax.ShapeDtypeStruct(tuple(v.shape), keras.backend.standardize_dtype(v.dtype)) for v in model.variables]

    def pure(values: list, inputs: Any) -> Any:
        with keras.StatelessScope(state_mapping=list(zip(model.variables, values))):
            return model(inputs, training=False)

    return jax.make_jaxpr(pure)(values, spec).jaxpr


def _front_axis(front: keras.Model, position: int, shape: tuple, dtype: str) -> Found | None:
    """The channel axis from the front of a functional model (up to its first spatial layer,
    which takes its channels at ``position``); ``None`` when the front cannot be traced."""
    try:
        jaxpr = _jaxpr(front, shape, dtype)
    except Exception:  # noqa: BLE001 - fall back to tracing the whole model
        return None
    source = jaxpr.invars[-1]
    reaching = _reaching(jaxpr, source)
    (output,) = jaxpr.outvars
    if not isinstance(output, core.Var) or id(output) not in reaching:
        return (None, False, False)
    axes, moved = _follow(jaxpr, output, source, reaching)
    if axes is None:
        return (None, moved, True)
    axis = axes[position]
    return (axis, moved, axis is None)


def traced_channel_axis(model: keras.Model, front: tuple | None, shape: tuple, dtype: str) -> Found:
    """:func:`.input_axes.traced_channel_axis` from the model's traced JAX program; ``front``:
    :func:`.input_axes.front_of` the model (traced instead of the whole when it can be)."""
    found = _front_axis(front[0], front[1], shape, dtype) if front is not None else None
    if found is not None:
        return found
    try:
        jaxpr = _jaxpr(model, shape, dtype)
    except Exception:  # noqa: BLE001 - a model that cannot be traced abstractly: nothing found
        return (None, False, False)
    source = jaxpr.invars[-1]
    reaching = _reaching(jaxpr, source)
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name != _CONVOLUTION and name not in _POOLING:
            continue
        if not eqn.invars or not isinstance(eqn.invars[0], core.Var) or id(eqn.invars[0]) not in reaching:
            continue
        axes, moved = _follow(jaxpr, eqn.invars[0], source, reaching)
        position = _channel_position(eqn)
        if axes is None or position is None:
            return (None, moved, True)
        axis = axes[position]
        return (axis, moved, axis is None)
    return (None, False, False)
