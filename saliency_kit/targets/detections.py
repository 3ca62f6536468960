"""From a detector's raw output to detections: scores, a score threshold, non-max suppression.

The raw form is the one ``sk.targets.box`` explains, ``[B, N, 4 + 1 + C]`` per proposal
``(x0, y0, x1, y1, objectness logit, C class logits)`` in input pixels, or the dict
``{"boxes": [B, N, 4], "classification": [B, N, C]}`` (no objectness: it counts as certain)::

    found = decode(model.predict(batch))           # one list of Detection per input
    found[0][0].box, found[0][0].label, found[0][0].score

A proposal's score for class c is ``sigmoid(objectness) × softmax(class logits)[c]``; it is
kept with its best class when that score is at least ``score_threshold``, then suppressed when it
overlaps a higher-scoring kept box of the same class by an IoU above ``iou_threshold``.

The one place that reads a detector's output and measures overlaps: :func:`fields` splits the raw
output (NumPy arrays and tensors alike), :func:`split` checks it first; :func:`box_iou` is the
intersection over union in NumPy, :func:`iou` the same formula in ``keras.ops`` for scores that
run inside a compiled kernel (``sk.targets.box``). Everything else is NumPy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Detection",
    "DEFAULT_SCORE_THRESHOLD",
    "DEFAULT_IOU_THRESHOLD",
    "decode",
    "box_iou",
    "iou",
    "fields",
    "split",
    "proposal_scores",
]

DEFAULT_SCORE_THRESHOLD = 0.5
DEFAULT_IOU_THRESHOLD = 0.45


@dataclass(frozen=True)
class Detection:
    """One detected object: ``box`` ``(x0, y0, x1, y1)`` in input pixels, class index ``label``,
    ``score`` in [0, 1], and ``proposal``, the row of the raw output it comes from."""

    box: tuple
    label: int
    score: float
    proposal: int


def box_iou(a: Any, b: Any) -> np.ndarray:
    """Intersection over union of boxes ``a`` ``[..., M, 4]`` and ``b`` ``[..., N, 4]`` ->
    ``[..., M, N]`` (0 where both boxes are empty)."""
    a, b = np.asarray(a, np.float64)[..., :, None, :], np.asarray(b, np.float64)[..., None, :, :]
    width = np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
    height = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None)
    inter = width * height
    area = lambda box: np.clip(box[..., 2] - box[..., 0], 0, None) * np.clip(box[..., 3] - box[..., 1], 0, None)  # noqa: E731
    union = area(a) + area(b) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def iou(a: Any, b: Any) -> Any:
    """:func:`box_iou` in ``keras.ops`` (differentiable, any backend): boxes ``a`` ``[..., M, 4]``
    and ``b`` ``[..., N, 4]`` (``x0, y0, x1, y1``, float tensors) -> ``[..., M, N]``, 0 where
    both boxes are empty."""
    from keras import ops

    a, b = ops.expand_dims(a, -2), ops.expand_dims(b, -3)
    width = ops.relu(ops.minimum(a[..., 2], b[..., 2]) - ops.maximum(a[..., 0], b[..., 0]))
    height = ops.relu(ops.minimum(a[..., 3], b[..., 3]) - ops.maximum(a[..., 1], b[..., 1]))
    inter = width * height

    def area(box: Any) -> Any:
        return ops.relu(box[..., 2] - box[..., 0]) * ops.relu(box[..., 3] - box[..., 1])

    return ops.divide_no_nan(inter, area(a) + area(b) - inter)


def fields(raw: Any) -> tuple[Any, Any, Any]:
    """``(boxes [..., N, 4], objectness [..., N] or None, class outputs [..., N, C])`` of a
    detector's raw output, unchecked: the tensor form ``[..., N, 4 + 1 + C]`` sliced, or the dict
    form's ``"boxes"`` and ``"classification"`` (no objectness). Slicing only, so NumPy arrays
    and tensors alike."""
    if isinstance(raw, Mapping):
        return raw["boxes"], None, raw["classification"]
    return raw[..., :4], raw[..., 4], raw[..., 5:]


def split(raw: Any) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """:func:`fields` of ``raw`` checked and as float64 NumPy, one input (``[N, ...]``) given a
    batch axis: ``(boxes [B, N, 4], objectness logits [B, N] or None, class logits [B, N, C])``."""
    if isinstance(raw, Mapping):
        missing = {"boxes", "classification"} - set(raw)
        if missing:
            raise ValueError(
                "a detector's dict output needs the keys 'boxes' and 'classification'; "
                f"received the keys {sorted(raw)}."
            )
        boxes, _, classes = fields(raw)
        boxes, classes = np.asarray(boxes, np.float64), np.asarray(classes, np.float64)
        if boxes.ndim == 2:
            boxes, classes = boxes[None], classes[None]
        return boxes, None, classes
    raw = np.asarray(raw, np.float64)
    if raw.ndim == 2:
        raw = raw[None]
    if raw.ndim != 3 or raw.shape[-1] < 6:
        raise ValueError(
            "a detector's raw output must be [B, N, 4 + 1 + C] (a box, an objectness "
            f"logit and at least one class logit per proposal); received shape {raw.shape}."
        )
    return fields(raw)


def proposal_scores(raw: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(boxes [B, N, 4], scores [B, N, C])``: each proposal's box and its score for every class,
    ``sigmoid(objectness) × softmax(class logits)``."""
    boxes, objectness, logits = split(raw)
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    scores = shifted / shifted.sum(axis=-1, keepdims=True)
    if objectness is not None:
        scores = scores / (1.0 + np.exp(-objectness))[..., None]
    return boxes, scores


def decode(
    raw: Any,
    *,
    score_threshold: float = DEFAULT_SCORE_THRESHOLD,
    iou_threshold: float = DEFAULT_IOU_THRESHOLD,
    max_detections: int | None = None,
) -> list[list[Detection]]:
    """Detections of every input, best first: ``raw`` ``[B, N, 4 + 1 + C]`` (or ``[N, 4 + 1 + C]``
    for one input, or the ``{"boxes", "classification"}`` dict) -> ``B`` lists of :class:`Detection`.

    ``score_threshold`` in [0, 1]; ``iou_threshold`` in [0, 1] (non-max suppression per class);
    ``max_detections`` keeps the best few of each input (``None``: all).
    """
    if not 0 <= score_threshold <= 1:
        raise ValueError(f"score_threshold must be from 0 to 1; received {score_threshold!r}.")
    if not 0 <= iou_threshold <= 1:
        raise ValueError(f"iou_threshold must be from 0 to 1; received {iou_threshold!r}.")
    if max_detections is not None and (int(max_detections) != max_detections or max_detections < 1):
        raise ValueError(f"max_detections must be a positive whole number or None; received {max_detections!r}.")
    boxes, scores = proposal_scores(raw)
    found = []
    for image_boxes, image_scores in zip(boxes, scores):
        labels, best = image_scores.argmax(axis=-1), image_scores.max(axis=-1)
        order = [int(i) for i in np.argsort(-best, kind="stable") if best[i] >= score_threshold]
        overlaps = box_iou(image_boxes, image_boxes)
        kept: list[Detection] = []
        for i in order:
            if any(d.label == labels[i] and overlaps[i, d.proposal] > iou_threshold for d in kept):
                continue
            kept.append(Detection(tuple(float(v) for v in image_boxes[i]), int(labels[i]), float(best[i]), i))
            if max_detections is not None and len(kept) == max_detections:
                break
        found.append(kept)
    return found
