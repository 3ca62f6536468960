"""``box``: how well a detector's raw proposals find a given box (D-RISE similarity).

For a detector's raw output before non-max suppression, ``N`` proposals per input, either one
tensor ``[B, N, 4 + 1 + C]`` (``x0, y0, x1, y1``, objectness, class logits) or a dict
``{"boxes": [B, N, 4], "classification": [B, N, C]}`` (no objectness: 1), boxes in input
pixels. For a target box ``t`` of class ``c``:

    score="drise":  s = max_j IoU(t, b_j) · o_j · p_j[c]
    score="class":  s = z_{j*}[c],  j* = argmax_j IoU(t, b_j)

with ``o`` the objectness probability (``objectness="logit"``, the default: the sigmoid of the
tensor form's objectness logit; ``"probability"``: the value as the model gives it), ``p`` the class
probabilities (the outputs are read as the model gives them, ``score="logits"`` removes nothing)
(``class_activation``: a softmax of the logits for the tensor form, a sigmoid per class for the
dict form, or ``"none"`` when the model gives probabilities) and ``z`` the class logits. A raw
objectness logit is never multiplied in as it is: a negative one would make the best-matching
proposal the worst. The K boxes of one input are its K
columns: they share its forward pass. Score-CAM's probability of a box: the D-RISE score
itself (it lies in [0, 1]); with ``score="class"`` the best proposal's class probability.

Without ``score=`` the score depends on the method (:func:`default_score`): ``"class"`` for a
CAM weighting each channel by one number from the score's gradient (its declaration's
``gradient_channel_weights``: Grad-CAM, Grad-CAM++, guided Grad-CAM), ``"drise"`` for every
other method and for a target resolved without one. On the shipped detector ``shapes_det``
(nine boxes covering 8.3% of the image on average; ``scripts/measure_box_scores.py``) Grad-CAM
of the D-RISE score puts 17% of its map's mass inside the box (it lights up the background), of
the class logit 55%; guided Grad-CAM 52% and 82%, Grad-CAM++ 20% and 2% (on 39 unseen boxes
9% and 12%: poor either way); the gradient 38% and 40%, LayerCAM 86% and 61%.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from .base import Resolved, Target, TargetRequest
from .detections import box_iou, fields, iou, split
from .parse import parse_string

if TYPE_CHECKING:
    import keras

__all__ = ["Box", "box", "default_score", "SCORES"]

#: The box scores: what ``score=`` takes.
SCORES = ("drise", "class")

_ACTIVATIONS = ("softmax", "sigmoid", "none")
_OBJECTNESS = ("logit", "probability")


class Box(Target):
    """See :func:`box`."""

    kind = "box"
    logits = False  # the proposals as the model gives them, a final sigmoid kept

    def __init__(
        self,
        boxes: Any,
        classes: Any = None,
        score: str | None = None,
        class_activation: str | None = None,
        objectness: str = "logit",
    ):
        if score is not None and score not in SCORES:
            raise ValueError(f"box score must be 'drise', 'class' or None (by method); received {score!r}.")
        if class_activation is not None and class_activation not in _ACTIVATIONS:
            raise ValueError(
                f"class_activation must be one of {', '.join(map(repr, _ACTIVATIONS))} or None; "
                f"received {class_activation!r}."
            )
        if objectness not in _OBJECTNESS:
            raise ValueError(f"objectness must be 'logit' or 'probability'; received {objectness!r}.")
        self.objectness = objectness
        self.boxes = boxes
        self.classes = classes
        self.mode = score  # None until resolved: the method's default_score
        self.class_activation = class_activation
        self.form: str | None = None  # "tensor" or "dict", set when bound to a model

    def kernel_key(self) -> tuple:
        return (type(self), self.mode, self.class_activation, self.objectness, self.form)

    def __repr__(self) -> str:
        return f"box(boxes={_describe(self.boxes)}, classes={self.classes!r}, score={self.mode!r})"

    # -- host ----------------------------------------------------------------------------------
    def resolve(self, request: TargetRequest) -> Resolved:
        form, C = _detector_form(request.model)
        B = request.num_inputs
        boxes, padding = _boxes(self.boxes, B)  # [B, K, 4], bool [B, K]
        K = boxes.shape[1]
        classes = self._classes(request, boxes, C, form)
        bound = Box(
            None,
            None,
            self.mode or default_score(request.method),
            self.class_activation or ("softmax" if form == "tensor" else "sigmoid"),
            self.objectness,
        )
        bound.form = form
        names = request.class_names
        info = [
            [
                {
                    "kind": "box",
                    "box": tuple(float(v) for v in boxes[b, k]),
                    "class": int(classes[b, k]),
                    **({"name": names[classes[b, k]]} if names and classes[b, k] < len(names) else {}),
                    **({"padding": True} if padding[b, k] else {}),
                }
                for k in range(K)
            ]
            for b in range(B)
        ]
        payload = {"boxes": boxes.astype(np.float32), "classes": classes}
        return Resolved(classes, payload, info, bound)

    def pixel_masks(self, count: int, height: int, width: int) -> np.ndarray:
        """Bool ``[count, K, height, width]``: the pixels whose centre lies in each target box (in
        input pixels; a shorter list of an input repeats its last box), the box's natural object
        mask for the localisation metrics."""
        boxes, _ = _boxes(self.boxes, count)  # [count, K, 4]
        x = np.arange(width) + 0.5
        y = np.arange(height) + 0.5
        x0, y0, x1, y1 = (boxes[..., i, None, None] for i in range(4))
        return (x0 <= x) & (x <= x1) & (y0 <= y[:, None]) & (y[:, None] <= y1)

    def object_masks(self, count: int, shape: tuple | None) -> np.ndarray:
        """:meth:`pixel_masks` for maps of ``shape`` ``(H, W)``."""
        if shape is None or len(shape) != 2:
            raise ValueError(f"box targets give object masks for 2-D maps [H, W]; received maps of shape {shape}.")
        return self.pixel_masks(count, *shape)

    def class_count(self, model: Any) -> int:
        """The detector's classes ``C``."""
        return _detector_form(model)[1]

    def _classes(self, request: TargetRequest, boxes: Any, C: int, form: str) -> np.ndarray:
        B, K = boxes.shape[:2]
        given = self.classes
        if given is None:  # each box's class: that of its best-matching proposal at the clean input
            proposals, _, logits = split(request.clean_outputs(strip=False))
            best = np.argmax(box_iou(boxes, proposals), axis=-1)  # [B, K]
            return np.argmax(np.take_along_axis(logits, best[..., None], axis=1), axis=-1).astype(np.int64)
        if isinstance(given, str):
            given = parse_string(given, C, request.class_names).parts[0]
            if given[0] != "class":
                raise ValueError(f"box classes must be a class index or name, not 'topK'; received {self.classes!r}.")
            given = given[1]
        if isinstance(given, numbers.Integral) and not isinstance(given, bool):
            array = np.full((B, K), int(given))
        else:
            array = np.asarray(given)
            if array.dtype.kind not in "iu":
                raise TypeError(
                    f"box classes must be None, an int, a class name or ints shaped like the boxes; "
                    f"received {self.classes!r}."
                )
            if array.shape == (K,):
                array = np.tile(array, (B, 1))
            if array.shape != (B, K):
                raise ValueError(
                    f"box classes must hold one class per box, shape {[B, K]} (or {[K]}); "
                    f"received shape {list(array.shape)}."
                )
        if array.min() < 0 or array.max() >= C:
            raise ValueError(
                f"box classes must lie in [0, {C - 1}]; received values from {array.min()} to {array.max()}."
            )
        return array.astype(np.int64)

    # -- kernel --------------------------------------------------------------------------------
    def _parts(self, outputs: Any) -> tuple[Any, Any, Any]:
        """``(proposals [n, N, 4], objectness [n, N], class logits [n, N, C])`` float32."""
        from keras import ops

        proposals, objectness, logits = fields(outputs)
        proposals, logits = ops.cast(proposals, "float32"), ops.cast(logits, "float32")
        if objectness is None:  # the dict form
            return proposals, ops.ones_like(logits[..., 0]), logits
        objectness = ops.cast(objectness, "float32")
        return proposals, ops.sigmoid(objectness) if self.objectness == "logit" else objectness, logits

    def _probabilities(self, logits: Any) -> Any:
        from keras import ops

        if self.class_activation == "softmax":
            return ops.softmax(logits, axis=-1)
        if self.class_activation == "sigmoid":
            return ops.sigmoid(logits)
        return logits

    def _matched(self, outputs: Any, payload: Any, probability: bool) -> Any:
        from keras import ops

        proposals, objectness, logits = self._parts(outputs)
        targets = ops.cast(payload["boxes"], "float32")  # [n, K, 4]
        classes = ops.cast(payload["classes"], "int32")  # [n, K]
        overlaps = iou(targets, proposals)  # [n, K, N]
        # Rows and columns are picked by one-hot sums (element-wise: a gather and a transpose, or
        # a matrix product, add kernels with a large fixed cost to each of the K backward passes).
        class_of_box = ops.one_hot(classes, int(logits.shape[-1]), dtype=logits.dtype)  # [n, K, C]
        if self.mode == "drise":
            # [n, K, N]: each box's class probability at every proposal
            p = ops.sum(class_of_box[:, :, None, :] * self._probabilities(logits)[:, None], axis=-1)
            return ops.max(overlaps * objectness[:, None, :] * p, axis=-1)
        best = ops.one_hot(ops.argmax(overlaps, axis=-1), int(overlaps.shape[-1]), dtype=logits.dtype)  # [n, K, N]
        chosen = ops.sum(best[..., None] * logits[:, None], axis=2)  # [n, K, C]: the best proposal's logits
        if probability:
            chosen = self._probabilities(chosen)
        return ops.sum(class_of_box * chosen, axis=-1)

    def score(self, outputs: Any, payload: Any) -> Any:
        return self._matched(outputs, payload, probability=False)

    def probabilities(self, outputs: Any, payload: Any) -> Any:
        return self._matched(outputs, payload, probability=True)


