"""Which axis of a model's input holds the channels, found by following the ``torch`` calls the
model makes on PyTorch (imported only there).

:func:`traced_channel_axis` is :func:`.input_axes.traced_channel_axis` on PyTorch: the model (or,
for a functional model, its front up to its first spatial layer) runs once on zeros ``[2, *shape]``
under :class:`_Following`, a ``torch.overrides.TorchFunctionMode`` that keeps, for every tensor
computed from the input, which input axis each of its axes is: ``permute`` and ``transpose``
compose, operations that keep axes where they are (element-wise arithmetic, casts, copies,
padding, slices that keep the rank) pass them on, any other makes them unknown (and forgets the
transposes before it: only those after the last unknown step say the axes were moved, as when the
JAX program is followed back from the output). Keras' PyTorch
convolutions and pooling take channels-first tensors (a channels-last layer permutes its input
first, a call this follows like any other), so the first ``conv*``/``*pool*`` call reading the
input's values has its channels at its axis 1.
"""

from __future__ import annotations

from typing import Any

import keras
import torch
from torch.overrides import TorchFunctionMode

__all__ = ["traced_channel_axis"]

#: what following the calls found: ``(axis, moved, unsure)`` as :class:`.input_axes.Traced`
Found = tuple[int | None, bool, bool]

_KEEP = frozenset(
    {
        "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "neg", "negative", "abs",
        "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "clamp", "clip", "maximum", "minimum", "pow",
        "square", "where", "to", "type", "float", "double", "half", "clone", "contiguous", "detach", "pad",
        "__add__", "__radd__", "__iadd__", "__sub__", "__rsub__", "__isub__", "__mul__", "__rmul__", "__imul__",
        "__truediv__", "__rtruediv__", "__itruediv__", "__neg__", "__pow__", "__getitem__", "add_", "mul_",
        "sub_", "div_", "batch_norm", "layer_norm", "dropout", "alias", "requires_grad_",
    }
)  # fmt: skip
_SPATIAL = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")


def _spatial(name: str) -> bool:
    return name in _SPATIAL or "pool" in name


class _Following(TorchFunctionMode):
    """Keeps ``axes[id(t)] = (t, [input axis of each axis of t, or None], moved)``; stops at the
    first spatial call reading the input's values (``found``)."""

    def __init__(self, source: Any) -> None:
        super().__init__()
        self.axes: dict = {id(source): (source, list(range(source.ndim)), False)}
        self.found: Found | None = None

    def _of(self, value: Any) -> tuple[list, bool] | None:
        entry = self.axes.get(id(value)) if isinstance(value, torch.Tensor) else None
        return (entry[1], entry[2]) if entry is not None and entry[0] is value else None

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.found is not None:
            return out
        read = [known for known in (self._of(a) for a in args) if known is not None]
        if not read:
            return out
        axes, moved = read[0]
        name = getattr(func, "__name__", "")
        if _spatial(name):
            self.found = (axes[1] if len(axes) > 1 else None, moved, len(axes) < 2 or axes[1] is None)
            return out
        if not isinstance(out, torch.Tensor):
            return out
        if name in ("permute",):
            dims = kwargs.get("dims", args[1] if len(args) == 2 and isinstance(args[1], (tuple, list)) else args[1:])
            new, moved = [axes[int(d)] for d in dims], True
        elif name in ("transpose", "swapaxes", "swapdims"):
            pair = args[1:3] if len(args) >= 3 else (kwargs.get("dim0"), kwargs.get("dim1"))
            a, b = (int(d) % len(axes) for d in pair)
            new = list(axes)
            new[a], new[b], moved = axes[b], axes[a], True
        elif name in _KEEP and out.ndim == len(axes):
            new = list(axes)
        else:  # axes unknown from here; a transpose before it no longer tells where they went
            new, moved = [None] * out.ndim, False
        self.axes[id(out)] = (out, new, moved)
        return out


def _follow(model: Any, shape: tuple, dtype: str) -> tuple[_Following, Any] | None:
    source = keras.ops.zeros((2, *shape), dtype)
    following = _Following(source)
    try:
        with torch.no_grad(), following:
            out = model(source, training=False)
    except Exception:  # noqa: BLE001 - a model that cannot run on zeros: nothing found
        return None
    return following, out


def traced_channel_axis(model: keras.Model, front: tuple | None, shape: tuple, dtype: str) -> Found:
    """:func:`.input_axes.traced_channel_axis` from the calls the model makes; ``front``:
    :func:`.input_axes.front_of` the model (followed instead of the whole when it can be)."""
    if front is not None:
        followed = _follow(front[0], shape, dtype)
        if followed is not None:
            following, out = followed
            known = following._of(out)
            if known is None:
                return (None, False, False)
            axes, moved = known
            axis = axes[front[1]]
            return (axis, moved, axis is None)
    followed = _follow(model, shape, dtype)
    if followed is None or followed[0].found is None:
        return (None, False, False)
    return followed[0].found
