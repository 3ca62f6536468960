"""The target scores of a kernel's rows and their gradients, in TensorFlow: which score columns
(or target objects with their payload) a block of rows is explained for (:class:`Selection`), and
``∂s_k/∂z`` through the plain gradient or a backward rule on every ReLU-family op.

Used by :mod:`saliency_kit.engine.tf_context` (the context) and :mod:`saliency_kit.engine.tf` (the kernels).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from ..model.override import relu_rule
from ..model.rewrite import nothing_to_rewrite
from ..rules import ModifiedBackprop

__all__ = [
    "SMALL_FLOATS",
    "Selection",
    "accumulator_dtype",
    "differentiate",
    "gradient_at",
    "gradient_by_rule",
    "is_relu_rule",
]


SMALL_FLOATS = ("float16", "bfloat16")


class Selection:
    """What the rows of a block explain: ``columns`` int32 ``[rows, K]``, the target object that
    scores them and its payload (a pytree of
    tensors, each ``[rows, K, ...]`` or, for per-input leaves, ``[rows, ...]``); with a
    :class:`~saliency_kit.engine.space.Space`, the model inputs each row holds (``held``, each
    ``[rows, ...]``) and where the points go among them."""

    def __init__(
        self,
        columns: Any,
        target: Any,
        payload: Any = None,
        per_input: Any = (),
        held: Any = None,
        space: Any = None,
    ):
        self.columns = columns
        self.target = target
        self.payload = payload
        self._per_input = tuple(per_input)  # per flattened payload leaf: shared by the columns
        self.held = held
        self.space = space

    @property
    def width(self) -> int:
        return int(self.columns.shape[1])

    def _map(self, column_fn: Callable, input_fn: Callable) -> Any:
        if self.payload is None:
            return None
        leaves = tf.nest.flatten(self.payload)
        mapped = [input_fn(leaf) if shared else column_fn(leaf) for leaf, shared in zip(leaves, self._per_input)]
        return tf.nest.pack_sequence_as(self.payload, mapped)

    def _held(self, fn: Callable) -> Any:
        return None if self.held is None else tuple(fn(h) for h in self.held)

    def repeat(self, copies: int) -> Selection:
        """Each row repeated ``copies`` times (row ``b·copies + c`` is copy c of row b)."""
        if copies == 1:
            return self
        rep = lambda t: tf.repeat(t, copies, axis=0)  # noqa: E731
        return Selection(
            rep(self.columns), self.target, self._map(rep, rep), self._per_input, self._held(rep), self.space
        )

    def per_column(self) -> Selection:
        """Rows ``n·K``, one column each: row ``b·K + k`` is column k of row b."""
        n, K = self.columns.shape[0], self.width

        def split(leaf: Any) -> tf.Tensor:
            return tf.reshape(leaf, [n * K, 1, *leaf.shape[2:]])

        rep = lambda leaf: tf.repeat(leaf, K, axis=0)  # noqa: E731
        return Selection(
            tf.reshape(self.columns, [n * K, 1]),
            self.target,
            self._map(split, rep),
            self._per_input,
            self._held(rep),
            self.space,
        )

    def placed(self, z: Any) -> Any:
        """What the model runs on for points ``z``: ``z`` itself, or, in a space, the held inputs
        with the points placed among them (:meth:`~saliency_kit.engine.space.Space.place`)."""
        return z if self.space is None else self.space.place(z, self.held)

    def values(self, view: Any, z: Any) -> Any:
        """The score vector ``[rows, C]`` at ``z`` whose entries the columns index (class targets,
        a callable's scores); ``ValueError`` for a target without one."""
        return self.target.vector(self.outputs(view, z))

    def _outputs(self, view: Any, z: Any, tap: str | None) -> tuple[Any, Any]:
        taps = tuple(self.target.taps)
        if tap is not None and tap not in taps:
            taps += (tap,)
        values, taken = view.raw(self.placed(z), taps, strip=self.target.logits)
        return self.target.outputs(values, taken), (taken.get(tap) if tap is not None else None)

    @property
    def _target_payload(self) -> Any:
        return self.columns if self.payload is None else self.payload

    def outputs(self, view: Any, z: Any) -> Any:
        """What the rows' scores are read from, at ``z``: the target object's outputs (each leaf
        ``[rows, ...]``; the model's score vector ``[rows, C]`` for class targets)."""
        return self._outputs(view, z, None)[0]

    def score_outputs(self, outputs: Any) -> tf.Tensor:
        """``[rows, K]`` scores of :meth:`outputs` (of these rows, or any with the same leading axis)."""
        return self.target.score(outputs, self._target_payload)

    def scores(self, view: Any, z: Any, tap: str | None = None) -> tuple[tf.Tensor, Any]:
        """``[rows, K]`` scores at ``z`` (and the tapped activations when ``tap`` is given)."""
        outputs, activation = self._outputs(view, z, tap)
        return self.score_outputs(outputs), activation

    def probabilities(self, view: Any, z: Any) -> tf.Tensor:
        """``[rows, K]`` probabilities at ``z`` (Score-CAM): the target object's :meth:`probabilities`
        (for class targets the softmax over the classes taken at the column's class)."""
        return self.target.probabilities(self.outputs(view, z), self._target_payload)


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


def is_relu_rule(rule: Any) -> bool:
    """Whether ``rule`` is a rule for ReLU-family ops (``"guided"``, ``"deconv"``, a
    ``ModifiedBackprop``), which the op-level override applies; LRP composites and DeepLIFT
    rewrite linear layers too and go through ``sk.rewrite``."""

    return isinstance(rule, (str, ModifiedBackprop))


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