def default_score(method: Any) -> str:
    """The box score used when none is given, for ``method`` (a method's declaration, or
    ``None``): ``"class"`` for a CAM weighting a layer by the score's gradient (declared
    ``gradient_channel_weights``: the class logit puts their maps on the object, where the
    D-RISE product's gradient, averaged over the layer, weights background channels), ``"drise"``
    otherwise."""
    return "class" if getattr(method, "gradient_channel_weights", False) else "drise"


def _detector_form(model: keras.Model) -> tuple[str, int]:
    """``("tensor" | "dict", C)`` of a detector's raw output, else ``ValueError``."""
    from ..model.scores import output_structure

    structure = output_structure(model)
    if isinstance(structure, dict) and {"boxes", "classification"} <= set(structure):
        boxes, classes = tuple(structure["boxes"]), tuple(structure["classification"])
        if len(boxes) == 3 and boxes[-1] == 4 and len(classes) == 3 and classes[-1]:
            return "dict", int(classes[-1])
    elif isinstance(structure, tuple) and (not structure or not isinstance(structure[0], tuple)):
        if len(structure) == 3 and structure[-1] is not None and structure[-1] > 5:
            return "tensor", int(structure[-1]) - 5
    raise ValueError(
        "box targets need a detector's raw output: [B, N, 4 + 1 + C] (x0, y0, x1, y1, objectness, class "
        "logits, C ≥ 1) or a dict {'boxes': [B, N, 4], 'classification': [B, N, C]}; model "
        f"{model.name!r} gives {structure}; received box(...)."
    )


