"""A target's payload in the engine: a pytree of per-input NumPy arrays (masks, boxes, ...) cut
with the inputs into chunks and with the target columns into groups, and passed to the compiled
kernel as one tuple argument of fixed signature (new masks or boxes do not recompile).

Leaves are ``[B, K, ...]`` (one value per input and column) or :class:`PerInput` ``[B, ...]``
(one per input). The engine defines the payload's leaves; the target kinds
(:mod:`saliency_kit.targets`) build them, and the engine never imports a target kind.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .backend import active as active_backend

__all__ = ["PerInput", "layout", "key", "specs"]


class PerInput:
    """A payload leaf with one value per input, shared by all its columns: ``array [B, ...]``."""

    __slots__ = ("array",)

    def __init__(self, array: Any):
        self.array = np.asarray(array)

    def __repr__(self) -> str:
        return f"PerInput(shape={self.array.shape}, dtype={self.array.dtype})"

    def take(self, rows: np.ndarray) -> PerInput:
        """The rows ``rows`` (int ``[M]``, repeats allowed)."""
        return PerInput(self.array[rows])


def layout(payload: Any, B: int, K: int) -> tuple[Any, tuple, tuple]:
    """``(structure, per-input flags, leaves)`` of a target's payload pytree (``None``: none).

    Leaves are NumPy arrays ``[B, K, ...]`` (one value per input and column) or
    :class:`PerInput` ``[B, ...]`` (one per input)."""
    if payload is None:
        return None, (), ()
    from keras import tree

    flat = tree.flatten(payload)
    per_input = tuple(isinstance(leaf, PerInput) for leaf in flat)
    leaves = tuple(leaf.array if shared else np.asarray(leaf) for leaf, shared in zip(flat, per_input))
    for leaf, shared in zip(leaves, per_input):
        want = (B,) if shared else (B, K)
        if leaf.shape[: len(want)] != want:
            raise ValueError(
                f"a target payload leaf must have shape [{B}{'' if shared else f', {K}'}, ...] "
                f"({'per input' if shared else 'per input and column'}); received {leaf.shape}."
            )
    structure = tree.pack_sequence_as(payload, list(range(len(flat))))
    return structure, per_input, leaves


def key(structure: Any, per_input: Any, leaves: Any) -> tuple:
    """The part of a kernel's cache key a payload fixes: its structure and its leaves' shapes and dtypes."""
    if structure is None:
        return ()
    return (
        repr(structure),
        per_input,
        tuple((leaf.shape[1 if shared else 2 :], leaf.dtype.str) for leaf, shared in zip(leaves, per_input)),
    )


def specs(per_input: Any, leaves: Any, n: int, group: int) -> tuple:
    """The kernel argument specs of the leaves of one chunk of ``n`` inputs and ``group`` columns."""
    backend = active_backend()
    return tuple(
        backend.array_spec(np.empty((n, *leaf.shape[1:]) if shared else (n, group, *leaf.shape[2:]), leaf.dtype))
        for leaf, shared in zip(leaves, per_input)
    )
