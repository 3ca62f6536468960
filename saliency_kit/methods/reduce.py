"""Map reductions: how a method's attributions become one display map per input and target."""

from __future__ import annotations

import numpy as np

__all__ = ["reduce_map"]


def reduce_map(attributions: np.ndarray, how: str, channel_axis: int = -1) -> np.ndarray:
    """``[B, K, ..., C] -> [B, K, ...]``: one value per position, reduced over the channel axis.

    ``"abs_max"``: max |a| over channels (Simonyan et al.); ``"sum"``: signed sum (keeps the
    completeness of integrated gradients); ``"mean"``: mean; ``"none"``: already a map.
    ``channel_axis`` is the channel axis of ``attributions`` (``-1`` channels-last; ``2`` for
    channels-first images ``[B, K, C, H, W]``).
    """
    if how == "none":
        return attributions.astype(np.float32)
    if how == "abs_max":
        return np.abs(attributions).max(axis=channel_axis).astype(np.float32)
    if how == "sum":
        return attributions.sum(axis=channel_axis, dtype=np.float32)
    if how == "mean":
        return attributions.mean(axis=channel_axis, dtype=np.float32)
    raise ValueError(f"reduce must be one of 'abs_max', 'sum', 'mean', 'none'; received {how!r}.")
