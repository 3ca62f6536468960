"""Each image's targets for a task: the classes of a classifier, the regions of a segmentation
model, the boxes of a detector, the components of one head -- from one forward pass in the engine.

What is asked is a :class:`TaskPlan` (a list of :class:`Request`); :func:`task_targets` runs the
model once on the images, reads each image's :class:`Subject` list (what each column of its maps
explains) from the outputs, and returns the ``targets`` of ``sk.explain`` for the images that ask
something (:class:`TaskTargets`)::

    plan = sk.targets.TaskPlan("detection", (sk.targets.Request("top3", "top", count=3),))
    found = sk.targets.task_targets(model, images, plan, spec)   # spec: sk.load_model's second value
    expl = sk.explain(model, images[found.rows], "gradcam", found.targets)

By task (``plan.task``; the model's config names it, ``spec.task``):

- ``"classification"`` (output ``[B, C]``): ``"class"`` (an index) and ``"top"`` (the ``count``
  best classes by logit) requests, side by side; the targets are int ``[B, K]``;
- ``"segmentation"`` (``[B, H', W', C]``): a class's predicted region (the pixels whose arg-max is
  the class), a given ``"mask"`` (bool ``[h, w]``, scaled to ``[H', W']`` by nearest neighbour),
  ``"top"`` (the predicted regions of the ``count`` classes covering most pixels); no request: every
  class predicted somewhere; ``"top"`` and the default leave out a class named ``background``;
- ``"detection"`` (raw ``[B, N, 4 + 1 + C]``): the detections (:func:`.detections.decode` with the
  spec's thresholds) of a ``"class"``, the ``"top"`` ``count``, a given ``"box"`` (image-file
  pixels, scaled to the model's input); no request: the ``plan.boxes`` best (``None``: all);
- ``"output"`` (one head ``plan.output`` of a multi-output model, its values flattened to
  ``[B, C]``): ``"top"`` components by value, ``"class"`` (an index), ``"all"``.

An image's subjects are distinct (class and name); the columns of a batch are padded to the
longest list, and :class:`TaskTargets` says which columns are padding.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from .. import engine
from .box import box as box_target
from .detections import Detection, decode
from .heads import output as output_target
from .parse import TargetSpec, resolve
from .region import region as region_target

if TYPE_CHECKING:
    import keras

__all__ = [
    "TASKS",
    "BACKGROUND",
    "Request",
    "TaskPlan",
    "Subject",
    "TaskTargets",
    "AskError",
    "task_targets",
    "subjects_from_outputs",
    "explain_targets",
]

#: The tasks a plan may name.
TASKS = ("classification", "segmentation", "detection", "output")
#: The class name ``"top"`` requests and the default leave out on a segmentation model.
BACKGROUND = "background"


@dataclasses.dataclass(frozen=True)
class Request:
    """One thing asked: ``kind`` is ``"class"`` (class ``index``: its predicted region, its
    detections, the component), ``"top"`` (the ``count`` best), ``"mask"`` (the region ``mask``,
    bool ``[h, w]``, of class ``index``), ``"box"`` (``box`` ``(x0, y0, x1, y1)`` in image-file
    pixels, of class ``index``) or ``"all"`` (every component of a head). ``text`` is how it was
    asked (for messages); ``name`` the file-name part of its subjects (default: by kind)."""

    text: str
    kind: str
    index: int | None = None
    count: int | None = None
    mask: np.ndarray | None = None
    mask_file: str | None = None
    box: tuple | None = None
    name: str | None = None


@dataclasses.dataclass(frozen=True)
class TaskPlan:
    """What is asked of a model: its ``task`` (one of :data:`TASKS`), the ``requests`` (empty: the
    task's default), ``boxes`` (a detector's default: ``None`` every detection, else the N best)
    and ``output`` (the head of an ``"output"`` task: a name or an index)."""

    task: str
    requests: tuple = ()
    boxes: int | None = None
    output: str | int | None = None


class AskError(ValueError):
    """A request that does not fit the model or the image (a component or a box out of range):
    ``option`` (``"target"``, ``"output"``) and ``text`` say which, ``reason`` why."""

    def __init__(self, option: str, text: Any, reason: str):
        super().__init__(f"{option} {text!r}: {reason}")
        self.option, self.text, self.reason = option, text, reason

    def __reduce__(self) -> tuple:
        return (type(self), (self.option, self.text, self.reason))  # pickled whole (Ray, processes)

    @property
    def as_option(self) -> str:
        """The request as the command line's option that asked it, and why it does not fit:
        ``--target 'star@15,12,340,320': ...``."""
        return f"--{self.option} {self.text!r}: {self.reason}"


_T = TypeVar("_T")


def _given(value: _T | None, what: str, text: str) -> _T:
    """``value``, which a request of its kind always holds (``text`` names the request)."""
    if value is None:
        raise AskError("target", text, f"no {what} was given with it; received none.")
    return value


@dataclasses.dataclass(frozen=True)
class Subject:
    """What one column of an image's maps explains: class ``index`` (named ``class_name``) -- over
    a region ``mask`` (bool ``[H', W']``, the model's output grid) or a ``box`` (model-input
    pixels) for those kinds.

    ``name`` is the part it adds to file names (``""`` for a class; ``region``, ``mask-road``,
    ``box2``, ``box-12-20-34-40``, ``out-age``), ``record`` the fields it adds to the manifest."""

    kind: str
    index: int
    class_name: str
    name: str
    record: dict
    mask: np.ndarray | None = None
    box: tuple | None = None

    def fields(self) -> dict:
        """The manifest fields of this column (none for a class)."""
        return dict(self.record, target=self.name) if self.name else {}

    @property
    def label(self) -> str | None:
        """The text drawn beside its box on an overlay (a box's class name), else ``None``."""
        return self.class_name if self.kind == "box" else None


@dataclasses.dataclass
class TaskTargets:
    """What :func:`task_targets` found for ``B`` images.

    ``subjects``: ``B`` lists of :class:`Subject` (empty: the image asks nothing); ``rows``: the
    images that ask something; ``targets``: ``sk.explain``'s targets for ``inputs[rows]`` (int
    ``[len(rows), K]`` or target objects; ``None`` when no image asks), ``K`` the longest list,
    a shorter one padded with its first subject (column ``k`` of image ``rows[i]`` is
    ``subjects[rows[i]][k]`` for ``k < len(subjects[rows[i]])``); ``outputs``: the values the
    subjects were read from (``[B, C]`` a classifier's outputs, ``[B, H', W', C]`` segmentation
    logits, ``[B, N, 4 + 1 + C]`` a detector's raw output, ``[B, C]`` a head's values; ``None``
    when not computed); ``logits``: a classifier's logits ``[B, C]`` (or ``None``);
    ``detections``: a detector's detections per image (else ``None``)."""

    plan: TaskPlan
    subjects: list
    rows: list
    targets: Any
    outputs: Any = None
    logits: np.ndarray | None = None
    detections: list | None = None


def task_targets(
    model: keras.Model,
    inputs: np.ndarray,
    plan: TaskPlan,
    spec: Any,
    *,
    image_sizes: Sequence[tuple[int, int]] | None = None,
    batch_size: int = 32,
    with_outputs: bool = True,
) -> TaskTargets:
    """Each image's targets for ``plan`` on ``model`` at ``inputs`` ``[B, H, W, C]``.

    ``spec``: the model's ``ModelSpec`` (``class_names``; a detector's ``score_threshold``,
    ``iou_threshold`` and ``input_size``). ``image_sizes``: each image file's ``(height, width)``,
    the pixels of given boxes (default: the model's input size). The forward pass runs in the
    engine, once; a classifier's only when a ``"top"`` request or ``with_outputs`` needs it
    (``with_outputs``: also its outputs ``[B, C]``, the probabilities behind a softmax). Requests
    that do not fit are :class:`AskError`.
    """
    if plan.task not in TASKS:
        raise ValueError(f"a task is one of {', '.join(TASKS)}; received {plan.task!r}.")
    sizes = list(image_sizes) if image_sizes is not None else [tuple(spec.input_size)] * len(inputs)
    if plan.task == "classification":
        return _class_targets(model, inputs, plan, spec, batch_size, with_outputs)
    outputs = engine.outputs(model, inputs, strip=False, batch_size=batch_size)
    if plan.output is not None:
        outputs = _head_values(model, outputs, plan.output)
    elif isinstance(outputs, (list, tuple, dict)):
        raise ValueError(f"model {model.name!r} has several outputs; pick one with TaskPlan(output=NAME).")
    found = None
    if plan.task == "detection":
        found = decode(outputs, score_threshold=spec.score_threshold, iou_threshold=spec.iou_threshold)
    per_image = subjects_from_outputs(plan, spec, outputs, sizes, detections=found)
    rows = [row for row, subjects in enumerate(per_image) if subjects]
    targets = explain_targets([per_image[row] for row in rows])[0] if rows else None
    return TaskTargets(plan, per_image, rows, targets, outputs, None, found)


def _class_targets(
    model: keras.Model, inputs: np.ndarray, plan: TaskPlan, spec: Any, batch_size: int, with_outputs: bool
) -> TaskTargets:
    """:func:`task_targets` of a classifier: int ``[B, K]``, the requests' columns side by side."""
    parts = tuple(
        ("top", r.count) if r.kind == "top" else ("class", _given(r.index, "class", r.text)) for r in plan.requests
    )
    classes = TargetSpec(parts)
    logits = outputs = None
    if classes.needs_scores or with_outputs:
        logits = engine.all_scores(model, inputs, score="logits", batch_size=batch_size)
    if with_outputs:
        outputs = engine.all_scores(model, inputs, score="output", batch_size=batch_size)
    columns = resolve(classes, logits, num_inputs=len(inputs))
    names = spec.class_names
    per_image = [[Subject("class", int(c), _class_name(names, int(c)), "", {}) for c in row] for row in columns]
    return TaskTargets(plan, per_image, list(range(len(inputs))), columns, outputs, logits)


def _class_name(class_names: Sequence[str] | None, index: int) -> str:
    return str(class_names[index]) if class_names is not None and 0 <= index < len(class_names) else str(index)


def _output_names(model: keras.Model, values: Any) -> list:
    if isinstance(values, dict):
        return list(values)
    names = list(getattr(model, "output_names", None) or [])
    return names if len(names) == len(values) else list(range(len(values)))


def _head_values(model: keras.Model, values: Any, head: str | int) -> np.ndarray:
    """The values ``[B, C]`` (flattened) of output ``head`` (a name or an index) among the model's."""
    if not isinstance(values, (list, tuple, dict)):
        values = [values]
    names = _output_names(model, values)
    items = list(values.values()) if isinstance(values, dict) else list(values)
    if isinstance(head, int) and 0 <= head < len(items):
        chosen = items[head]
    elif head in names:
        chosen = items[names.index(head)]
    else:
        lowered = {str(n).lower(): str(n) for n in names}
        close = difflib.get_close_matches(str(head).lower(), list(lowered), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(repr(lowered[c]) for c in close)}?)" if close else ""
        raise AskError(
            "output",
            head,
            f"model {model.name!r} has no such output{hint}; its outputs: {', '.join(map(str, names))} "
            f"(or their index 0-{len(items) - 1}).",
        )
    chosen = np.asarray(chosen, np.float32)
    return chosen.reshape(len(chosen), -1)


