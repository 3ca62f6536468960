"""What ``--target``, ``--boxes`` and ``--output`` ask, parsed and checked before any model runs
into a :class:`saliency_kit.targets.TaskPlan` (mask files read, boxes parsed), and the line
printed for each image once :func:`saliency_kit.targets.task_targets` has read its targets.

On a classifier: ``--target topK``, a class index or a class name (the package's one target
parser, :func:`saliency_kit.targets.parse_string`), repeatable; default ``top1``.

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
  non-max suppression, :func:`saliency_kit.targets.detections.decode`); ``--boxes topN`` the N
  best of them, ``--boxes all`` all (the default);
- ``--target NAME`` (or an index): the detected boxes of that class; ``--target topK``: the K best;
- ``--target NAME@x0,y0,x1,y1``: a given box, in the pixels of the image file (scaled with the image
  to the model's input), explained for class NAME.

``--output NAME`` (a name from ``model.output_names`` or an index) explains one head of a
multi-output model; ``--target`` then picks its components: ``topK`` (by the head's values),
indices, or ``all``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..batch.outputs import class_name_of, safe_name
from ..targets.tasks import Request, TaskPlan, TaskTargets
from .options import DEFAULT_TARGET, UsageError, did_you_mean, message, parse_targets

__all__ = ["parse", "parse_box", "read_mask", "describe", "shown_scores", "subject_names", "head_spec"]

_TOP = re.compile(r"top([0-9]+)", re.IGNORECASE)
_NUMBER = r"\s*([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))\s*"
_BOX = re.compile(",".join([_NUMBER] * 4))


def parse(texts: Sequence[str] | None, boxes: str | None, output: str | None, spec: Any) -> TaskPlan:
    """Check ``--target`` values, ``--boxes`` and ``--output`` against ``spec`` (its ``task`` and
    class names), reading mask files; problems are :class:`UsageError` lines. No TensorFlow."""
    task = spec.task
    if boxes is not None and task != "detection":
        raise UsageError(
            f'--boxes applies to detectors (a config with task = "detection"); model '
            f"{spec.name!r} is a {task} model; received --boxes {boxes!r}."
        )
    if output is not None:
        head: str | int = int(output) if str(output).isdigit() else str(output)
        name = f"out-{safe_name(str(head), limit=30)}"
        requests = tuple(_parse_output_target(t, name) for t in texts or ["top1"])
        return TaskPlan("output", requests, None, head)
    if task == "classification" and not any("@" in text for text in texts or []):
        classes = parse_targets(texts, spec.class_names, len(spec.class_names or []))
        return TaskPlan(task, tuple(_class_request(text, part) for text, part in _texts_of(texts, classes.parts)))
    count = _parse_boxes(boxes) if boxes is not None else None
    requests = tuple(_parse_one(text, spec) for text in texts or [])
    return TaskPlan(task, _named_masks(requests), count, None)


def _texts_of(texts: Sequence[str] | None, parts: Sequence[tuple]) -> list[tuple[str, tuple]]:
    """Each ``--target`` value beside its parsed part (one part per value)."""
    return list(zip(texts or [DEFAULT_TARGET], parts))


def _class_request(text: str, part: tuple) -> Request:
    kind, value = part
    return Request(text, "top", count=value) if kind == "top" else Request(text, "class", index=int(value))


def _named_masks(requests: tuple) -> tuple:
    """The requests with each mask's file-name part: ``mask-STEM``, plus a short hash of the path
    when two different files share a stem (the same file twice: the same name)."""
    files = list(dict.fromkeys(os.path.realpath(r.mask_file) for r in requests if r.kind == "mask"))
    stems = [safe_name(os.path.splitext(os.path.basename(f))[0], limit=40) for f in files]
    names = {
        f: f"mask-{stem}" if stems.count(stem) == 1 else f"mask-{stem}-{hashlib.sha256(f.encode()).hexdigest()[:6]}"
        for f, stem in zip(files, stems)
    }
    return tuple(
        dataclasses.replace(r, name=names[os.path.realpath(r.mask_file)]) if r.kind == "mask" else r for r in requests
    )


def _parse_boxes(text: str) -> int | None:
    if text.strip().lower() == "all":
        return None
    match = _TOP.fullmatch(text.strip())
    if not match or int(match.group(1)) < 1:
        raise UsageError(f"--boxes must be 'all' or 'topN' with N >= 1 (e.g. top3); received {text!r}.")
    return int(match.group(1))


def _parse_output_target(text: str, name: str) -> Request:
    stripped = text.strip()
    if stripped.lower() == "all":
        return Request(text, "all", name=name)
    match = _TOP.fullmatch(stripped)
    if match and int(match.group(1)) >= 1:
        return Request(text, "top", count=int(match.group(1)), name=name)
    if stripped.isdigit():
        return Request(text, "class", index=int(stripped), name=name)
    raise UsageError(
        f"--target {text!r}: with --output, a target is topK, a component index or 'all'; received {text!r}."
    )


def _class_index(name: str, spec: Any, text: str) -> int:
    """A class name (any case) or index of ``spec`` -> its index; else a usage error."""
    names = list(spec.class_names or [])
    stripped = name.strip()
    lowered = [n.lower() for n in names]
    if stripped.lower() in lowered:
        return lowered.index(stripped.lower())
    if stripped.isdigit():
        if int(stripped) < len(names):
            return int(stripped)
        raise UsageError(
            f"--target {text!r}: class index {stripped} is out of range for {spec.name!r} "
            f"({len(names)} classes, 0-{len(names) - 1}); received {stripped}."
        )
    raise UsageError(
        f"--target {text!r}: {spec.name!r} has no class {stripped!r}{did_you_mean(stripped, names)}; "
        f"its classes: {', '.join(names)}."
    )


def _parse_one(text: str, spec: Any) -> Request:
    stripped = text.strip()
    match = _TOP.fullmatch(stripped)
    if match:
        if int(match.group(1)) < 1:
            raise UsageError(f"--target {text!r}: topK needs K >= 1; received {text!r}.")
        return Request(text, "top", count=int(match.group(1)))
    if "@" not in stripped:
        return Request(text, "class", index=_class_index(stripped, spec, text))
    name, _, where = stripped.partition("@")
    index = _class_index(name, spec, text)
    if spec.task == "segmentation":
        return Request(text, "mask", index=index, mask=read_mask(where, text), mask_file=where)
    if spec.task == "detection":
        return Request(text, "box", index=index, box=parse_box(where, text))
    raise UsageError(
        f"--target {text!r}: NAME@MASK.png and NAME@x0,y0,x1,y1 apply to segmentation and "
        f"detection models (task in the model's config); {spec.name!r} is a {spec.task} model."
    )


def parse_box(where: str, text: str) -> tuple:
    """``"x0,y0,x1,y1"`` -> four floats with ``0 <= x0 < x1`` and ``0 <= y0 < y1``; else a usage error."""
    match = _BOX.fullmatch(where)
    if not match:
        raise UsageError(
            f"--target {text!r}: a box is NAME@x0,y0,x1,y1, four numbers in image pixels "
            f"(e.g. star@10,12,40,44); received {where!r}."
        )
    x0, y0, x1, y1 = (float(v) for v in match.groups())
    if min(x0, y0) < 0 or not (x0 < x1 and y0 < y1):
        raise UsageError(
            f"--target {text!r}: a box needs 0 <= x0 < x1 and 0 <= y0 < y1 (image pixels); "
            f"received x0={x0:g}, y0={y0:g}, x1={x1:g}, y1={y1:g}."
        )
    return (x0, y0, x1, y1)


def read_mask(path: str, text: str) -> np.ndarray:
    """A mask image file -> bool ``[h, w]`` (nonzero = in; an alpha channel counts, transparent =
    out); a missing, unreadable or empty mask is a usage error."""
    from PIL import Image, UnidentifiedImageError

    if not os.path.isfile(path):
        raise UsageError(
            f"--target {text!r}: no such mask file {path!r}; NAME@MASK.png needs an image "
            f"whose nonzero pixels are the region."
        )
    try:
        with Image.open(path) as image:
            image.load()
            if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
                array = np.asarray(image.convert("RGBA"))
                mask = (array[..., :3].max(axis=-1) > 0) & (array[..., 3] > 0)
            else:
                array = np.asarray(image.convert("I") if image.mode.startswith("I") else image.convert("L"))
                mask = array > 0
    except (UnidentifiedImageError, OSError, ValueError) as error:
        raise UsageError(f"--target {text!r}: cannot read the mask {path!r} as an image: {message(error)}") from None
    if not mask.any():
        raise UsageError(
            f"--target {text!r}: the mask {path!r} has no nonzero pixel, so it holds no "
            f"region; received an all-zero {mask.shape[1]}x{mask.shape[0]} image."
        )
    return mask


# ------------------------------------------------------------------------------ printing
def shown_scores(found: TaskTargets) -> tuple[np.ndarray, str]:
    """What a classifier's line lists: its outputs when they are a softmax, otherwise the logits
    the maps explain -- and words that say which."""
    values = np.asarray(found.outputs)
    if values.size and values.min() >= 0 and values.max() <= 1 and np.allclose(values.sum(axis=-1), 1.0, atol=1e-3):
        return values, "top probabilities"
    return np.asarray(found.logits), "top scores (logits)"


def describe(found: TaskTargets, row: int, spec: Any, shown: tuple[np.ndarray, str] | None = None) -> str:
    """The line printed for image ``row``: what the model predicts, and (but for a classifier)
    what will be explained. ``shown``: a classifier's :func:`shown_scores`."""
    plan, names = found.plan, spec.class_names
    if plan.task == "classification":
        values, label = shown if shown is not None else shown_scores(found)
        order = np.argsort(-values[row], kind="stable")[: min(5, values[row].size)]
        return f"{label}: " + ", ".join(f"{class_name_of(names, int(i))} {values[row][i]:.3f}" for i in order)
    if plan.task == "segmentation":
        predicted = np.asarray(found.outputs[row]).argmax(axis=-1)
        share = np.bincount(predicted.ravel(), minlength=len(names)) / predicted.size
        shares = [c for c in np.argsort(-share, kind="stable") if share[c] > 0]
        text = "predicted pixels: " + ", ".join(f"{names[c]} {100 * share[c]:.1f}%" for c in shares)
    elif plan.task == "detection":
        detected = (found.detections or [])[row]
        threshold = f"score >= {spec.score_threshold:g}"
        text = (
            f"{len(detected)} detections ({threshold}): "
            + ", ".join(f"{names[d.label]} {d.score:.3f} [{', '.join(f'{v:.0f}' for v in d.box)}]" for d in detected)
            if detected
            else f"no detection with a {threshold}"
        )
    else:
        names = subject_names(found, spec)
        values = np.asarray(found.outputs[row]).reshape(-1)
        best = np.argsort(-values, kind="stable")[:5]
        text = f"output {plan.output}: " + ", ".join(f"{class_name_of(names, int(c))} {values[c]:.3f}" for c in best)
        asked = found.subjects[row]
        if not asked:
            return text + "; nothing to explain"
        return text + "; explaining " + ", ".join(f"{_component(names, s.index)} of {plan.output}" for s in asked)
    asked = found.subjects[row]
    if not asked:
        return text + "; nothing to explain"
    return text + "; explaining " + ", ".join(f"{s.class_name} {s.name}" for s in asked)


