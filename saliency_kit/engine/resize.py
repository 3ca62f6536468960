"""Linear resizing of maps in ``keras.ops``: the same numbers on every backend.

:func:`linear` resizes maps ``[n, K, *s]`` with 1, 2 or 3 spatial axes (sequences, images,
volumes) one axis at a time, the last first, with half-pixel centres and edges held: output
position ``i`` of an axis of ``S`` cells resized to ``T`` reads the input at ``(i + ½) · S/T − ½``
(clamped to the axis), linearly between its two neighbours. That is
``scipy.ndimage.zoom(order=1, grid_mode=True, mode="nearest")``, and TensorFlow's
``tf.image.resize(method="bilinear")`` (no antialiasing) one axis at a time. The positions and
weights depend on the sizes only: they are computed on the host in float32 as TensorFlow's
kernel computes them, so the device runs gathers and ``a + (b − a) · w`` alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from keras import ops

__all__ = ["linear", "weights"]


def weights(source: int, target: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(lower int32 [T], upper int32 [T], w float32 [T])``: output cell ``i`` of an axis of
    ``source`` cells resized to ``target`` is ``x[lower] + (x[upper] − x[lower]) · w``."""
    scale = np.float32(source) / np.float32(target)
    at = (np.arange(target, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
    floor = np.floor(at)
    lower = np.maximum(floor, 0).astype(np.int32)
    upper = np.minimum(np.ceil(at), source - 1).astype(np.int32)
    return lower, upper, (at - floor).astype(np.float32)


def linear(maps: Any, size: Sequence[int]) -> Any:
    """``maps [n, K, *s]`` (1 to 3 spatial axes) resized to ``[n, K, *size]`` in their dtype
    (computed in float32): linear along each axis in turn, the last first, half-pixel centres,
    edges held. Maps already of that size are returned as they are."""
    spatial, size = tuple(int(d) for d in maps.shape[2:]), tuple(int(d) for d in size)
    if len(spatial) != len(size) or not 1 <= len(size) <= 3:
        raise ValueError(f"maps [n, K, *s] with 1 to 3 spatial axes need as many sizes; received {maps.shape}, {size}.")
    if spatial == size:
        return maps
    out = ops.cast(maps, "float32")
    for axis in reversed(range(len(size))):
        if spatial[axis] == size[axis]:
            continue
        lower, upper, w = weights(spatial[axis], size[axis])
        position = 2 + axis
        a, b = ops.take(out, lower, axis=position), ops.take(out, upper, axis=position)
        w = np.reshape(w, [size[axis]] + [1] * (len(size) - 1 - axis))
        out = a + (b - a) * w
    return ops.cast(out, maps.dtype)