# ------------------------------------------------------------------------ subjects per image
def subjects_from_outputs(
    plan: TaskPlan,
    spec: Any,
    outputs: Any,
    image_sizes: Sequence[tuple[int, int]],
    *,
    detections: list | None = None,
) -> list[list[Subject]]:
    """Each image's subjects from the model's ``outputs`` at the images (segmentation logits
    ``[B, H', W', C]``, a detector's raw ``[B, N, 4 + 1 + C]``, a head's values ``[B, C]``) and
    each image file's ``(height, width)``; a detector's ``detections`` when already decoded.
    No model runs. An image may get none (nothing predicted or detected)."""
    if plan.task == "segmentation":
        return [_region_subjects(plan, spec, logits) for logits in outputs]
    if plan.task == "detection":
        if detections is None:
            detections = decode(outputs, score_threshold=spec.score_threshold, iou_threshold=spec.iou_threshold)
        return [_box_subjects(plan, spec, found, size) for found, size in zip(detections, image_sizes)]
    if plan.task == "output":
        return [_output_subjects(plan, values) for values in outputs]
    raise ValueError(f"subjects_from_outputs reads segmentation, detection or output tasks; received {plan.task!r}.")


def _found_once(found: list) -> Any:
    """``add(subject)``: appends to ``found`` a subject not already there (same class and name)."""
    keys = {(s.index, s.name) for s in found}

    def add(subject: Subject) -> None:
        if (subject.index, subject.name) not in keys:
            keys.add((subject.index, subject.name))
            found.append(subject)

    return add