def _component(names: Any, index: int) -> str:
    return class_name_of(names, index) if names else f"component {index}"


def head_spec(spec: Any, model: Any, plan: TaskPlan) -> Any:
    """``spec`` for explaining ``plan``: for one head of a multi-output model (``--output``), its
    class names kept only if there are as many as the head has components, else none (the
    components are numbered), as :func:`subject_names` does."""
    heads = list(getattr(model, "outputs", None) or [])
    if plan.task != "output" or not spec.class_names or not heads:
        return spec
    names = [str(n) for n in (getattr(model, "output_names", None) or range(len(heads)))]
    head = str(plan.output)
    at = names.index(head) if head in names else int(head) if head.isdigit() and int(head) < len(heads) else None
    size = int(np.prod(heads[at].shape[1:])) if at is not None and None not in heads[at].shape[1:] else None
    return spec if size == len(spec.class_names) else dataclasses.replace(spec, class_names=[])


def subject_names(found: TaskTargets, spec: Any) -> list[str] | None:
    """The names of what the maps' columns index: the model's class names; for one head of a
    multi-output model (``--output``) only if there are as many as the head has components (the
    names of a classifier head), else ``None`` (components are numbered)."""
    names = spec.class_names
    if found.plan.task != "output":
        return names
    size = int(np.prod(np.shape(found.outputs)[1:]))
    return names if names and len(names) == size else None
