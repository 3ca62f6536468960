"""A target object resolved on the clean inputs (:class:`~saliency_kit.targets.Resolved`), read
at the rows and columns a metric builds: :func:`select` (copies of some inputs, some of their
columns), :func:`with_columns` (the same target at other classes), :func:`class_count` (how many
classes its columns index)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..targets.base import PerInput, Resolved, map_leaves

__all__ = ["select", "with_columns", "class_count"]


def select(selection: Resolved, sources: np.ndarray, index: np.ndarray) -> Resolved:
    """The target of rows that are copies of the inputs ``sources`` (int ``[N]``), with their
    columns ``index`` (int ``[N, W]`` positions among the ``K``): every per-input payload leaf
    taken at the rows, every per-column leaf also at the columns."""
    sources = np.asarray(sources, dtype=np.int64)
    rows = np.arange(len(sources))[:, None]

    def leaf(value: Any) -> Any:
        if isinstance(value, PerInput):
            return PerInput(value.array[sources])
        return np.asarray(value)[sources[:, None], index]

    payload = map_leaves(selection.payload, leaf)
    columns = np.asarray(selection.columns)[sources][rows, index]
    return Resolved(columns, payload, [], selection.target)


def with_columns(selection: Resolved, columns: np.ndarray, metric: str) -> Resolved:
    """``selection`` with other classes in its columns (int, its shape): the same target read at
    another class (a region's other class over the same mask, a box's other class, another
    component of a head, another unit of a layer). ``ValueError`` for a target whose payload does
    not say its class (a list of targets, a kind of your own with a payload)."""
    columns = np.asarray(columns, dtype=np.int64)
    payload = selection.payload
    if payload is None:
        return Resolved(columns, None, [], selection.target)
    if (
        isinstance(payload, dict)
        and "classes" in payload
        and np.array_equal(np.asarray(payload["classes"]), np.asarray(selection.columns))
    ):
        return Resolved(columns, {**payload, "classes": columns}, [], selection.target)
    raise ValueError(
        f"{metric} reads other classes of the target, and a {getattr(selection.target, 'kind', 'target')!r} target's "
        "payload does not say which class each column is; give one target object (region, box, output or "
        f"unit) or class targets; received {selection.target!r}."
    )


def class_count(model: Any, selection: Resolved, metric: str, hint: str = "") -> int:
    """How many classes the columns index, as the target's kind says (the model's score vector,
    a region's classes, a box's detector classes, a head's components, a layer's units).
    ``ValueError`` for a kind without classes (``hint`` says what else the caller takes)."""
    target = selection.target
    count = target.class_count(model)
    if count is None and target.score_vector:
        raise ValueError(f"{metric} needs a model whose output is [B, C]; received one whose output is not.")
    if count is None:
        raise ValueError(
            f"{metric} reads the other classes of each target, which a {target.kind!r} target does not have: "
            f"give class targets or a region, box, output or unit target{hint}; received {target!r}."
        )
    return int(count)
