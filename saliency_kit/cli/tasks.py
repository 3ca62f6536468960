"""What ``--target``, ``--boxes`` and ``--output`` ask of a segmentation model, a detector or one
head of a multi-output model, and the ``sk.targets`` objects that answer it, image by image.

On a model whose config says ``task = "segmentation"`` (output ``[B, H', W', C]``):

- ``--target NAME`` (or a class index): the region predicted as NAME (the pixels whose arg-max at
  the image is NAME), explained as the mean of NAME's logits over it;
- ``--target NAME@MASK.png``: the region given by a mask file (nonzero pixels are in; a mask of
  another size is scaled to the model's output by nearest neighbour);
- ``--target topK``: the predicted regions of the K classes covering most pixels;
- no ``--target``: the region of every class predicted somewhere in the image.
  ``topK`` and the default leave out a class named ``background``; ask for it by name.

On a model whose config says ``task = "detection"`` (raw output ``[B, N, 4 + 1 + C]``):

- no ``--target``: every detected box (score at least the config's ``score_threshold``, after
  non-max suppression, :func:`saliency_kit.detections.decode`); ``--boxes topN`` the N best of
  them, ``--boxes all`` all (the default);
- ``--target NAME`` (or an index): the detected boxes of that class; ``--target topK``: the K best;
- ``--target NAME@x0,y0,x1,y1``: a given box, in the pixels of the image file (scaled with the image
  to the model's input), explained for class NAME.

``--output NAME`` (a name from ``model.output_names`` or an index) explains one head of a
multi-output model; ``--target`` then picks its components: ``topK`` (by the head's values),
indices, or ``all``.

Each image gets its own list of :class:`Question` (what one column of its maps explains); the
columns of a batch are padded to the longest list, and the padding is never written.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import numpy as np

from .options import UsageError, did_you_mean
from .task_requests import BACKGROUND, Request, TaskPlan, given, parse

__all__ = [
    "Request",
    "Question",
    "TaskPlan",
    "parse",
    "forward",
    "describe",
    "questions",
    "build_targets",
    "Asker",
    "BACKGROUND",
    "found_once",
]


@dataclasses.dataclass(frozen=True)
class Question:
    """What one column of an image's maps explains: class ``index`` (named ``class_name``) over a
    region ``mask`` (bool ``[H', W']``, the model's output grid) or a ``box`` (model-input pixels).

    ``name`` is the part it adds to file names (``region``, ``mask-road``, ``box2``,
    ``box-12-20-34-40``), ``record`` the fields it adds to the manifest."""

    kind: str
    index: int
    class_name: str
    name: str
    record: dict
    mask: np.ndarray | None = None
    box: tuple | None = None

    def mark(self, input_size):
        """The :class:`saliency_kit.render.Mark` drawn on this column's overlays."""
        from .. import render

        label = self.class_name if self.kind == "box" else None
        return render.Mark(mask=self.mask, box=self.box, label=label, frame=tuple(input_size))


# ----------------------------------------------------------------------- the forward pass
def forward(model, inputs: np.ndarray, batch_size: int, plan: TaskPlan) -> np.ndarray:
    """The model's outputs at ``inputs`` that the questions are read from: the segmentation logits,
    the detector's raw output, or the chosen head's values ``[B, C]`` (flattened)."""
    parts = []
    for start in range(0, len(inputs), batch_size):
        values = model(inputs[start : start + batch_size], training=False)
        if plan.output is not None:
            values = _head_values(model, values, plan.output)
        elif isinstance(values, (list, tuple, dict)):
            raise UsageError(
                f"model {model.name!r} has several outputs; pick one with --output NAME "
                f"(its outputs: {', '.join(map(str, _output_names(model, values)))})."
            )
        parts.append(np.asarray(values, dtype=np.float32))
    result = np.concatenate(parts)
    return result.reshape(len(result), -1) if plan.output is not None else result


def _output_names(model, values) -> list:
    if isinstance(values, dict):
        return list(values)
    names = list(getattr(model, "output_names", None) or [])
    return names if len(names) == len(values) else list(range(len(values)))


def _head_values(model, values, head):
    """The values of output ``head`` (a name or an index) among the model's outputs."""
    if not isinstance(values, (list, tuple, dict)):
        values = [values]
    names = _output_names(model, values)
    items = list(values.values()) if isinstance(values, dict) else list(values)
    if isinstance(head, int) and 0 <= head < len(items):
        return items[head]
    if head in names:
        return items[names.index(head)]
    raise UsageError(
        f"--output {head!r}: model {model.name!r} has no such output{did_you_mean(str(head), map(str, names))}; "
        f"its outputs: {', '.join(map(str, names))} (or their index 0-{len(items) - 1})."
    )


def describe(plan: TaskPlan, spec, raw_row: np.ndarray, asked: Sequence[Question]) -> str:
    """The line printed for an image: what the model predicts, and what will be explained."""
    if plan.task == "segmentation":
        predicted = np.asarray(raw_row).argmax(axis=-1)
        share = np.bincount(predicted.ravel(), minlength=len(spec.class_names)) / predicted.size
        order = [c for c in np.argsort(-share, kind="stable") if share[c] > 0]
        text = "predicted pixels: " + ", ".join(f"{spec.class_names[c]} {100 * share[c]:.1f}%" for c in order)
    elif plan.task == "detection":
        from .. import detections

        found = detections.decode(
            raw_row[None], score_threshold=spec.score_threshold, iou_threshold=spec.iou_threshold
        )[0]
        text = (
            f"{len(found)} detections (score >= {spec.score_threshold:g}): "
            + ", ".join(
                f"{spec.class_names[d.label]} {d.score:.3f} [{', '.join(f'{v:.0f}' for v in d.box)}]" for d in found
            )
            if found
            else f"no detection with a score >= {spec.score_threshold:g}"
        )
    else:
        best = np.argsort(-raw_row, kind="stable")[:5]
        text = f"output {plan.output}: " + ", ".join(f"{c} {raw_row[c]:.3f}" for c in best)
    if not asked:
        return text + "; nothing to explain"
    return text + "; explaining " + ", ".join(f"{q.class_name} {q.name}" for q in asked)


# ---------------------------------------------------------------------- per-image questions
def _scaled_mask(mask: np.ndarray, shape_hw) -> np.ndarray:
    """bool ``mask`` scaled to ``shape_hw`` by nearest neighbour."""
    from PIL import Image

    if mask.shape == tuple(shape_hw):
        return mask
    scaled = Image.fromarray(mask.astype(np.uint8) * 255).resize((shape_hw[1], shape_hw[0]), Image.Resampling.NEAREST)
    return np.asarray(scaled) > 127


def _stem(path: str) -> str:
    from ..batch.outputs import safe_name

    return safe_name(os.path.splitext(os.path.basename(path))[0], limit=40)


def _box_name(box) -> str:
    """``box-12-20-34-40`` (``box-10.5-20-34-40`` for fractional pixels): distinct boxes, distinct names."""
    return "box-" + "-".join(f"{v:g}" for v in box)


def _mask_names(requests) -> dict:
    """``{mask file: file-name part}``: ``mask-STEM``, plus a short hash of the path when two
    different files share a stem."""
    import hashlib

    files = list(dict.fromkeys(os.path.realpath(r.mask_file) for r in requests if r.kind == "mask"))
    stems = [_stem(f) for f in files]
    return {
        f: f"mask-{stem}" if stems.count(stem) == 1 else f"mask-{stem}-{hashlib.sha256(f.encode()).hexdigest()[:6]}"
        for f, stem in zip(files, stems)
    }


def questions(plan: TaskPlan, spec, raw: np.ndarray, image_sizes: Sequence[tuple[int, int]]) -> list[list[Question]]:
    """Each image's questions, from the model's outputs ``raw`` at the images (segmentation
    logits ``[B, H', W', C]``, a detector's raw ``[B, N, 4 + 1 + C]``) and each image file's
    ``(height, width)``. An image may get none (nothing predicted or detected)."""
    if plan.task == "segmentation":
        return [_region_questions(plan, spec, logits) for logits in raw]
    if plan.task == "detection":
        return _box_questions(plan, spec, raw, image_sizes)
    return [_output_questions(plan, values) for values in raw]


def _output_questions(plan: TaskPlan, values: np.ndarray) -> list[Question]:
    """Components of one output head: ``values`` ``[C]`` (the head's outputs at one image, flattened)."""
    values = np.asarray(values).reshape(-1)
    head = str(plan.output)
    picked: list[int] = []
    for request in plan.requests:
        if request.kind == "all":
            chosen = list(range(values.size))
        elif request.kind == "top":
            chosen = [int(c) for c in np.argsort(-values, kind="stable")[: request.count]]
        else:
            if request.index >= values.size:
                raise UsageError(
                    f"--target {request.text!r}: output {head!r} has {values.size} components "
                    f"(0-{values.size - 1}); received {request.index}."
                )
            chosen = [request.index]
        picked += [c for c in chosen if c not in picked]
    from ..batch.outputs import safe_name

    return [Question("output", c, str(c), f"out-{safe_name(head, limit=30)}", {"output": head}) for c in picked]


def _region(index, spec, mask, name, record) -> Question:
    return Question(
        "region", int(index), spec.class_names[index], name, {"region": record, "pixels": int(mask.sum())}, mask=mask
    )


def _region_questions(plan: TaskPlan, spec, logits: np.ndarray) -> list[Question]:
    predicted = np.asarray(logits).argmax(axis=-1)
    counts = np.bincount(predicted.ravel(), minlength=len(spec.class_names))
    names = [n.lower() for n in spec.class_names]
    ranked = [int(c) for c in np.argsort(-counts, kind="stable") if counts[c] > 0 and names[c] != BACKGROUND]
    found: list[Question] = []
    mask_names = _mask_names(plan.requests)
    add = found_once(found)

    for request in plan.requests or [Request("", "top", count=len(spec.class_names))]:
        if request.kind == "mask":
            add(
                _region(
                    request.index,
                    spec,
                    _scaled_mask(given(request.mask, "mask", request.text), predicted.shape),
                    mask_names[os.path.realpath(given(request.mask_file, "mask file", request.text))],
                    request.mask_file,
                )
            )
            continue
        chosen = ranked[: request.count] if request.kind == "top" else [request.index]
        for c in chosen:
            if counts[c]:  # a class predicted nowhere has no region to explain
                add(_region(c, spec, predicted == c, "region", "predicted"))
    return found


def found_once(found: list):
    """``add(question)``: appends to ``found`` a question not already there (same class and name)."""
    keys = {(q.index, q.name) for q in found}

    def add(question: Question) -> None:
        if (question.index, question.name) not in keys:
            keys.add((question.index, question.name))
            found.append(question)

    return add


def _detection(spec, rank: int, found) -> Question:
    """Detection number ``rank`` (best first) of an image as a question."""
    return Question(
        "box",
        found.label,
        spec.class_names[found.label],
        f"box{rank}",
        {"box": [round(v, 2) for v in found.box], "detection": rank, "detection_score": round(found.score, 4)},
        box=found.box,
    )


def _box_questions(plan: TaskPlan, spec, raw: np.ndarray, image_sizes) -> list[list[Question]]:
    from .. import detections

    input_h, input_w = spec.input_size
    found_all = detections.decode(raw, score_threshold=spec.score_threshold, iou_threshold=spec.iou_threshold)
    result = []
    for found, (height, width) in zip(found_all, image_sizes):
        ranked = list(enumerate(found, start=1))
        picked: list[Question] = []
        add = found_once(picked)

        requests = plan.requests or [Request("", "top", count=plan.boxes or len(found))]
        for request in requests:
            if request.kind == "box":
                x0, y0, x1, y1 = given(request.box, "box", request.text)
                if x1 > width or y1 > height:
                    raise UsageError(
                        f"--target {request.text!r}: the box reaches beyond the image "
                        f"({width}x{height} pixels); received x1={x1:g}, y1={y1:g}."
                    )
                box = (x0 * input_w / width, y0 * input_h / height, x1 * input_w / width, y1 * input_h / height)
                add(
                    Question(
                        "box",
                        given(request.index, "class", request.text),
                        spec.class_names[request.index],
                        _box_name(request.box),
                        {"box": [round(v, 2) for v in box]},
                        box=box,
                    )
                )
            elif request.kind == "top":
                for rank, d in ranked[: request.count]:
                    add(_detection(spec, rank, d))
            else:
                for rank, d in ranked:
                    if d.label == request.index:
                        add(_detection(spec, rank, d))
        result.append(picked)
    return result


# ----------------------------------------------------------------------- batches of images
class Asker:
    """``ask(inputs, sizes) -> (questions per image, targets)`` for ``saliency batch``
    (:func:`saliency_kit.batch.run.explain_asked`): one forward pass per batch, then each image's
    questions and the ``sk.explain`` targets of those that ask something (``None`` if none do)."""

    asks_questions = True

    def __init__(self, plan: TaskPlan, spec, model, batch_size: int):
        self.plan, self.spec, self.model, self.batch_size = plan, spec, model, batch_size

    def __call__(self, inputs, sizes):
        raw = forward(self.model, inputs, self.batch_size, self.plan)
        per_image = questions(self.plan, self.spec, raw, sizes)
        asking = [q for q in per_image if q]
        return per_image, (build_targets(asking)[0] if asking else None)


# ------------------------------------------------------------------------------- targets
def build_targets(per_image: Sequence[Sequence[Question]]):
    """The ``targets`` argument of ``sk.explain`` for a batch whose image ``b`` asks
    ``per_image[b]``: ``K`` = the longest list; a shorter list is padded with its first question
    (those columns are not written). Images that ask nothing must be left out of the batch.
    Returns ``(targets, K)``."""
    from .. import targets

    k = max(len(q) for q in per_image)
    padded = [list(q) + [q[0]] * (k - len(q)) for q in per_image]
    kind = padded[0][0].kind
    if any(question.kind != kind for row in padded for question in row):
        raise ValueError(f"a batch explains one kind of target; received {kind!r} and others.")
    if kind == "output":
        head = padded[0][0].record["output"]
        classes = np.array([[question.index for question in row] for row in padded], np.int64)
        return targets.output(int(head) if head.isdigit() else head, classes), k
    if kind == "region":
        columns = []
        for j in range(k):
            masks = np.stack([given(row[j].mask, "mask", row[j].name) for row in padded])
            columns.append(targets.region(masks, [row[j].index for row in padded]))
        return columns, k
    boxes = [[list(given(question.box, "box", question.name)) for question in row] for row in padded]
    classes = np.array([[question.index for question in row] for row in padded], np.int64)
    return targets.box(boxes, classes), k