def _output_subjects(plan: TaskPlan, values: np.ndarray) -> list[Subject]:
    """Components of one output head: ``values`` ``[C]`` (the head's outputs at one image, flattened)."""
    values = np.asarray(values).reshape(-1)
    head = str(plan.output)
    picked: list[int] = []
    names: dict[int, str] = {}
    for request in plan.requests:
        if request.kind == "all":
            chosen = list(range(values.size))
        elif request.kind == "top":
            chosen = [int(c) for c in np.argsort(-values, kind="stable")[: request.count]]
        else:
            index = _given(request.index, "component", request.text)
            if index >= values.size:
                raise AskError(
                    "target",
                    request.text,
                    f"output {head!r} has {values.size} components (0-{values.size - 1}); received {index}.",
                )
            chosen = [index]
        for c in chosen:
            if c not in picked:
                picked.append(c)
                names[c] = request.name or f"out-{head}"
    return [Subject("output", c, str(c), names[c], {"output": head}) for c in picked]


def _scaled_mask(mask: np.ndarray, shape_hw: Sequence[int]) -> np.ndarray:
    """bool ``mask`` scaled to ``shape_hw`` by nearest neighbour."""
    from PIL import Image

    if mask.shape == tuple(shape_hw):
        return mask
    scaled = Image.fromarray(mask.astype(np.uint8) * 255).resize((shape_hw[1], shape_hw[0]), Image.Resampling.NEAREST)
    return np.asarray(scaled) > 127