def _boxes(boxes: Any, B: int) -> tuple[np.ndarray, np.ndarray]:
    """``(float [B, K, 4], padding bool [B, K])`` from ``[K, 4]`` (every input), ``[B, K, 4]`` or
    ``B`` lists of boxes (a shorter list repeats its last box, marked as padding)."""
    if boxes is None:
        raise ValueError("box targets need boxes: per input a list of [x0, y0, x1, y1]; received None.")
    try:
        array = np.asarray(boxes, np.float64)
    except (ValueError, TypeError):
        array = None
    if array is not None and array.ndim == 2 and array.shape[-1] == 4 and len(array):
        array = np.broadcast_to(array, (B, *array.shape))
    if array is not None and array.ndim == 3 and array.shape[0] == B and array.shape[-1] == 4 and array.shape[1]:
        padding = np.zeros(array.shape[:2], bool)
    else:
        rows = list(boxes) if isinstance(boxes, (list, tuple)) else None
        if rows is None or len(rows) != B or any(len(np.reshape(r, (-1, 4))) == 0 or np.size(r) % 4 for r in rows):
            raise ValueError(
                f"boxes must be per input a non-empty list of [x0, y0, x1, y1] ({B} lists), an array "
                f"[{B}, K, 4], or [K, 4] for every input; received {_describe(boxes)}."
            )
        lists = [np.reshape(np.asarray(r, np.float64), (-1, 4)) for r in rows]
        K = max(len(r) for r in lists)
        array = np.stack([np.concatenate([r, np.repeat(r[-1:], K - len(r), axis=0)]) for r in lists])
        padding = np.array([[k >= len(r) for k in range(K)] for r in lists])
    if not np.all(np.isfinite(array)) or np.any(array[..., 2] < array[..., 0]) or np.any(array[..., 3] < array[..., 1]):
        raise ValueError(
            f"boxes must be finite [x0, y0, x1, y1] with x0 ≤ x1 and y0 ≤ y1; received {_describe(boxes)}."
        )
    return np.ascontiguousarray(array), padding


