"""How work is cut into compiled calls: chunk layout, buckets, padding, class groups (NumPy only).

A compiled call evaluates at most ``batch_size`` model rows (inputs × classes × copies). The
layout fixes, for a request of ``B`` inputs and ``K`` targets whose method costs ``cost`` model
evaluations per input and target (samples × steps, windows, ...):

* ``group``: classes per call (``min(K, batch_size)``); more classes loop over class groups;
* ``n``: inputs per call, a power of two (so the last, padded chunk of any batch reuses the
  same compiled function);
* ``budget``: copies of one input the method may evaluate at once (its running sums take
  blocks of that many points, so memory stays one chunk whatever ``samples``/``steps`` are).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

__all__ = ["Layout", "layout", "bucket", "pad", "pad_columns", "payload_slice", "class_groups", "check_batch_size"]


class Layout(NamedTuple):
    n: int  # inputs per compiled call
    group: int  # target classes per compiled call
    budget: int  # model rows per input and class available to the method's running sums


def check_batch_size(batch_size: int) -> int:
    """``batch_size`` as an int: ``TypeError`` unless an int, ``ValueError`` unless positive."""
    if isinstance(batch_size, (bool, np.bool_)) or not isinstance(batch_size, (int, np.integer)):
        raise TypeError(f"batch_size must be a positive int; received {batch_size!r}.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive int; received {batch_size!r}.")
    return int(batch_size)


def bucket(count: int, cap: int) -> int:
    """The chunk size for ``count`` items: a power of two, at most ``cap``."""
    return max(1, min(cap, 1 << max(0, math.ceil(math.log2(max(count, 1))))))


def layout(batch_size: int, num_inputs: int, num_classes: int, cost: int = 1) -> Layout:
    """The :class:`Layout` of a request (see the module docstring)."""
    group = max(1, min(num_classes, batch_size))
    rows = max(1, batch_size // group)
    per_input = max(1, min(int(cost), rows))
    n = bucket(num_inputs, max(1, rows // per_input))
    return Layout(n, group, max(1, rows // n))


def pad(array: np.ndarray, size: int) -> np.ndarray:
    """``array`` padded along axis 0 to ``size`` rows by repeating its last row."""
    missing = size - len(array)
    if missing <= 0:
        return array
    return np.concatenate([array, np.repeat(array[-1:], missing, axis=0)], axis=0)


def class_groups(targets: np.ndarray, group: int) -> Iterator[tuple[int, int, np.ndarray]]:
    """Yield ``(k0, k1, columns [B, group])``: targets in groups of ``group`` classes, padded."""
    for k0 in range(0, targets.shape[1], group):
        columns = targets[:, k0 : k0 + group]
        yield k0, k0 + columns.shape[1], pad(columns.T, group).T


def pad_columns(array: np.ndarray, size: int) -> np.ndarray:
    """``array [B, k, ...]`` padded along axis 1 to ``size`` columns by repeating its last column."""
    missing = size - array.shape[1]
    if missing <= 0:
        return array
    return np.concatenate([array, np.repeat(array[:, -1:], missing, axis=1)], axis=1)


def payload_slice(leaves: Any, per_input: Any, start: int, stop: int, n: int, k0: int, k1: int, group: int) -> tuple:
    """The payload leaves of inputs ``start:stop`` (padded to ``n`` rows) and, for per-column
    leaves ``[B, K, ...]``, of columns ``k0:k1`` (padded to ``group``); per-input leaves
    ``[B, ...]`` are cut along the inputs only."""
    out = []
    for leaf, shared in zip(leaves, per_input):
        rows = pad(leaf[start:stop], n)
        out.append(np.ascontiguousarray(rows if shared else pad_columns(rows[:, k0:k1], group)))
    return tuple(out)