def _region(index: int, spec: Any, mask: np.ndarray, name: str, record: Any) -> Subject:
    return Subject(
        "region", int(index), spec.class_names[index], name, {"region": record, "pixels": int(mask.sum())}, mask=mask
    )


def _region_subjects(plan: TaskPlan, spec: Any, logits: np.ndarray) -> list[Subject]:
    predicted = np.asarray(logits).argmax(axis=-1)
    counts = np.bincount(predicted.ravel(), minlength=len(spec.class_names))
    names = [n.lower() for n in spec.class_names]
    ranked = [int(c) for c in np.argsort(-counts, kind="stable") if counts[c] > 0 and names[c] != BACKGROUND]
    found: list[Subject] = []
    add = _found_once(found)
    for request in plan.requests or [Request("", "top", count=len(spec.class_names))]:
        if request.kind == "mask":
            mask = _scaled_mask(_given(request.mask, "mask", request.text), predicted.shape)
            index = _given(request.index, "class", request.text)
            add(_region(index, spec, mask, request.name or "mask", request.mask_file or "given"))
            continue
        chosen = ranked[: request.count] if request.kind == "top" else [_given(request.index, "class", request.text)]
        for c in chosen:
            if counts[c]:  # a class predicted nowhere has no region to explain
                add(_region(c, spec, predicted == c, "region", "predicted"))
    return found


