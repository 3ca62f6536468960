"""Batched scoring of perturbed inputs: the model's scores of many rows through one compiled kernel.

Every perturbed row knows its *source*, the input it is a copy of. :func:`forward` scores rows for
their source's targets (or the targets' probabilities), :func:`predicted` reads the model's
prediction, and :func:`score_jobs` streams the perturbed copies of many inputs (:class:`Job`)
through the engine's batched forward pass in pieces of about :data:`MAX_BATCH_BYTES`;
:func:`input_groups` cuts the inputs into groups whose copies fit in that budget.

Class targets of a model's one input run through :func:`saliency_kit.engine.forward_scores` (or
``all_scores``). A target object (:mod:`saliency_kit.targets`) scores each row with its source's
payload (:func:`.selected.select`: a region's mask, a box; a ``"predicted"`` region keeps the clean input's
mask), and with several model inputs each row carries its source's values of the inputs not
explained: both run through the engine's compiled kernel (:func:`saliency_kit.engine.run`). Every
call is whole chunks of ``batch_size`` rows, so results do not depend on how the rows are grouped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import engine
from ..engine import all_scores, forward_scores
from ..targets.base import Resolved
from .selected import class_count, select, with_columns

if TYPE_CHECKING:
    from .explained import Scored

__all__ = [
    "MAX_BATCH_BYTES",
    "forward",
    "predicted",
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


def forward(scored: Scored, rows: np.ndarray, sources: np.ndarray, columns: np.ndarray | None = None) -> np.ndarray:
    """Scores float64 ``[N, W]`` of ``rows`` ``[N, *x]`` (perturbed copies of the inputs ``sources``
    int ``[N]``) for their source's columns ``columns`` (int ``[N, W]`` indices into the ``K``
    targets; default all ``K``), through the engine's compiled batched forward pass (the target's
    probability when ``scored.softmax``: for a class, the softmax of the whole score vector taken
    at it).

    Class targets of one model input run the engine's forward kernel on the rows; a target object
    scores each row with its source's payload (a region's mask, a box), and with several model
    inputs each row carries its source's values of the inputs not explained."""
    sources, index = _sources_and_columns(scored, rows, sources, columns)
    row_targets = np.take_along_axis(scored.targets[sources], index, axis=1)
    count = len(rows)
    if not scored.selection.target.score_vector or scored.parts is not None:
        return _kernel(scored, rows, sources, index, row_targets, _row_scores, {"softmax": scored.softmax})
    rows = _at_least_one_chunk(rows.astype(scored.x.dtype, copy=False), scored.batch_size)
    if not scored.softmax:
        row_targets = _at_least_one_chunk(row_targets, scored.batch_size)
        return np.asarray(
            forward_scores(
                scored.model,
                rows,
                row_targets,
                score=scored.score,
                batch_size=scored.batch_size,
            ),
            dtype=np.float64,
        )[:count]
    values = np.asarray(
        all_scores(scored.model, rows, score=scored.score, batch_size=scored.batch_size), dtype=np.float64
    )[:count]
    values = np.exp(values - values.max(axis=-1, keepdims=True))
    values /= values.sum(axis=-1, keepdims=True)
    return np.take_along_axis(values, row_targets, axis=1)


def predicted(
    scored: Scored,
    rows: np.ndarray,
    sources: np.ndarray,
    columns: np.ndarray | None = None,
    metric: str = "this metric",
) -> np.ndarray:
    """The model's prediction int ``[N, W]`` for ``rows`` (copies of the inputs ``sources``), read
    where each column ``columns`` (as :func:`forward`'s) is one entry of: the arg-max class of the
    score vector (the same for every class column); for a target object, the arg-max over its
    classes with everything else of the column kept (a region's classes over its mask, a head's
    components, a layer's units, a box's classes). ``metric`` names the caller in errors (a target
    without classes)."""
    sources, index = _sources_and_columns(scored, rows, sources, columns)
    if scored.selection.target.score_vector:
        if scored.parts is None:
            classes = predicted_classes(scored, rows)
        else:
            zeros = np.zeros((len(rows), 1), np.int64)
            vector = Resolved(zeros, None, [], scored.selection.target)
            values = _kernel(scored, rows, sources, zeros, zeros, _row_values, {}, selection=vector)  # [N, 1, C]
            classes = np.argmax(values[:, 0], axis=-1)
        return np.repeat(classes[:, None], index.shape[1], axis=1)
    count = class_count(scored.model, scored.selection, metric)
    width = index.shape[1]
    every = np.tile(np.arange(count), (len(rows), width))  # [N, W·C]: every class of each column
    origin = np.repeat(index, count, axis=1)
    chosen = with_columns(select(scored.selection, sources, origin), every, metric)
    values = _kernel(scored, rows, sources, origin, every, _row_scores, {"softmax": False}, selection=chosen)
    return np.argmax(values.reshape(len(rows), width, count), axis=-1)


