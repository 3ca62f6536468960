"""Batched scoring of perturbed inputs: the model's scores of many rows through one compiled kernel.

:func:`forward` scores rows for their targets (or the softmax of the scores), :func:`predicted_classes`
reads the arg-max class, and :func:`score_jobs` streams the perturbed copies of many inputs
(:class:`Job`) through the engine's batched forward pass in pieces of about :data:`MAX_BATCH_BYTES`;
:func:`input_groups` cuts the inputs into groups whose copies fit in that budget. Every forward pass
runs through :func:`saliency_kit.engine.forward_scores` (or ``all_scores``) with whole chunks of
``batch_size`` rows, so results do not depend on how the rows are grouped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ._common import Scored

__all__ = [
    "MAX_BATCH_BYTES",
    "forward",
    "predicted_classes",
    "input_groups",
    "Job",
    "prebuilt",
    "score_jobs",
    "padded_replacer",
    "padded_steps",
]

#: The perturbed copies of several inputs are built and scored together up to about this many bytes.
MAX_BATCH_BYTES = 256 * 2**20


def forward(scored: Scored, rows: np.ndarray, row_targets: np.ndarray) -> np.ndarray:
    """Scores ``[N, K]`` of ``rows`` (perturbed inputs) for ``row_targets`` int ``[N, K]``, through the
    engine's compiled batched forward pass (the softmax of the whole score vector when
    ``scored.softmax``)."""
    from ..engine import all_scores, forward_scores

    count = len(rows)
    rows = _at_least_one_chunk(rows.astype(scored.x.dtype, copy=False), scored.batch_size)
    if not scored.softmax:
        row_targets = _at_least_one_chunk(np.asarray(row_targets), scored.batch_size)
        return np.asarray(
            forward_scores(
                scored.model,
                rows,
                row_targets,
                score=scored.score,
                batch_size=scored.batch_size,
                score_fn=scored.score_fn,
            ),
            dtype=np.float64,
        )[:count]
    values = np.asarray(
        all_scores(scored.model, rows, score=scored.score, batch_size=scored.batch_size), dtype=np.float64
    )[:count]
    values = np.exp(values - values.max(axis=-1, keepdims=True))
    values /= values.sum(axis=-1, keepdims=True)
    return np.take_along_axis(values, np.asarray(row_targets, dtype=np.int64), axis=1)


def predicted_classes(scored: Scored, rows: np.ndarray) -> np.ndarray:
    """The arg-max class of the model's output for ``rows`` (one batched forward pass)."""
    from ..engine import all_scores

    rows_in_chunks = _at_least_one_chunk(rows.astype(scored.x.dtype, copy=False), scored.batch_size)
    return np.argmax(
        all_scores(scored.model, rows_in_chunks, score=scored.score, batch_size=scored.batch_size), axis=-1
    )[: len(rows)]


def _at_least_one_chunk(rows: np.ndarray, batch_size: int) -> np.ndarray:
    """``rows`` padded (with copies of the last) to ``batch_size`` when fewer: then every forward pass
    of a metric runs through the one compiled kernel of ``batch_size`` rows (a few inputs would
    otherwise compile a kernel of their own, which on a large network costs more than the padding)."""
    short = batch_size - len(rows)
    return np.concatenate([rows, np.repeat(rows[-1:], short, axis=0)]) if short > 0 and len(rows) else rows


def input_groups(count: int, rows_per_input: int, row_bytes: int, max_bytes: int = MAX_BATCH_BYTES) -> Iterator[range]:
    """Consecutive ranges of input positions whose perturbed rows fit in ``max_bytes``."""
    per_input = max(1, rows_per_input * row_bytes)
    size = max(1, int(max_bytes // per_input))
    for start in range(0, count, size):
        yield range(start, min(start + size, count))


@dataclass
class Job:
    """``rows`` perturbed inputs of one input, made piece by piece by ``make(start, stop)`` (any draws
    are made before, so the pieces do not change the result), scored for the classes ``targets``
    (int ``[K']``)."""

    rows: int
    make: Callable[[int, int], np.ndarray]
    targets: np.ndarray


def score_jobs(scored: Scored, jobs: list[Job], max_bytes: int = MAX_BATCH_BYTES) -> list[np.ndarray]:
    """The scores ``[rows, K']`` of every job, computed by streaming their rows through the engine's
    batched forward pass in pieces of about ``max_bytes`` (a whole number of ``batch_size`` chunks,
    so only the very last call is padded)."""
    row_bytes = max(1, scored.x[0].size * scored.x.dtype.itemsize)
    step = max(scored.batch_size, (max_bytes // row_bytes) // scored.batch_size * scored.batch_size)
    results: list[list[np.ndarray]] = [[] for _ in jobs]
    pending: list[tuple[int, np.ndarray, np.ndarray]] = []
    pending_rows = 0

    def flush() -> None:
        nonlocal pending, pending_rows
        if not pending:
            return
        width = max(len(t) for _, _, t in pending)
        rows = np.concatenate([r for _, r, _ in pending])
        targets = np.concatenate([np.tile(np.pad(t, (0, width - len(t))), (len(r), 1)) for _, r, t in pending])
        values = forward(scored, rows.reshape(-1, *scored.x.shape[1:]), targets)
        start = 0
        for index, r, t in pending:
            results[index].append(values[start : start + len(r), : len(t)])
            start += len(r)
        pending, pending_rows = [], 0

    for index, job in enumerate(jobs):
        targets = np.asarray(job.targets, dtype=np.int64)
        start = 0
        while start < job.rows:
            stop = min(job.rows, start + step - pending_rows)
            pending.append((index, job.make(start, stop), targets))
            pending_rows += stop - start
            start = stop
            if pending_rows >= step:
                flush()
    flush()
    return [np.concatenate(parts) if parts else np.zeros((0, len(job.targets))) for parts, job in zip(results, jobs)]


def prebuilt(rows: np.ndarray) -> Callable[[int, int], np.ndarray]:
    """A :class:`Job`'s ``make`` for rows built already."""
    return lambda start, stop: rows[start:stop]


def padded_replacer(
    flat_input: np.ndarray, indices: np.ndarray, values: np.ndarray
) -> Callable[[int, int], np.ndarray]:
    """A :class:`Job`'s ``make``: copies of one flat input ``[E]`` with, in row ``r``, the valid
    (``>= 0``) entries of ``indices[r]`` set to ``values[r]`` (``indices``, ``values``: ``[rows, n]``;
    ``-1`` pads rows that change fewer than ``n`` elements)."""

    def make(start: int, stop: int) -> np.ndarray:
        rows = np.repeat(flat_input[None], stop - start, axis=0)
        idx, val = indices[start:stop], values[start:stop]
        valid = idx >= 0
        rows[np.nonzero(valid)[0], idx[valid]] = val[valid]
        return rows

    return make


def padded_steps(order: np.ndarray, per_step: int) -> np.ndarray:
    """Element indices ``order`` ``[n]`` cut into steps of ``per_step``: int ``[ceil(n / per_step),
    per_step]``, the last step padded with ``-1`` (which :func:`padded_replacer` leaves alone)."""
    steps = -(-len(order) // per_step)
    return np.concatenate([order, np.full(steps * per_step - len(order), -1)]).reshape(steps, per_step)
