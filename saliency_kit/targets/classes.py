"""Class targets and callable targets as target objects, and :func:`as_target`, the API's one edge.

:func:`as_target` turns every form of ``targets`` into one target object: a target object stays
itself, a list of them becomes :class:`~saliency_kit.targets.base.Several`, a callable
``score_fn(values) -> [B] or [B, K]`` becomes a :class:`Function`, and everything else (an int, a
sequence of ints or class names, an int array ``[B, K]``, ``"topK"``, a class name) a
:class:`Classes`, parsed and checked when it is resolved (:mod:`.parse`).

Both kinds score a vector: column k is entry ``columns[:, k]`` of the model's score vector
(:class:`Classes`) or of ``score_fn``'s ``[B, K]`` scores (:class:`Function`). Their bound copies
carry no data, so one compiled kernel serves every class request of a (model, method, shapes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..engine.cache import value_key
from .base import Resolved, Several, Target, TargetRequest, class_info
from .errors import class_target_error
from .parse import parse, resolve

__all__ = ["Classes", "Function", "as_target"]


def _take(vector: Any, columns: Any) -> Any:
    """``[n, K]``: entry ``columns[:, k]`` of each row of ``vector`` ``[n, C]``."""
    from keras import ops

    return ops.take_along_axis(vector, ops.cast(columns, "int32"), axis=1)


class _VectorTarget(Target):
    """A target whose columns index a score vector ``[n, C]`` (:meth:`vector`); its probability
    is the softmax over that vector taken at the column."""

    def vector(self, outputs: Any) -> Any:
        return outputs

    def score(self, outputs: Any, payload: Any) -> Any:
        return _take(self.vector(outputs), payload)

    def probabilities(self, outputs: Any, payload: Any) -> Any:
        from keras import ops

        return _take(ops.softmax(ops.cast(self.vector(outputs), "float32"), axis=-1), payload)


class Classes(_VectorTarget):
    """The class targets of a ``[B, C]`` output (an int, names, ``"topK"``, an array ``[B, K]``):
    the score of column k is ``outputs[:, classes[:, k]]``."""

    kind = "class"
    score_vector = True

    def __init__(self, classes: Any = "top1"):
        self.classes = classes

    def __repr__(self) -> str:
        return f"Classes({self.classes!r})"

    @staticmethod
    def resolved(columns: Any) -> Resolved:
        """Class columns int ``[B, K]`` already known, as a resolved target (no model runs)."""
        columns = np.asarray(columns, np.int64)
        return Resolved(columns, None, class_info(columns), Classes(None))

    def kernel_key(self) -> tuple:
        return (Classes,)  # the classes are the columns, never a constant of the kernel

    def resolve(self, request: TargetRequest) -> Resolved:
        from ..model.scores import score_columns

        count = score_columns(request.model)
        if count is None:
            raise class_target_error(request.model, self.classes)
        spec = parse(self.classes, request.num_inputs, count, request.class_names)
        vectors = np.asarray(request.clean_outputs()) if spec.needs_scores else None
        columns = resolve(spec, vectors, request.num_inputs)
        return Resolved(columns, None, class_info(columns, request.class_names), Classes(None), vectors)

    def class_count(self, model: Any) -> int | None:
        from ..model.scores import score_columns

        return score_columns(model)


class Function(_VectorTarget):
    """A callable ``score_fn(values) -> [B] or [B, K]`` as a target: ``values`` are the model's
    outputs as ``score`` selects them; column k is ``score_fn(values)[:, k]``."""

    kind = "callable"
    other_classes = False

    def __init__(self, score_fn: Callable):
        self.score_fn = score_fn

    def __repr__(self) -> str:
        return f"Function({getattr(self.score_fn, '__name__', self.score_fn)!r})"

    def kernel_key(self) -> tuple:
        return (Function, value_key(self.score_fn))

    def vector(self, outputs: Any) -> Any:
        values = self.score_fn(outputs)
        return values[:, None] if len(values.shape) == 1 else values

    def resolve(self, request: TargetRequest) -> Resolved:
        from ..model.scores import callable_columns

        width = callable_columns(request.model, self.score_fn)
        columns = np.tile(np.arange(width, dtype=np.int64), (request.num_inputs, 1))
        return Resolved(columns, None, class_info(columns, None, kind="callable"), self)


def as_target(value: Any) -> Target:
    """Every form of ``targets`` as one target object (see the module docstring)."""
    if isinstance(value, Target):
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, Target) for v in value):
        return value[0] if len(value) == 1 else Several(tuple(value))
    if callable(value) and not isinstance(value, (str, bytes)):
        return Function(value)
    return Classes(value)