def predicted_classes(scored: Scored, rows: np.ndarray) -> np.ndarray:
    """The arg-max class of the model's output for ``rows`` of one model input (one batched forward
    pass)."""
    rows_in_chunks = _at_least_one_chunk(rows.astype(scored.x.dtype, copy=False), scored.batch_size)
    return np.argmax(
        all_scores(scored.model, rows_in_chunks, score=scored.score, batch_size=scored.batch_size), axis=-1
    )[: len(rows)]


def _sources_and_columns(
    scored: Scored, rows: np.ndarray, sources: np.ndarray, columns: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    sources = np.asarray(sources, dtype=np.int64)
    if sources.shape != (len(rows),):
        raise ValueError(f"sources must give one input per row ({len(rows)}); received shape {sources.shape}.")
    if columns is None:
        columns = np.broadcast_to(np.arange(scored.targets.shape[1]), (len(rows), scored.targets.shape[1]))
    return sources, np.asarray(columns, dtype=np.int64)


def _row_scores(ctx: Any, softmax: bool = False) -> dict:  # the backend's Context
    """The target scores (or probabilities) at the rows themselves: a forward pass, no gradient."""
    return {"attributions": ctx.probabilities(ctx.inputs) if softmax else ctx.scores(ctx.inputs)}


def _row_values(ctx: Any) -> dict:  # the backend's Context
    """The whole score vector ``[n, 1, C]`` at the rows (class targets)."""
    return {"attributions": ctx.values(ctx.inputs)[:, None]}


def _kernel(
    scored: Scored,
    rows: np.ndarray,
    sources: np.ndarray,
    index: np.ndarray,
    row_targets: np.ndarray,
    compute: Callable,
    options: dict,
    selection: Any = True,
) -> np.ndarray:
    """``compute``'s float64 results ``[N, W, ...]`` at ``rows`` through the engine's compiled
    kernels, each row with its source's target payload (``selection``: the resolved columns of
    the rows; ``True``: ``scored.selection`` at ``index``) and held inputs."""
    count = len(rows)
    if selection is True:
        selection = select(scored.selection, sources, index)
    selection = selection.take(_at_least_one_chunk(np.arange(count), scored.batch_size))
    rows = _at_least_one_chunk(rows.astype(scored.x.dtype, copy=False), scored.batch_size)
    sources = _at_least_one_chunk(sources, scored.batch_size)
    selection.columns = _at_least_one_chunk(np.asarray(row_targets, dtype=np.int64), scored.batch_size)
    parts = scored.parts
    job = engine.Job(
        scored.model,
        rows,
        selection,
        options,
        score=scored.score,
        batch_size=scored.batch_size,
        space=scored.space,
        held=None if parts is None else [held[sources] for held in parts.held],
    )
    out = engine.run(compute, job, with_scores=False)["attributions"]
    return np.asarray(out[:count], dtype=np.float64)


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
    """``rows`` perturbed copies of the input ``source``, made piece by piece by ``make(start, stop)``
    (any draws are made before, so the pieces do not change the result), scored for its targets
    ``columns`` (int ``[W]`` positions among the input's ``K`` targets)."""

    rows: int
    make: Callable[[int, int], np.ndarray]
    source: int
    columns: np.ndarray


def score_jobs(scored: Scored, jobs: list[Job], max_bytes: int = MAX_BATCH_BYTES) -> list[np.ndarray]:
    """The scores ``[rows, W]`` of every job, computed by streaming their rows through the engine's
    batched forward pass in pieces of about ``max_bytes`` (a whole number of ``batch_size`` chunks,
    so only the very last call is padded); each row is scored with its job's source input."""
    row_bytes = max(1, scored.x[0].size * scored.x.dtype.itemsize)
    step = max(scored.batch_size, (max_bytes // row_bytes) // scored.batch_size * scored.batch_size)
    results: list[list[np.ndarray]] = [[] for _ in jobs]
    pending: list[tuple[int, np.ndarray, np.ndarray]] = []
    pending_rows = 0

    def flush() -> None:
        nonlocal pending, pending_rows
        if not pending:
            return
        width = max(len(c) for _, _, c in pending)
        rows = np.concatenate([r for _, r, _ in pending])
        sources = np.concatenate([np.full(len(r), jobs[index].source) for index, r, _ in pending])
        # a narrower job's columns are padded with its first column (a valid one, sliced away below)
        columns = np.concatenate(
            [np.tile(np.pad(c, (0, width - len(c)), mode="edge"), (len(r), 1)) for _, r, c in pending]
        )
        values = forward(scored, rows.reshape(-1, *scored.x.shape[1:]), sources, columns)
        start = 0
        for index, r, c in pending:
            results[index].append(values[start : start + len(r), : len(c)])
            start += len(r)
        pending, pending_rows = [], 0

    for index, job in enumerate(jobs):
        columns = np.asarray(job.columns, dtype=np.int64)
        start = 0
        while start < job.rows:
            stop = min(job.rows, start + step - pending_rows)
            pending.append((index, job.make(start, stop), columns))
            pending_rows += stop - start
            start = stop
            if pending_rows >= step:
                flush()
    flush()
    return [np.concatenate(parts) if parts else np.zeros((0, len(job.columns))) for parts, job in zip(results, jobs)]


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
