"""The target scores' gradients of a kernel's rows, in TensorFlow: ``∂s_k/∂z`` through the plain
gradient or a backward rule on every ReLU-family op (the rows' scores:
:class:`~saliency_kit.engine.selection.Selection`).

Used by :mod:`saliency_kit.engine.tf_context` (the context) and :mod:`saliency_kit.engine.tf` (the kernels).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from ..model.override import relu_rule
from ..model.relu_layers import nothing_to_rewrite
from .selection import SMALL_FLOATS

__all__ = [
    "SMALL_FLOATS",
    "accumulator_dtype",
    "differentiate",
    "gradient_at",
    "gradient_by_rule",
]


def differentiate(tape: Any, scores: Any, source: Any, vectorise: bool = False) -> tf.Tensor:
    """``[n, K, *source.shape[1:]]``: ∂scores[:, k]/∂source, rows independent.

    K = 1 is one backward pass; K > 1 runs K backward passes over the one forward pass, either
    vectorised (``pfor``) or in a ``tf.while_loop``. A score that does not reach ``source``
    gives zeros. Scores in a 16-bit float (mixed precision) are differentiated in the source's
    dtype so the loop's outputs agree with its inputs.
    """
    zero = tf.UnconnectedGradients.ZERO
    if scores.shape[1] == 1:
        return tape.gradient(scores, source, unconnected_gradients=zero)[:, None]
    if vectorise:
        try:
            return tape.batch_jacobian(scores, source, unconnected_gradients=zero)
        except (ValueError, NotImplementedError, TypeError, tf.errors.OpError):
            pass  # an op pfor cannot vectorise: loop over the classes instead
    return tape.batch_jacobian(scores, source, unconnected_gradients=zero, experimental_use_pfor=False)


def gradient_at(
    view: Any, z: Any, selection: Any, tap: str | None = None, vectorise: bool = False
) -> tuple[tf.Tensor, tf.Tensor]:
    """Scores ``[rows, K]`` and their gradients w.r.t. ``z`` (or the tapped layer)."""
    with tf.GradientTape(persistent=selection.width > 1, watch_accessed_variables=False) as tape:
        tape.watch(z)
        scores, activation = selection.scores(view, z, tap)
        source = z if tap is None else activation
        if scores.dtype != source.dtype and scores.dtype.name in SMALL_FLOATS + ("float32",):
            # the per-class loop needs one dtype; mixed precision scores are cast inside the tape
            scores = tf.cast(scores, source.dtype if source.dtype.is_floating else tf.float32)
    gradients = differentiate(tape, scores, source, vectorise)
    return tf.cast(scores, tf.float32), gradients


def gradient_by_rule(view: Any, z: Any, selection: Any, rule: Any, reports: list) -> tuple[tf.Tensor, tf.Tensor]:
    """Scores ``[rows, K]`` and their gradients w.r.t. ``z`` with ``rule`` on every ReLU-family
    activation the model runs (the op-level override: ``tf.gradients`` of the graph traced in the
    block). The block's report goes to ``reports``; a ReLU the rule cannot reach, or a model with
    none for it to change, is a ``ValueError``."""

    with relu_rule(rule) as report:
        scores, _ = selection.scores(view, z)
        if scores.dtype != z.dtype:
            scores = tf.cast(scores, z.dtype)
    report.check(f"model {view.model.name!r}")
    if not report.ops:
        raise nothing_to_rewrite(view.model)  # else the map would silently be the plain gradient
    if not _any_after(z, report.ops):
        found = ", ".join(report.ops[:3]) + (f" and {len(report.ops) - 3} more" if len(report.ops) > 3 else "")
        raise ValueError(
            f"every ReLU-family activation of model {view.model.name!r} ({found}) lies before what is "
            f"explained, so none is between it and the score and {type(report.rule).__name__}'s map would "
            "silently be the plain gradient; explain a layer with a ReLU above it, or use a plain-gradient "
            "method (e.g. method='gradient' or 'integrated_gradients')."
        )
    reports.append(report)
    columns = []
    for k in range(selection.width):  # one backward pass per class over the shared forward pass
        (g,) = tf.gradients(scores[:, k], [z], unconnected_gradients=tf.UnconnectedGradients.ZERO)
        columns.append(g)
    return tf.cast(scores, tf.float32), tf.stack(columns, axis=1)


def _any_after(z: Any, names: list) -> bool:
    """Whether one of the ops ``names`` (of ``z``'s graph) is computed from ``z``; ``True`` when
    one lies in a nested function (a loop body), whose ops this walk does not see."""
    graph = z.graph
    outer = []
    for name in names:
        try:
            outer.append(graph.get_operation_by_name(name))
        except (KeyError, ValueError):
            return True
    wanted, seen, frontier = {op.name for op in outer}, set(), [z]
    while frontier:
        for op in frontier.pop().consumers():
            if op.name in wanted:
                return True
            if op.name not in seen:
                seen.add(op.name)
                frontier.extend(op.outputs)
    return False


def accumulator_dtype(dtype: Any) -> tf.DType:
    return tf.float32 if dtype.name in SMALL_FLOATS else dtype
