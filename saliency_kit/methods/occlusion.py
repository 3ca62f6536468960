"""Occlusion (Zeiler & Fergus 2014): how much each target's score drops when a window of the
input is replaced by ``value``.

A window slides over the leading axes of one input — height and width of an image
``[H, W, C]`` (``[C, H, W]`` for channels-first models), time of a sequence ``[T, F]`` —
spanning the whole channel axis (channels, features); for tabular inputs ``[F]`` it slides over the features,
one at a time by default.
Each element's attribution is the mean score drop over the windows that cover it (elements no
window covers get 0). Defaults: a window of about 1/8 of each slid axis (at least 1), stride half
the window; tabular: window 1, stride 1. ``window``/``stride`` may be an int (every slid axis),
a tuple over the slid axes, or a tuple over all axes of one input (to slide over channels too).
Only forward passes are needed, batched inside the compiled kernel.
Map: mean over the last axis (for the default windows every channel holds the same value).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from .base import Option, Request, register

__all__ = ["occlusion", "windows", "prepare"]


def _per_axis(name: Any, value: Any, shape: Any, slid: Any, default: Any) -> Any:
    """``value`` as one size per axis of one input (``len(shape)``)."""
    if value is None:
        sizes = [default(shape[a]) if a in slid else shape[a] for a in range(len(shape))]
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        sizes = [int(value) if a in slid else shape[a] for a in range(len(shape))]
    else:
        value = tuple(int(v) for v in value)
        if len(value) == len(slid):
            it = iter(value)
            sizes = [next(it) if a in slid else shape[a] for a in range(len(shape))]
        elif len(value) == len(shape):
            sizes = list(value)
        else:
            raise ValueError(
                f"{name} must be an int or a tuple of {len(slid)} (slid axes) or {len(shape)} "
                f"(all axes of one input {shape}) ints; received {value!r}."
            )
    if any(s < 1 for s in sizes):
        raise ValueError(f"{name} sizes must be positive; received {sizes}.")
    return sizes


def windows(shape: Any, window: Any = None, stride: Any = None, channel_axis: Any = -1) -> Any:
    """The occlusion windows of one input of ``shape``: a list of tuples of slices.

    Default window: 1 per feature for tabular inputs, else about 1/8 of each slid axis; default
    stride: half the window (at least 1). A last window is added at the far edge of an axis when
    the stride would leave it uncovered.
    """
    channels = channel_axis % len(shape)
    slid = [a for a in range(len(shape)) if a != channels] if len(shape) > 1 else [0]
    size = _per_axis("window", window, shape, slid, lambda n: 1 if len(shape) == 1 else max(1, round(n / 8)))
    if any(w > n for w, n in zip(size, shape)):
        raise ValueError(f"window {tuple(size)} does not fit in an input of shape {tuple(shape)}.")
    if stride is None:
        steps = [max(1, w // 2) for w in size]
    else:
        steps = _per_axis("stride", stride, shape, slid, None)
    starts = []
    for n, w, s in zip(shape, size, steps):
        axis = list(range(0, n - w + 1, s))
        if axis[-1] + w < n:
            axis.append(n - w)  # cover the far edge too
        starts.append(axis)
    return [tuple(slice(b, b + w) for b, w in zip(corner, size)) for corner in itertools.product(*starts)]


def _sizes(value: Any) -> Any:
    return value if value is None or isinstance(value, (int, np.integer)) else tuple(int(v) for v in value)


def prepare(request: Request, options: dict) -> dict:
    shape = request.inputs.shape[1:]
    try:
        fill = np.broadcast_to(np.asarray(options["value"], dtype=request.inputs.dtype), shape)
    except (ValueError, TypeError):
        raise ValueError(
            f"value must be a number or an array broadcastable to one input {shape}; "
            f"received {np.shape(options['value'])}."
        ) from None
    window, stride = _sizes(options["window"]), _sizes(options["stride"])
    regions = windows(shape, window, stride, request.channel_axis)
    return {**options, "window": window, "stride": stride, "value": np.ascontiguousarray(fill), "windows": len(regions)}


@register(
    "occlusion",
    title="Occlusion",
    summary="score drop when a sliding window is replaced by a value (Zeiler & Fergus 2014); "
    "map: mean over the last axis",
    options=[
        Option(
            "window",
            None,
            type=int,
            array=True,
            help="window size (int, or one per axis); default about 1/8 of each axis",
        ),
        Option("stride", None, type=int, array=True, help="step between windows; default half the window"),
        Option("value", 0.0, array=True, help="what a window is replaced by"),
    ],
    reduce="mean",
    signed=True,
    prepare=prepare,
    cost=lambda options: options["windows"],
    spatial=True,
)
def occlusion(ctx: Any, window: Any, stride: Any, value: Any, **resolved: Any) -> Any:
    from keras import ops

    shape = ctx.shape
    regions = windows(shape, window, stride, ctx.channel_axis)
    corners = np.array([[s.start for s in region] for region in regions], np.int32)  # [P, rank]
    size = [s.stop - s.start for s in regions[0]]
    count = np.zeros(shape, np.float32)
    for region in regions:
        count[region] += 1
    x = ctx.inputs
    scores = ctx.scores(x)  # [n, K]
    ones = [1] * len(shape)

    def occlude(i: Any) -> Any:  # windows i, [m] -> score drops spread over each window, [n, m, K, *input]
        starts = ops.take(corners, i, axis=0)  # [m, rank]
        inside: Any = None
        for axis, (length, width) in enumerate(zip(shape, size)):
            position = ops.reshape(
                ops.arange(length, dtype="int32"), [1] * (axis + 1) + [length] + [1] * (len(shape) - axis - 1)
            )
            start = ops.reshape(starts[:, axis], [-1, *ones])
            here = ops.logical_and(position >= start, position < start + width)
            inside = here if inside is None else ops.logical_and(inside, here)
        occluded = ops.where(inside[None], value, x[:, None])  # [n, m, *input]
        drops = scores[:, None] - ctx.scores(occluded)  # [n, m, K]
        return ops.reshape(drops, [*drops.shape, *ones]) * ops.cast(inside[None, :, None], drops.dtype)

    return ctx.sum(len(regions), occlude) / np.maximum(count, 1)
