"""``saliency explain IMAGE...``: explain a few images; per image, method and class a heatmap and an
overlay PNG (and/or an NPZ), one grid PNG per image, and ``manifest.jsonl`` in --out listing them
as ``saliency batch`` does."""

from __future__ import annotations

import argparse
import os
import posixpath
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import methods, render
from ..batch import gallery, outputs
from ..images import ImageLoadError, load_image
from ..targets.tasks import AskError, Subject, TaskPlan, TaskTargets, task_targets
from . import options as opt
from . import tasks
from .options import UsageError

if TYPE_CHECKING:
    import keras

    from ..explanation import Explanation
    from ..zoo import ModelSpec

__all__ = ["add_parser", "add_explain_options", "task_plan", "check_before_loading", "with_model_defaults", "run"]


def add_parser(subcommands: Any, common: argparse.ArgumentParser) -> None:
    parser = subcommands.add_parser(
        "explain",
        parents=[common],
        help="explain one or more images",
        description="Explain images: per image, method and class a heatmap and an overlay PNG, plus "
        "one grid PNG per image; manifest.jsonl in --out lists every file.",
    )
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="image files (PNG, JPEG, ...)")
    add_explain_options(parser)
    parser.add_argument(
        "--out", default=opt.DEFAULT_OUT, metavar="DIR", help=f"output folder (default: {opt.DEFAULT_OUT})"
    )
    parser.set_defaults(handler=run)


def add_explain_options(parser: argparse.ArgumentParser) -> None:
    """The options ``explain`` and ``batch`` share."""
    opt.add_model_options(parser)
    opt.add_method_options(parser)
    group = parser.add_argument_group(
        "segmentation, detection, several outputs",
        'On a segmentation model (task = "segmentation" in its config) --target NAME explains the region '
        "predicted as NAME, --target NAME@MASK.png a region given by a mask image (nonzero = in); the default "
        'is every class predicted somewhere but the background. On a detector (task = "detection") the '
        "default explains every detected box (score at least the config's score_threshold, after non-max "
        "suppression); --target NAME its boxes of class NAME, --target NAME@x0,y0,x1,y1 a given box in the "
        "image file's pixels.",
    )
    group.add_argument(
        "--boxes",
        metavar="topN|all",
        default=None,
        help="detectors: explain the N best detected boxes, or all of them (default: all)",
    )
    group.add_argument(
        "--output",
        metavar="NAME",
        default=None,
        help="a multi-output model: explain the output (head) NAME (or its index); --target then "
        "picks its components: topK, an index, or all (default: top1)",
    )
    opt.add_render_options(parser)
    parser.add_argument(
        "--max-pixels",
        type=opt.positive_int,
        default=None,
        metavar="N",
        help="refuse images of more than N pixels (default: Pillow's decompression-bomb limit, about 89 "
        "million); raise it to read larger images you trust",
    )


def task_plan(args: argparse.Namespace, spec: ModelSpec, model: keras.Model | None = None) -> TaskPlan:
    """What ``--target``, ``--boxes`` and ``--output`` ask of the model (:func:`.tasks.parse`).
    With the ``model``: one with several outputs needs ``--output``."""
    if model is not None and args.output is None and len(getattr(model, "outputs", None) or []) > 1:
        names = ", ".join(map(str, getattr(model, "output_names", None) or range(len(model.outputs))))
        raise UsageError(f"model {spec.name!r} has several outputs ({names}); pick one with --output NAME.")
    return tasks.parse(args.target, args.boxes, args.output, spec)


def check_before_loading(args: argparse.Namespace) -> tuple[list[tuple[str, dict]], ModelSpec | None]:
    """What can be checked without TensorFlow: methods and their options, and the targets when
    the model's config says enough (its task, or its class names). Returns ``(plan, spec or None)``."""
    plan = opt.method_plan(args)
    spec = opt.model_spec(args)
    if spec is not None and (
        spec.task != "classification"
        or spec.class_names
        or args.output is not None
        or args.boxes is not None
        or any("@" in text for text in args.target or [])
    ):
        task_plan(args, spec)
    return plan, spec


