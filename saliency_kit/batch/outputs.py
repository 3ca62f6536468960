"""What ``saliency explain`` and ``saliency batch`` write for each image, and the manifest that lists it.

Per image, method and class: ``METHOD-cCLASS-NAME-heatmap.png`` and ``...-overlay.png`` (and/or
``METHOD-cCLASS-NAME.npz``), in one folder per image, and one ``manifest.jsonl`` line per file.
A map of a region or a box (segmentation models, detectors) adds what it explains to the name --
``gradcam-c4-star-region-overlay.png`` (the predicted region), ``...-mask-road-...`` (a mask file),
``...-box2-...`` (the second best detection), ``...-box-12-20-34-40-...`` (a given box) -- and to
its manifest lines (``"region"``, ``"pixels"``, ``"box"``, ``"detection"``); its overlay draws
the region's outline or the box::

    {"image": "cats/tom.jpg", "status": "ok", "method": "gradcam", "class": 3, "class_name": "star",
     "score": 4.2, "kind": "heatmap", "file": "cats/tom/gradcam-c3-star-heatmap.png", "outputs": 6}
    {"image": "broken.png", "status": "failed", "error": "broken.png: the file is empty"}
    {"image": "blank.png", "status": "empty", "reason": "nothing to explain: ...", "outputs": 0}

``outputs`` counts the image's files: an image is complete when that many lines are there and
every file exists (:func:`complete_images`). An image that asks nothing (a detector finding no
box, a segmentation net predicting only background) gets one ``"empty"`` line and is complete.
Both commands write through :func:`write_image_outputs` and :class:`Manifest`; the gallery and
``--resume`` read them back.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from .. import render
from ..files import npz_bytes, png_bytes, write_atomic
from .photos import write_photo

__all__ = [
    "FORMATS",
    "Look",
    "MANIFEST",
    "Manifest",
    "MethodMaps",
    "Output",
    "PNG_KINDS",
    "SIGNS",
    "class_name_of",
    "complete_images",
    "explain_dirs",
    "failure_line",
    "inside",
    "manifest_lines",
    "nothing_line",
    "NOTHING_ASKED",
    "manifest_name",
    "one_line",
    "output_dirs",
    "output_name",
    "per_image",
    "recorded_keys",
    "safe_name",
    "subject_mark",
    "write_image_outputs",
]

MANIFEST = "manifest.jsonl"
PNG_KINDS = ("heatmap", "overlay")
FORMATS = {"png": ("png",), "npz": ("npz",), "both": ("png", "npz")}
SIGNS = ("abs", "positive", "negative", "all")


# ------------------------------------------------------------------------------------ names
def safe_name(text: str, limit: int = 60) -> str:
    """A file-name-safe version of a name: letters (any script), digits and ``. _ + -``; others -> ``_``."""
    cleaned = re.sub(r"[^\w.+-]+", "_", str(text)).strip("._-")
    return cleaned[:limit] or "x"


def output_dirs(relative_paths: Sequence[str]) -> dict[str, str]:
    """``saliency batch``: each input (relative path) -> its own output folder (relative to --out).

    The folder mirrors the input's path without its extension (``cats/tom.jpg`` -> ``cats/tom``);
    inputs that would share a folder keep their extension in it (``tom.jpg``, ``tom.png`` ->
    ``tom_jpg``, ``tom_png``), and if that is not enough (names equal once made file-name-safe) a
    short hash of the path. Computed from the full, unsharded listing, so every shard agrees.
    """

    def folder(path: str, level: int) -> str:
        stem, ext = os.path.splitext(path)
        parts = [safe_name(part, limit=120) for part in stem.split("/")]
        if level >= 1:
            parts[-1] += "_" + safe_name(ext.lstrip("."), limit=10)
        if level >= 2:
            parts[-1] += "_" + hashlib.sha256(path.encode("utf-8")).hexdigest()[:8]
        return "/".join(parts)

    result: dict[str, str] = {}
    for level in range(3):
        candidates = {path: folder(path, level) for path in relative_paths if path not in result}
        counts: dict[str, int] = {}
        for name in candidates.values():
            counts[name] = counts.get(name, 0) + 1
        taken = set(result.values())
        for path, name in candidates.items():
            if counts[name] == 1 and name not in taken or level == 2:
                result[path] = name
    return result


def explain_dirs(paths: Sequence[str], taken: Collection[str] = ()) -> dict[str, str]:
    """``saliency explain``: one folder per image, named after the file (``cat.jpg`` -> ``cat``;
    the same name again, or a name in ``taken`` -> ``cat-2``)."""
    folders, used = {}, set(taken)
    for path in paths:
        stem = safe_name(os.path.splitext(os.path.basename(path))[0], limit=100)
        name, n = stem, 1
        while name in used:
            n += 1
            name = f"{stem}-{n}"
        used.add(name)
        folders[path] = name
    return folders


def output_name(method: str, target: int, class_name: str, kind: str, subject: str | None = None) -> str:
    """``guided_backprop-c0-circle-heatmap.png`` / ``...-overlay.png`` / ``guided_backprop-c0-circle.npz``;
    with a ``subject`` (``"region"``, ``"box2"``, ...): ``gradcam-c4-star-box2-overlay.png``."""
    base = f"{safe_name(method)}-c{int(target)}-{safe_name(class_name)}"
    if subject:
        base += f"-{safe_name(subject)}"
    return f"{base}.npz" if kind == "npz" else f"{base}-{kind}.png"


def inside(root: str, path: str) -> bool:
    """Whether ``path`` (after resolving symlinks and ``..``) lies inside ``root``."""
    root = os.path.realpath(root)
    return os.path.commonpath([root, os.path.realpath(path)]) == root


def class_name_of(class_names: Sequence[str] | None, index: int) -> str:
    """The name of class ``index``, or the index as text when the model has no name for it."""
    if class_names is not None and 0 <= index < len(class_names):
        return str(class_names[index])
    return str(index)


# ---------------------------------------------------------------------------------- writing
@dataclasses.dataclass(frozen=True)
class Look:
    """How maps are drawn (the arguments of :func:`saliency_kit.render.heatmap`/``overlay``)."""

    sign: str = "abs"
    cmap: str | None = None
    alpha: float = 0.5
    clip_percentile: float = 99.0

    def heatmap_options(self) -> dict:
        return {"sign": self.sign, "cmap": self.cmap, "clip_percentile": self.clip_percentile}


@dataclasses.dataclass
class MethodMaps:
    """One method's results for one image: ``maps`` ``[K, H, W]``, ``targets`` ``[K]``, ``scores``
    ``[K]``, ``attributions`` ``[K, ...]`` (only when NPZ files are written), drawn with ``look``;
    ``subjects``: for a region or box target, what each column explains (``name`` for the file
    name, ``fields()`` for the manifest, ``mask``/``box`` for the overlay: :func:`subject_mark`)."""

    method: str
    maps: np.ndarray
    targets: np.ndarray
    scores: np.ndarray
    attributions: np.ndarray | None = None
    look: Look = Look()
    subjects: Sequence | None = None


def per_image(
    explanations: Sequence, row: int, looks: dict, with_attributions: bool, subjects: Sequence | None = None
) -> list[MethodMaps]:
    """Row ``row`` of each Explanation (one per method) as :class:`MethodMaps`; with ``subjects``
    (one per column the image asks; a batch pads the others), its first ``len(subjects)`` columns,
    each targeting its subject's class."""
    if subjects is None:
        return [
            MethodMaps(
                e.method,
                np.asarray(e.maps[row]),
                np.asarray(e.targets[row]),
                np.asarray(e.scores[row]),
                np.asarray(e.attributions[row]) if with_attributions else None,
                looks[e.method],
            )
            for e in explanations
        ]
    k = len(subjects)
    classes = np.array([s.index for s in subjects], np.int64)
    return [
        MethodMaps(
            e.method,
            np.asarray(e.maps[row])[:k],
            classes,
            np.asarray(e.scores[row])[:k],
            np.asarray(e.attributions[row])[:k] if with_attributions else None,
            looks[e.method],
            list(subjects),
        )
        for e in explanations
    ]


