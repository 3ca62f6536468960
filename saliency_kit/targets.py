"""Targets and scores: which numbers the attributions explain.

Two jobs live here, both pure bookkeeping with no gradients:

* **Targets** (:func:`resolve_targets`; :func:`parse_targets` then :func:`resolve_spec`): every
  target form of API.md — an
  ``int``, a sequence of ``B`` ints, an array ``[B, K]``, ``"topK"`` or a callable — checked
  *before* any model evaluation and turned into an int array ``[B, K]``.
* **Scores** (:class:`ScoreView`): a callable ``view(x) -> [n, C]`` giving the values whose
  gradients we take: the logits behind a final softmax/sigmoid (``score="logits"``), the outputs
  as they are (``score="output"``), or ``score_fn(values)`` for a callable target. It can also
  *tap* an inner layer (nested models included), returning that layer's activations alongside,
  which is what Grad-CAM needs. The user's model is never changed: the logits are computed by
  re-running the model's own graph with its final activation skipped.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = [
    "TargetSpec",
    "parse_targets",
    "resolve_targets",
    "resolve_spec",
    "score_columns",
    "ScoreView",
    "layer_paths",
    "find_layer",
    "default_cam_layer",
]

_SQUASHERS = ("softmax", "sigmoid")


# ----------------------------------------------------------------------------------------------
# Targets
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TargetSpec:
    """A checked target request.

    ``kind`` is ``"classes"`` (``classes`` is int ``[B, K]``), ``"top"`` (``k`` classes chosen
    per input from its scores) or ``"callable"`` (``score_fn(values) -> [B]`` or ``[B, K]``).
    """

    kind: str
    classes: np.ndarray | None = None
    k: int = 1
    score_fn: Callable | None = None


def parse_targets(targets, num_inputs: int, num_classes: int | None) -> TargetSpec:
    """Check ``targets`` against ``num_inputs`` inputs and ``num_classes`` outputs.

    Raises ``ValueError`` (saying what was expected and what was received) for out-of-range
    classes, wrong lengths, non-integers, booleans and unknown strings. Nothing is evaluated.
    ``num_classes`` may be ``None`` only for callable targets (models whose output is not
    ``[B, C]``).
    """
    if callable(targets) and not isinstance(targets, (str, bytes)):
        return TargetSpec("callable", score_fn=targets)
    if num_classes is None:
        raise ValueError(
            "class targets need a model whose output is [batch, classes]; this model's output "
            "is not. Pass targets=score_fn, a callable returning a [B] or [B, K] score tensor."
        )
    if isinstance(targets, str):
        match = re.fullmatch(r"top(\d+)", targets.strip().lower())
        if not match or int(match.group(1)) < 1:
            raise ValueError(
                f"targets string must look like 'top1' or 'top5'; received {targets!r}."
            )
        k = int(match.group(1))
        if k > num_classes:
            raise ValueError(
                f"targets={targets!r} asks for {k} classes but the model has {num_classes}."
            )
        return TargetSpec("top", k=k)
    if isinstance(targets, (bool, np.bool_)):
        raise ValueError(f"targets must be a class index, not a boolean ({targets!r}).")
    if isinstance(targets, (int, np.integer)):
        classes = np.full((num_inputs, 1), int(targets), dtype=np.int64)
    else:
        try:
            array = np.asarray(targets)
        except Exception as err:  # ragged lists and the like
            raise ValueError(f"targets could not be read as an array: {err}") from None
        if array.dtype == bool or not (
            np.issubdtype(array.dtype, np.integer)
            or (np.issubdtype(array.dtype, np.floating) and np.all(np.mod(array, 1) == 0))
        ):
            raise ValueError(
                f"targets must hold integer class indices; received dtype {array.dtype}."
            )
        if array.ndim == 1:
            array = array[:, None]
        if array.ndim != 2 or array.shape[0] != num_inputs or array.shape[1] < 1:
            raise ValueError(
                f"targets must be an int, 'topK', a callable, a sequence of {num_inputs} ints "
                f"(one per input) or an array [{num_inputs}, K]; received an array of shape "
                f"{tuple(np.shape(targets))}."
            )
        classes = array.astype(np.int64)
    bad = classes[(classes < 0) | (classes >= num_classes)]
    if bad.size:
        raise ValueError(
            f"target class {int(bad.flat[0])} is out of range: the model has {num_classes} "
            f"classes, so targets must lie in [0, {num_classes - 1}]."
        )
    return TargetSpec("classes", classes=classes)


def resolve_targets(model, inputs, targets="top1", *, score="logits", batch_size=32) -> np.ndarray:
    """Any target form of API.md for ``model`` and ``inputs`` as int ``[B, K]``.

    ``"topK"`` costs one batched forward pass; a callable gives its column indices
    ``arange(K)`` per row. Raises ``ValueError`` like :func:`saliency_kit.explain`.
    """
    from . import engine

    x = engine.check_inputs(model, inputs)
    score_fn = targets if callable(targets) and not isinstance(targets, str) else None
    columns = score_columns(model, score_fn)
    spec = parse_targets(targets, len(x), columns)
    values = None
    if spec.kind == "top":
        values = engine.all_scores(model, x, score=score, batch_size=batch_size)
    return resolve_spec(spec, values, columns, len(x))


def resolve_spec(spec: TargetSpec, all_scores=None, num_columns: int | None = None,
                 num_inputs: int | None = None) -> np.ndarray:
    """Turn a :class:`TargetSpec` into int ``[B, K]``.

    ``all_scores`` ``[B, C]`` (the scores of every class) is needed for ``"top"`` targets; the
    K best classes come first, best first. For callable targets the result is the column index
    of ``score_fn``'s output, ``arange(num_columns)`` on each of ``num_inputs`` rows.
    """
    if spec.kind == "classes":
        return spec.classes
    if spec.kind == "top":
        scores = np.asarray(all_scores)
        # a stable sort keeps ties in class order, so the choice is reproducible
        order = np.argsort(-scores.astype(np.float64), axis=1, kind="stable")
        return order[:, : spec.k].astype(np.int64)
    return np.tile(np.arange(num_columns, dtype=np.int64), (num_inputs, 1))


# ----------------------------------------------------------------------------------------------
# Layer paths and scores moved to saliency_kit.model (the one walker; ScoreView); re-exported here.
# ----------------------------------------------------------------------------------------------
from .model.layers import default_cam_layer, find_layer, layer_paths  # noqa: E402
from .model.scores import ScoreView, score_columns  # noqa: E402