def with_model_defaults(plan: list[tuple[str, dict]], spec: ModelSpec) -> list[tuple[str, dict]]:
    """The model's configured Grad-CAM layer as the default ``layer`` of the methods that take one."""
    completed = []
    for name, options in plan:
        if "layer" in methods.get(name).accepted(options) and options.get("layer") is None and spec.gradcam_layer:
            options = {**options, "layer": spec.gradcam_layer}
        completed.append((name, options))
    return completed


def run(args: argparse.Namespace) -> int:
    """Handler of ``saliency explain``: returns the exit status."""
    missing = [path for path in args.images if not os.path.isfile(path)]
    if missing:
        raise UsageError(
            f"no such file: {missing[0]}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        )
    plan, _ = check_before_loading(args)
    looks = opt.looks(args, plan)

    model, spec = opt.load_model_from_args(args)
    print(opt.describe_model(args, model, spec), flush=True)
    asked = task_plan(args, spec, model)
    plan = opt.read_option_files(with_model_defaults(plan, spec), spec)
    paths, inputs, originals, failures = _read_images(args.images, spec, args.max_pixels)
    if not paths:
        print(f"saliency explain: none of the {len(args.images)} images could be read", file=sys.stderr)
        return 1
    for note in opt.model_notes(args, spec, model, [o.shape[:2] for o in originals]):
        print(note, file=sys.stderr)
    opt.preflight(model, spec, inputs[:1], plan, args.batch_size)

    from ..pipeline.api import explain  # TensorFlow: started by load_model_from_args

    found = _task_targets(model, inputs, asked, spec, [o.shape[:2] for o in originals], args.batch_size)
    explanations = (
        [
            explain(model, inputs[found.rows], name, found.targets, batch_size=args.batch_size, **options)
            for name, options in plan
        ]
        if found.rows
        else []
    )
    shown = tasks.shown_scores(found) if asked.task == "classification" else None
    manifest = outputs.Manifest(os.path.join(args.out, outputs.MANIFEST))
    earlier = manifest.read()
    folders = _image_folders(paths, args.out, earlier)
    lines = []
    for row, path in enumerate(paths):
        print(f"{path}: " + tasks.describe(found, row, spec, shown))
        if row not in found.rows:
            lines.append(outputs.nothing_line(path))
            continue
        files, written = _write_image(args, explanations, found, row, path, originals[row], spec, folders[path], looks)
        lines += outputs.manifest_lines(path, written)
        for file in files:
            print(f"  wrote {file}")
    _remove_replaced(args.out, earlier, lines)
    manifest.replace_images(lines + [outputs.failure_line(path, error) for path, error in failures])
    gallery.write_gallery(args.out)
    print(f"  wrote {os.path.join(args.out, 'index.html')}")
    if failures:
        print(f"saliency explain: {len(failures)} of {len(args.images)} images could not be read", file=sys.stderr)
        return 1
    return 0


def _image_folders(paths: list[str], out: str, earlier: list[dict]) -> dict[str, str]:
    """Each image's folder in ``out``: an image explained there before (``earlier``, the manifest's
    lines) keeps its folder; any other is named after its file, numbered past every name already
    in ``out`` (``y``, ``y-2``), so no other image's files are ever overwritten."""
    asked, kept = set(paths), dict[str, str]()
    for record in earlier:
        folder = posixpath.dirname(record.get("file") or "")
        if folder and record["image"] in asked:
            kept.setdefault(record["image"], folder)
    taken = set(os.listdir(out)) if os.path.isdir(out) else set()
    taken |= {record["file"].split("/")[0] for record in earlier if record.get("file")}
    fresh = outputs.explain_dirs([path for path in paths if path not in kept], taken=taken)
    return {path: kept.get(path) or fresh[path] for path in paths}


def _remove_replaced(out: str, earlier: list[dict], lines: list[dict]) -> None:
    """Remove the files an earlier run wrote for the images explained again that this run did
    not write anew (another method or class): the folder then holds this run's files only."""
    images, written = {line["image"] for line in lines}, {line.get("file") for line in lines}
    for record in earlier:
        file = record.get("file")
        path = os.path.join(out, file) if file else ""
        if record["image"] in images and file not in written and outputs.inside(out, path) and os.path.isfile(path):
            os.remove(path)


def _read_images(paths: list[str], spec: ModelSpec, max_pixels: int | None) -> tuple[list[str], np.ndarray, list, list]:
    """``(paths read, inputs [B, H, W, C], original pictures, failures)``; an unreadable image (or
    one of more than ``max_pixels`` pixels) is reported on stderr and skipped."""
    read, inputs, originals, failures = [], [], [], []
    for path in paths:
        try:
            item, original = load_image(path, spec, max_pixels=max_pixels)
        except ImageLoadError as error:  # reported, skipped, exit status 1
            failures.append((path, opt.message(error)))
            print(f"saliency explain: skipped {path}: {error.reason}", file=sys.stderr)
            continue
        read.append(path)
        inputs.append(item)
        originals.append(original)
    return read, np.stack(inputs) if inputs else np.zeros((0,)), originals, failures


def _task_targets(
    model: keras.Model, inputs: np.ndarray, asked: TaskPlan, spec: ModelSpec, sizes: list, batch_size: int
) -> TaskTargets:
    """:func:`saliency_kit.targets.task_targets`, a request that does not fit a usage error."""
    try:
        return task_targets(model, inputs, asked, spec, image_sizes=sizes, batch_size=batch_size)
    except AskError as error:
        raise UsageError(error.as_option) from error


def _write_image(
    args: argparse.Namespace,
    explanations: list,
    found: TaskTargets,
    row: int,
    path: str,
    original: np.ndarray,
    spec: ModelSpec,
    folder: str,
    looks: dict,
) -> tuple[list[str], list]:
    """Write image ``row``'s files (and its grid): ``(the paths written, the Outputs)``."""
    formats = outputs.FORMATS[args.format]
    at, subjects = found.rows.index(row), found.subjects[row]
    results = outputs.per_image(explanations, at, looks, "npz" in formats, subjects=subjects)
    written = outputs.write_image_outputs(
        args.out, folder, original, results, tasks.subject_names(found, spec), formats, input_size=spec.input_size
    )
    files = [os.path.join(args.out, w.file) for w in written]
    files += [os.path.join(args.out, photo) for photo in dict.fromkeys(w.photo for w in written if w.photo)]
    if "png" in formats:
        grid = _write_grid(args, explanations, at, subjects, path, original, spec, folder, looks, found)
        files.append(grid)
    return files, written


class _Row:
    """Row ``row`` of an Explanation as :func:`saliency_kit.render.grid` reads it: the image's own
    subjects, each once (``--target top1 --target circle`` may name the same class twice; the
    padding of a batch is dropped)."""

    def __init__(self, explanation: Explanation, row: int, subjects: list[Subject]):
        first = sorted({(s.index, s.name): k for k, s in reversed(list(enumerate(subjects)))}.values())
        self.method = explanation.method
        self.maps = np.asarray(explanation.maps)[row][first][np.newaxis]
        self.targets = np.array([[subjects[k].index for k in first]])
        self.scores = np.asarray(explanation.scores)[row][first][np.newaxis]
        self.subjects = [subjects[k] for k in first]


def _write_grid(
    args: argparse.Namespace,
    explanations: list,
    row: int,
    subjects: list[Subject],
    path: str,
    original: np.ndarray,
    spec: ModelSpec,
    folder: str,
    looks: dict,
    found: TaskTargets,
) -> str:
    rows = [_Row(e, row, subjects) for e in explanations]
    classes = all(s.kind == "class" for s in subjects)
    signs = {look.sign for look in looks.values()}
    figure = render.grid(
        rows,
        [original],
        tasks.subject_names(found, spec),
        sign=signs.pop() if len(signs) == 1 else "abs",
        cmap=args.cmap,
        clip_percentile=args.clip_percentile,
        alpha=args.alpha,
        row_labels=[os.path.basename(path)],
        score_name="logit" if classes else "score",
        marks=None
        if classes
        else [[outputs.subject_mark(s, tuple(spec.input_size or original.shape[:2])) for s in rows[0].subjects]],
    )
    return render.save_png(figure, os.path.join(args.out, folder, "grid.png"))