@dataclasses.dataclass
class Output:
    """One written file: the manifest line for it (without ``image``/``outputs``) and its path."""

    method: str
    target: int
    class_name: str
    score: float
    kind: str
    file: str  # relative to the output root
    subject: dict = dataclasses.field(default_factory=dict)  # a region's or box's manifest fields
    photo: str | None = None  # the image under its maps (:mod:`.photos`), named on PNG lines


def write_image_outputs(
    out_root: str,
    folder: str,
    original: np.ndarray,
    results: Sequence[MethodMaps],
    class_names: Sequence[str] | None,
    formats: Sequence[str],
    *,
    durable: bool = True,
    input_size: tuple | None = None,
) -> list[Output]:
    """Render and atomically write the outputs of one image; returns what was written.

    A class requested twice (``top1`` and its name) is written once. ``durable``: fsync each file
    before its rename (see :func:`saliency_kit.files.atomic_path`). Subjects (regions, boxes) are
    drawn on the overlays; their boxes are in the pixels of ``input_size`` ``(H, W)``, the model's
    input (default: the image's).
    """
    written: list[Output] = []
    seen = set()
    kinds = (PNG_KINDS if "png" in formats else ()) + (("npz",) if "npz" in formats else ())
    photo = write_photo(out_root, folder, original, durable=durable) if "png" in formats else None
    for result in results:
        method, look = result.method, result.look
        for k, target in enumerate(np.asarray(result.targets).tolist()):
            subject = result.subjects[k] if result.subjects is not None else None
            label = subject.name if subject is not None else None
            if (method, target, label) in seen:
                continue
            seen.add((method, target, label))
            name = class_name_of(class_names, target)
            score = float(result.scores[k])
            frame = tuple(input_size) if input_size is not None else tuple(original.shape[:2])
            for kind in kinds:
                file = output_name(method, target, name, kind, label)
                relative = f"{folder}/{file}" if folder else file
                path = os.path.join(out_root, relative)
                if not inside(out_root, path):
                    raise PermissionError(
                        f"refusing to write {path!r}: it resolves outside the output folder; "
                        f"received the folder name {folder!r}."
                    )
                if kind == "heatmap":
                    data = png_bytes(render.heatmap(result.maps[k], **look.heatmap_options()))
                elif kind == "overlay":
                    picture = render.overlay(original, result.maps[k], alpha=look.alpha, **look.heatmap_options())
                    mark = subject_mark(subject, frame) if subject is not None else None
                    if mark is not None:
                        picture = render.draw_mark(picture, mark)
                    data = png_bytes(picture)
                else:
                    extra = {} if result.attributions is None else {"attributions": np.asarray(result.attributions[k])}
                    if subject is not None and getattr(subject, "mask", None) is not None:
                        extra["mask"] = np.asarray(subject.mask, bool)
                    if subject is not None and getattr(subject, "box", None) is not None:
                        extra["box"] = np.asarray(subject.box, np.float32)
                    data = npz_bytes(
                        map=np.asarray(result.maps[k]),
                        target=np.int64(target),
                        score=np.float32(score),
                        method=np.str_(method),
                        class_name=np.str_(name),
                        **extra,
                    )
                write_atomic(path, data, durable=durable)
                written.append(
                    Output(
                        method,
                        int(target),
                        name,
                        score,
                        kind,
                        relative,
                        subject.fields() if subject is not None else {},
                        photo if kind in PNG_KINDS else None,
                    )
                )
    return written


