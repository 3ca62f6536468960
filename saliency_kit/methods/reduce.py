"""Map reductions: how a method's attributions become one display map per input and target."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["reduce_map"]


#: A channel axis this short (RGB) is reduced channel by channel: NumPy reduces a short innermost
#: axis one element at a time, ten to forty times slower; the result is the same (its sum of fewer
#: than eight values is sequential too).
SHORT_AXIS = 8


def _fold(attributions: np.ndarray, axis: int, combine: Any, each: Any = None) -> np.ndarray:
    """``combine`` over ``axis`` one slice at a time (``each`` applied to every slice first)."""
    slices = np.moveaxis(attributions, axis, 0)
    each = each or (lambda a: a)
    out = np.array(each(slices[0]), dtype=np.float32)
    for piece in slices[1:]:
        combine(out, each(piece), out=out)
    return out


def reduce_map(attributions: np.ndarray, how: str, channel_axis: int = -1) -> np.ndarray:
    """``[B, K, ..., C] -> [B, K, ...]``: one value per position, reduced over the channel axis.

    ``"abs_max"``: max |a| over channels (Simonyan et al.); ``"sum"``: signed sum (keeps the
    completeness of integrated gradients); ``"mean"``: mean; ``"none"``: already a map.
    ``channel_axis`` is the channel axis of ``attributions`` (``-1`` channels-last; ``2`` for
    channels-first images ``[B, K, C, H, W]``).
    """
    if how == "none":
        return attributions.astype(np.float32)
    short = attributions.dtype == np.float32 and attributions.shape[channel_axis] <= SHORT_AXIS
    if how == "abs_max":
        if short:
            return _fold(attributions, channel_axis, np.maximum, np.abs)
        return np.abs(attributions).max(axis=channel_axis).astype(np.float32)
    if how == "sum":
        if short:
            return _fold(attributions, channel_axis, np.add)
        return attributions.sum(axis=channel_axis, dtype=np.float32)
    if how == "mean":
        if short:
            return _fold(attributions, channel_axis, np.add) / np.float32(attributions.shape[channel_axis])
        return attributions.mean(axis=channel_axis, dtype=np.float32)
    raise ValueError(f"reduce must be one of 'abs_max', 'sum', 'mean', 'none'; received {how!r}.")
