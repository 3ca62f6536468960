"""What ``--target``, ``--boxes`` and ``--output`` ask of a segmentation model, a detector or an
output head, parsed and checked before any model runs: :class:`Request` (one ``--target``) and
:class:`TaskPlan` (all of them); mask files read, boxes parsed.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from .options import UsageError, did_you_mean, message

__all__ = ["Request", "TaskPlan", "parse", "parse_box", "read_mask", "given", "BACKGROUND"]

BACKGROUND = "background"
_TOP = re.compile(r"top([0-9]+)", re.IGNORECASE)
_NUMBER = r"\s*([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))\s*"
_BOX = re.compile(",".join([_NUMBER] * 4))


@dataclasses.dataclass(frozen=True)
class Request:
    """One ``--target`` on a task model: ``kind`` is ``"class"`` (a class's predicted region, or
    its detections), ``"top"`` (``count`` best), ``"mask"`` (a region from ``mask_file``),
    ``"box"`` (``box`` in image-file pixels) or ``"all"`` (every component of an output head)."""

    text: str
    kind: str
    index: int | None = None
    count: int | None = None
    mask: np.ndarray | None = None
    mask_file: str | None = None
    box: tuple | None = None


_T = TypeVar("_T")


def given(value: _T | None, what: str, text: str) -> _T:
    """``value``, which ``parse`` always sets for a target of its kind (``text`` names the target)."""
    if value is None:
        raise UsageError(f"--target {text!r}: no {what} was given with it; received none.")
    return value


@dataclasses.dataclass(frozen=True)
class TaskPlan:
    """Everything ``--target``/``--boxes``/``--output`` asked, checked: ``task``, the requests
    (empty: the task's default), ``boxes`` (``None`` = all detections, else the N best) and the
    ``output`` head (name or index) or ``None``."""

    task: str
    requests: tuple
    boxes: int | None = None
    output: str | int | None = None


def parse(texts: Sequence[str] | None, boxes: str | None, output, spec) -> TaskPlan:
    """Check ``--target`` values, ``--boxes`` and ``--output`` against ``spec`` (its ``task`` and
    class names), reading mask files; problems are :class:`UsageError` lines. No TensorFlow."""
    task = spec.task
    if boxes is not None and task != "detection":
        raise UsageError(
            f'--boxes applies to detectors (a config with task = "detection"); model '
            f"{spec.name!r} is a {task} model; received --boxes {boxes!r}."
        )
    if output is not None:
        return TaskPlan(
            "output",
            tuple(_parse_output_target(t) for t in texts or ["top1"]),
            None,
            int(output) if str(output).isdigit() else str(output),
        )
    count = _parse_boxes(boxes) if boxes is not None else None
    requests = tuple(_parse_one(text, spec) for text in texts or [])
    return TaskPlan(task, requests, count, None)


def _parse_boxes(text: str) -> int | None:
    if text.strip().lower() == "all":
        return None
    match = _TOP.fullmatch(text.strip())
    if not match or int(match.group(1)) < 1:
        raise UsageError(f"--boxes must be 'all' or 'topN' with N >= 1 (e.g. top3); received {text!r}.")
    return int(match.group(1))


def _parse_output_target(text: str) -> Request:
    stripped = text.strip()
    if stripped.lower() == "all":
        return Request(text, "all")
    match = _TOP.fullmatch(stripped)
    if match and int(match.group(1)) >= 1:
        return Request(text, "top", count=int(match.group(1)))
    if stripped.isdigit():
        return Request(text, "class", index=int(stripped))
    raise UsageError(
        f"--target {text!r}: with --output, a target is topK, a component index or 'all'; received {text!r}."
    )


def _class_index(name: str, spec, text: str) -> int:
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


def _parse_one(text: str, spec) -> Request:
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
