"""Occlusion (Zeiler & Fergus 2014): how much each target's score drops when a window of the
input is replaced by ``value``.

A window slides over the leading axes of one input — height and width of an image
``[H, W, C]``, time of a sequence ``[T, F]`` — spanning the whole last axis (channels,
features); for tabular inputs ``[F]`` it slides over the features, one at a time by default.
Each element's attribution is the mean score drop over the windows that cover it (elements no
window covers get 0). Defaults: a window of about 1/8 of each slid axis (at least 1), stride half
the window; tabular: window 1, stride 1. ``window``/``stride`` may be an int (every slid axis),
a tuple over the slid axes, or a tuple over all axes of one input (to slide over channels too).
Only forward passes are needed: batched and compiled through ``engine.all_scores``.
Map: mean over the last axis (for the default windows every channel holds the same value).
"""
from __future__ import annotations

import itertools

import numpy as np

from .. import engine
from ._base import Method, Request, Result, reduce_map, register

DEFAULTS = {"window": None, "stride": None, "value": 0.0}


def _per_axis(name, value, shape, slid, default):
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


def windows(shape, window=None, stride=None):
    """The occlusion windows of one input of ``shape``: a list of tuples of slices.

    Default window: 1 per feature for tabular inputs, else about 1/8 of each slid axis; default
    stride: half the window (at least 1). A last window is added at the far edge of an axis when
    the stride would leave it uncovered.
    """
    slid = range(len(shape) - 1) if len(shape) > 1 else range(1)
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


def _fill_and_windows(request: Request, options: dict):
    shape = request.inputs.shape[1:]
    try:
        fill = np.broadcast_to(np.asarray(options["value"], dtype=request.inputs.dtype), shape)
    except (ValueError, TypeError):
        raise ValueError(f"value must be a number or an array broadcastable to {shape}.") from None
    return fill, windows(shape, options["window"], options["stride"])


def check(request: Request, **options) -> None:
    _fill_and_windows(request, options)


def compute(request: Request, **options) -> Result:
    x, targets = request.inputs, request.targets
    shape = x.shape[1:]
    fill, regions = _fill_and_windows(request, options)
    base = engine.all_scores(request.model, x, **request.view_args)
    scores = np.take_along_axis(base, targets, axis=1)
    total = np.zeros((*targets.shape, *shape), np.float64)
    count = np.zeros(shape, np.float64)
    for region in regions:
        count[region] += 1
    per_block = max(1, (4 * request.batch_size) // len(x))
    for p0 in range(0, len(regions), per_block):
        block = regions[p0 : p0 + per_block]
        occluded = np.repeat(x[:, None], len(block), axis=1)  # [B, P, ...]
        for j, region in enumerate(block):
            occluded[(slice(None), j, *region)] = fill[region]
        values = engine.all_scores(request.model, occluded.reshape(-1, *shape), **request.view_args)
        values = values.reshape(len(x), len(block), -1)
        drops = scores[:, None] - np.take_along_axis(values, targets[:, None], axis=2)  # [B, P, K]
        for j, region in enumerate(block):
            total[(slice(None), slice(None), *region)] += drops[:, j][(...,) + (None,) * len(shape)]
    attributions = (total / np.maximum(count, 1)).astype(np.float32)
    resolved = {**options, "windows": len(regions)}
    return Result(attributions, reduce_map(attributions, "mean"), scores, resolved)


register(
    Method(
        "occlusion",
        "score drop when a sliding window is replaced by a value (Zeiler & Fergus 2014); "
        "map: mean over the last axis",
        compute,
        dict(DEFAULTS),
        check=check,
    )
)