# --------------------------------------------------------------------------------- manifest
def manifest_lines(image: str, outputs: Sequence[Output]) -> list[dict]:
    """The manifest lines of one image's written files."""
    return [
        {
            "image": image,
            "status": "ok",
            "method": o.method,
            "class": o.target,
            "class_name": o.class_name,
            "score": o.score,
            "kind": o.kind,
            "file": o.file,
            **o.subject,
            **({"photo": o.photo} if o.photo else {}),
            "outputs": len(outputs),
        }
        for o in outputs
    ]


def failure_line(image: str, error: str) -> dict:
    return {"image": image, "status": "failed", "error": error}


#: Why an image of a segmentation model or a detector has no outputs (its manifest line says so).
NOTHING_ASKED = "nothing to explain: no region or box was found for the targets asked"


def nothing_line(image: str) -> dict:
    """The line of an image read and run but asking nothing (no detection, no predicted region):
    complete, with no files."""
    return {"image": image, "status": "empty", "reason": NOTHING_ASKED, "outputs": 0}


def manifest_name(shard: tuple[int, int] | None) -> str:
    """``manifest.jsonl``; each shard of a split run writes its own ``manifest.shard-I-of-N.jsonl``
    (shards may share --out, even on different machines); ``cat out/manifest*.jsonl`` joins them."""
    return MANIFEST if shard is None or shard[1] == 1 else f"manifest.shard-{shard[0]}-of-{shard[1]}.jsonl"