def _describe(boxes: Any) -> str:
    shape = getattr(boxes, "shape", None)
    if shape is not None:
        return f"an array of shape {list(shape)}"
    text = repr(boxes)
    return text if len(text) < 80 else text[:77] + "..."


def box(
    boxes: Any,
    classes: Any = None,
    *,
    score: str | None = None,
    class_activation: str | None = None,
    objectness: str = "logit",
) -> Box:
    """Boxes to explain on a detector's raw output (before non-max suppression).

    Args:
        boxes: per input a list of ``[x0, y0, x1, y1]`` in input pixels (``B`` lists; a shorter
            list repeats its last box, recorded as ``"padding"`` in ``target_info``), a float
            array ``[B, K, 4]``, or ``[K, 4]`` for every input. The K boxes of an input are its
            K columns and share its forward pass.
        classes: ``None`` (each box's class is that of its best-matching proposal at the clean
            input), an int or class name (every box), or ints ``[B, K]`` / ``[K]``.
        score: ``"drise"``: max over proposals of IoU × objectness × class probability;
            ``"class"``: the class logit of the proposal of highest IoU; ``None`` (default): by
            method, ``"class"`` for the CAMs weighting channels by the gradient (Grad-CAM,
            Grad-CAM++, guided Grad-CAM: on the D-RISE score Grad-CAM lights up the
            background), ``"drise"`` for every other method (see the module docstring).
        class_activation: how class probabilities come from the class outputs: ``"softmax"``
            (default for ``[B, N, 4 + 1 + C]``), ``"sigmoid"`` (default for the dict form) or
            ``"none"`` (the model gives probabilities).
        objectness: the tensor form's objectness: ``"logit"`` (the raw head's logit, taken through
            a sigmoid) or ``"probability"`` (used as it is, e.g. after a final sigmoid).

    ``Explanation.target_info[b][k]``: ``{"kind": "box", "box", "class"}``.
    """
    return Box(boxes, classes, score, class_activation, objectness)