def _detection(spec: Any, rank: int, found: Detection) -> Subject:
    """Detection number ``rank`` (best first) of an image as a subject."""
    return Subject(
        "box",
        found.label,
        spec.class_names[found.label],
        f"box{rank}",
        {"box": [round(v, 2) for v in found.box], "detection": rank, "detection_score": round(found.score, 4)},
        box=found.box,
    )


def _box_name(box: Sequence[float]) -> str:
    """``box-12-20-34-40`` (``box-10.5-20-34-40`` for fractional pixels): distinct boxes, distinct names."""
    return "box-" + "-".join(f"{v:g}" for v in box)


def _given_box(request: Request, spec: Any, size: tuple[int, int]) -> Subject:
    """A box given in the pixels of an image of ``size`` ``(height, width)``, scaled to the model's input."""
    input_h, input_w = spec.input_size
    height, width = size
    x0, y0, x1, y1 = _given(request.box, "box", request.text)
    if x1 > width or y1 > height:
        raise AskError(
            "target",
            request.text,
            f"the box reaches beyond the image ({width}x{height} pixels); received x1={x1:g}, y1={y1:g}.",
        )
    scaled = (x0 * input_w / width, y0 * input_h / height, x1 * input_w / width, y1 * input_h / height)
    index = _given(request.index, "class", request.text)
    name = request.name or _box_name((x0, y0, x1, y1))
    return Subject("box", index, spec.class_names[index], name, {"box": [round(v, 2) for v in scaled]}, box=scaled)


def _box_subjects(plan: TaskPlan, spec: Any, found: list, size: tuple[int, int]) -> list[Subject]:
    ranked = list(enumerate(found, start=1))
    picked: list[Subject] = []
    add = _found_once(picked)
    for request in plan.requests or [Request("", "top", count=plan.boxes or len(found))]:
        if request.kind == "box":
            add(_given_box(request, spec, size))
        elif request.kind == "top":
            for rank, d in ranked[: request.count]:
                add(_detection(spec, rank, d))
        else:
            for rank, d in ranked:
                if d.label == request.index:
                    add(_detection(spec, rank, d))
    return picked


# ------------------------------------------------------------------------------- targets
def explain_targets(per_image: Sequence[Sequence[Subject]]) -> tuple[Any, int]:
    """The ``targets`` argument of ``sk.explain`` for a batch whose image ``b`` asks
    ``per_image[b]`` (each non-empty, one kind): ``K`` = the longest list; a shorter list is
    padded with its first subject. Returns ``(targets, K)``: int ``[B, K]`` for classes,
    ``sk.targets.output``, ``K`` ``sk.targets.region`` or one ``sk.targets.box`` object."""
    k = max(len(s) for s in per_image)
    padded = [list(s) + [s[0]] * (k - len(s)) for s in per_image]
    kind = padded[0][0].kind
    if any(subject.kind != kind for row in padded for subject in row):
        raise ValueError(f"a batch explains one kind of target; received {kind!r} and others.")
    classes = np.array([[subject.index for subject in row] for row in padded], np.int64)
    if kind == "class":
        return classes, k
    if kind == "output":
        head = padded[0][0].record["output"]
        return output_target(int(head) if head.isdigit() else head, classes), k
    if kind == "region":
        masks = [np.stack([_given(row[j].mask, "mask", row[j].name) for row in padded]) for j in range(k)]
        return [region_target(masks[j], [row[j].index for row in padded]) for j in range(k)], k
    boxes = [[list(_given(subject.box, "box", subject.name)) for subject in row] for row in padded]
    return box_target(boxes, classes), k