class Manifest:
    """``manifest.jsonl``: appended whole lines only, fsynced; tolerant of a cut-off last line."""

    def __init__(self, path: str):
        self.path = path

    def read(self) -> list[dict]:
        """Every valid line (a truncated or corrupt line -- e.g. from a power cut -- is skipped)."""
        if not os.path.exists(self.path):
            return []
        records = []
        with open(self.path, "rb") as handle:
            for raw in handle:
                if not raw.endswith(b"\n"):
                    continue  # cut off mid-line
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(record, dict) and "image" in record:
                    records.append(record)
        return records

    def append(self, records: Sequence[dict]) -> None:
        """Append ``records`` with one ``write`` call, then ``fsync``.

        If the file does not end with a newline (a previous run was cut off mid-line), a newline
        is written first so that the broken line stays isolated and is skipped on reading.
        """
        if not records:
            return
        data = _encode(records)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size:
                with open(self.path, "rb") as handle:
                    handle.seek(size - 1)
                    if handle.read(1) != b"\n":
                        data = b"\n" + data
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    def replace_images(self, records: Sequence[dict]) -> None:
        """Rewrite the manifest with ``records`` in place of every earlier line about the same
        images (``saliency explain`` run again into the same --out), atomically."""
        images = {r["image"] for r in records}
        kept = [r for r in self.read() if r["image"] not in images]
        write_atomic(self.path, _encode([*kept, *records]))


def _encode(records: Sequence[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=False) + "\n" for r in records).encode()


def complete_images(records: Sequence[dict], out_root: str) -> set[str]:
    """Images whose every recorded output is present: the count of their ``ok`` lines equals the
    ``outputs`` those lines announce, and every file exists and is not empty; and images recorded
    as asking nothing (:func:`nothing_line`)."""
    by_image: dict[str, dict[str, dict]] = {}
    for record in records:
        if record.get("status") == "ok":
            by_image.setdefault(record["image"], {})[record["file"]] = record
    complete = {record["image"] for record in records if record.get("status") == "empty"}
    for image, lines in by_image.items():
        expected = {line.get("outputs") for line in lines.values()}
        if (
            len(expected) == 1
            and len(lines) == expected.pop()
            and all(_nonempty_file(os.path.join(out_root, f)) for f in lines)
        ):
            complete.add(image)
    return complete


def _nonempty_file(path: str) -> bool:
    try:
        return os.stat(path).st_size > 0  # an unflushed file after a power cut can be empty
    except OSError:
        return False


def recorded_keys(records: Sequence[dict]) -> set[tuple[str, str | None]]:
    """``(image, file)`` of every output line and ``(image, error)`` of every failure line."""
    return {(r["image"], r.get("file") if r.get("status") == "ok" else r.get("error")) for r in records}


def one_line(error: BaseException) -> str:
    """An exception's message on one line, at most 300 characters."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def subject_mark(subject: Any, frame: Sequence[int]) -> render.Mark | None:
    """The :class:`saliency_kit.render.Mark` drawn for ``subject`` (a region's outline, a box
    and its class), in the pixels of ``frame`` ``(H, W)``; ``None`` for a class."""
    if getattr(subject, "mask", None) is None and getattr(subject, "box", None) is None:
        return None
    return render.Mark(mask=subject.mask, box=subject.box, label=subject.label, frame=tuple(frame))
