"""Similarity and curve metrics used by :mod:`saliency_kit.evaluate`, on plain NumPy arrays.

Every function here is pure (no model, no TensorFlow) so it can be checked against hand-computed
values. Maps are 2-D (``[H, W]``) or any N-D array of one explanation; batches are handled by the
callers in ``evaluate``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import ndimage, stats
from scipy.integrate import trapezoid

__all__ = [
    "pearson",
    "spearman_rows",
    "spearman",
    "normalize_abs",
    "ssim",
    "trapezoid_auc",
    "dilate",
    "points_at",
]


def spearman(a: ArrayLike, b: ArrayLike) -> float:
    """Spearman rank correlation of two maps of the same shape (flattened), ties ranked by average.

    A rank correlation with a constant map is undefined; we return ``1.0`` when both maps are
    constant and equal (nothing distinguishes them), ``0.0`` when exactly one is constant or both are
    constant but different (they share no rank information). Non-finite values raise ``ValueError``.
    """
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"spearman: maps must have the same size; received {a.size} and {b.size} values.")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("spearman: maps must be finite; received NaN or infinite values.")
    a_const, b_const = np.ptp(a) == 0, np.ptp(b) == 0
    if a_const or b_const:
        return 1.0 if (a_const and b_const and a[0] == b[0]) else 0.0
    return float(stats.spearmanr(a, b).statistic)


def normalize_abs(m: Any, percentile: float = 99.0) -> np.ndarray:
    """``|m|`` divided by its ``percentile``-th percentile and clipped to [0, 1] (float64).

    This is the normalisation of Adebayo et al.'s sanity checks (and PAIR's grayscale
    visualisation). When the percentile is 0 (a map that is mostly zero) the maximum is used
    instead; an all-zero map stays all zero. Non-finite values are treated as 0.
    """
    m = np.abs(np.nan_to_num(np.asarray(m, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0))
    scale = np.percentile(m, percentile) if m.size else 0.0
    if scale <= 0:
        scale = m.max() if m.size else 0.0
    if scale <= 0:
        return np.zeros_like(m)
    return np.clip(m / scale, 0.0, 1.0)


def ssim(a: ArrayLike, b: ArrayLike) -> float:
    """Structural similarity of two maps after :func:`normalize_abs` (so ``data_range`` is 1).

    Uses scikit-image's 7×7 uniform window, shrunk to the largest odd size that fits maps with a
    side shorter than 7. Maps with a side shorter than 3 have no SSIM: ``nan`` is returned.
    """
    from skimage.metrics import structural_similarity

    a, b = normalize_abs(a), normalize_abs(b)
    if a.shape != b.shape:
        raise ValueError(f"ssim: maps must have the same shape, got {a.shape} and {b.shape}")
    side = min(a.shape) if a.ndim else 0
    if side < 3:
        return float("nan")
    win = min(7, side if side % 2 else side - 1)
    return float(structural_similarity(a, b, data_range=1.0, win_size=win))


def trapezoid_auc(curve: Any, fractions: Any) -> np.ndarray:
    """Area under ``curve`` (last axis) over ``fractions`` by the trapezoid rule."""
    return trapezoid(np.asarray(curve, dtype=np.float64), np.asarray(fractions, dtype=np.float64), axis=-1)


def dilate(mask: Any, tolerance: float) -> np.ndarray:
    """Pixels within Euclidean distance ``tolerance`` of ``mask`` (bool, any N-D shape).

    ``tolerance=0`` returns the mask itself; an empty mask stays empty.
    """
    mask = np.asarray(mask, dtype=bool)
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0 pixels; received {tolerance}.")
    if tolerance == 0 or not mask.any():
        return mask.copy()
    return ndimage.distance_transform_edt(~mask) <= tolerance


def points_at(m: Any, region: Any) -> bool:
    """Whether the maximum of map ``m`` lies in the bool ``region`` (same shape).

    Ties: when several pixels share the maximum, *all* of them must lie in the region. A flat map
    (e.g. an all-zero Grad-CAM) therefore only counts as a hit if the region covers the whole map,
    so a method cannot score by saying nothing. Non-finite values are ignored; a map with no finite
    value is a miss.
    """
    m = np.asarray(m, dtype=np.float64)
    region = np.asarray(region, dtype=bool)
    if m.shape != region.shape:
        raise ValueError(f"points_at: map shape {m.shape} differs from region shape {region.shape}")
    finite = np.isfinite(m)
    if not finite.any():
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        peak = np.max(m[finite])
    return bool(region[finite & (m == peak)].all())


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two vectors; NaN when either is constant."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    a, b = a - a.mean(), b - b.mean()
    denominator = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / denominator) if denominator > 0 else float("nan")


def spearman_rows(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation of two vectors (average ranks for ties); NaN when either is constant."""
    return pearson(stats.rankdata(a), stats.rankdata(b))
