"""``saliency explain IMAGE...``: explain a few images; per image, method and class a heatmap and an
overlay PNG (and/or an NPZ), one grid PNG per image, and ``manifest.jsonl`` in --out listing them
as ``saliency batch`` does."""

from __future__ import annotations

import os
import sys

import numpy as np

from ..batch import gallery, outputs
from . import options as opt
from .options import UsageError

__all__ = ["add_parser", "add_explain_options", "task_plan", "check_before_loading", "with_model_defaults", "run"]


def add_parser(subcommands, common) -> None:
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


def add_explain_options(parser) -> None:
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


def task_plan(args, spec, model=None):
    """The checked plan of a segmentation model, a detector or an output head (:mod:`.tasks`), or
    ``None`` for a classifier's class targets. With the ``model``: one with several outputs needs
    ``--output``."""
    from . import tasks

    if model is not None and args.output is None and len(getattr(model, "outputs", None) or []) > 1:
        names = ", ".join(map(str, getattr(model, "output_names", None) or range(len(model.outputs))))
        raise UsageError(f"model {spec.name!r} has several outputs ({names}); pick one with --output NAME.")
    if spec.task == "classification" and args.output is None:
        if args.boxes is not None or any("@" in text for text in args.target or []):
            tasks.parse(args.target, args.boxes, None, spec)  # the usage error these get on a classifier
        return None
    return tasks.parse(args.target, args.boxes, args.output, spec)


def check_before_loading(args):
    """What can be checked without TensorFlow: methods and their options, and the targets when
    the model's config names its classes. Returns ``(plan, spec or None)``."""
    plan = opt.method_plan(args)
    spec = opt.model_spec(args)
    if spec is not None and (
        spec.task != "classification"
        or args.output is not None
        or args.boxes is not None
        or any("@" in text for text in args.target or [])
    ):
        task_plan(args, spec)
    elif spec is not None and spec.class_names:
        opt.parse_targets(args.target, spec.class_names, len(spec.class_names), debug=args.debug)
    return plan, spec


def with_model_defaults(plan, spec) -> list[tuple[str, dict]]:
    """The model's configured Grad-CAM layer as the default ``layer`` of the methods that take one."""
    from .. import methods

    completed = []
    for name, options in plan:
        if "layer" in methods.get(name).accepted(options) and options.get("layer") is None and spec.gradcam_layer:
            options = {**options, "layer": spec.gradcam_layer}
        completed.append((name, options))
    return completed


def run(args) -> int:
    missing = [path for path in args.images if not os.path.isfile(path)]
    if missing:
        raise UsageError(
            f"no such file: {missing[0]}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        )
    plan, _ = check_before_loading(args)
    formats = outputs.FORMATS[args.format]
    looks = opt.looks(args, plan)

    model, spec = opt.load_model_from_args(args)
    print(opt.describe_model(args, model, spec), flush=True)
    tasks_plan = task_plan(args, spec, model)
    if tasks_plan is None:
        target_spec = opt.parse_targets(args.target, spec.class_names, len(spec.class_names), debug=args.debug)
    plan = with_model_defaults(plan, spec)

    from ..images import ImageLoadError, load_image

    paths, inputs, originals, failures = [], [], [], []
    for path in args.images:
        try:
            item, original = load_image(path, spec)
        except ImageLoadError as error:  # reported, skipped, exit status 1
            failures.append((path, opt.message(error)))
            print(f"saliency explain: skipped {path}: {error.reason}", file=sys.stderr)
            continue
        paths.append(path)
        inputs.append(item)
        originals.append(original)
    if not paths:
        print(f"saliency explain: none of the {len(args.images)} images could be read", file=sys.stderr)
        return 1
    for note in opt.model_notes(args, spec, model, [o.shape[:2] for o in originals]):
        print(note, file=sys.stderr)
    opt.preflight(model, spec, np.stack(inputs[:1]), plan, args.batch_size)

    if tasks_plan is not None:
        return _run_task(
            args, model, spec, tasks_plan, plan, looks, formats, paths, np.stack(inputs), originals, failures
        )

    from ..api import explain

    batch = np.stack(inputs)
    logits = opt.model_scores(model, batch, args.batch_size)
    targets = _resolve(target_spec, logits)  # the logits ``sk.explain`` ranks topK by
    explanations = [
        explain(model, batch, name, targets, batch_size=args.batch_size, **options) for name, options in plan
    ]
    shown, label = _shown_scores(model, batch, logits, args.batch_size)

    folders = outputs.explain_dirs(paths)
    manifest = outputs.Manifest(os.path.join(args.out, outputs.MANIFEST))
    lines = []
    for row, path in enumerate(paths):
        print(f"{path}: {label}: " + _top(shown[row], spec.class_names))
        results = outputs.per_image(explanations, row, looks, "npz" in formats)
        written = outputs.write_image_outputs(
            args.out, folders[path], originals[row], results, spec.class_names, formats
        )
        lines += outputs.manifest_lines(path, written)
        files = [os.path.join(args.out, w.file) for w in written]
        if "png" in formats:
            files.append(_write_grid(args, explanations, row, path, originals[row], spec, folders[path], looks))
        for file in files:
            print(f"  wrote {file}")
    manifest.replace_images(lines + [outputs.failure_line(path, error) for path, error in failures])
    gallery.write_gallery(args.out)
    print(f"  wrote {os.path.join(args.out, 'index.html')}")
    if failures:
        print(f"saliency explain: {len(failures)} of {len(args.images)} images could not be read", file=sys.stderr)
        return 1
    return 0


def _resolve(spec, scores):
    from ..targets import resolve

    return resolve(spec, scores)


def _shown_scores(model, batch, logits, batch_size) -> tuple[np.ndarray, str]:
    """What the header lists: the model's probabilities when its outputs are a softmax, otherwise
    the logits the maps explain -- and words that say which."""
    values = opt.model_scores(model, batch, batch_size, score="output")
    if values.size and values.min() >= 0 and values.max() <= 1 and np.allclose(values.sum(axis=-1), 1.0, atol=1e-3):
        return values, "top probabilities"
    return logits, "top scores (logits)"


def _top(values: np.ndarray, class_names, k: int = 5) -> str:
    order = np.argsort(-values, kind="stable")[: min(k, values.size)]
    return ", ".join(f"{outputs.class_name_of(class_names, int(i))} {values[i]:.3f}" for i in order)


class _Row:
    """Row ``row`` of an Explanation as :func:`saliency_kit.render.grid` reads it, each class once
    (``--target top1 --target circle`` may name the same class twice)."""

    def __init__(self, explanation, row: int):
        targets = np.asarray(explanation.targets[row])
        first = sorted({int(t): k for k, t in reversed(list(enumerate(targets.tolist())))}.values())
        self.method = explanation.method
        self.maps = np.asarray(explanation.maps[row])[first][np.newaxis]
        self.targets = targets[first][np.newaxis]
        self.scores = np.asarray(explanation.scores[row])[first][np.newaxis]


def _write_grid(args, explanations, row, path, original, spec, folder, looks) -> str:
    from .. import render

    signs = {look.sign for look in looks.values()}
    figure = render.grid(
        [_Row(e, row) for e in explanations],
        [original],
        spec.class_names,
        sign=signs.pop() if len(signs) == 1 else "abs",
        cmap=args.cmap,
        clip_percentile=args.clip_percentile,
        alpha=args.alpha,
        row_labels=[os.path.basename(path)],
        score_name="logit",
    )
    return render.save_png(figure, os.path.join(args.out, folder, "grid.png"))


def _run_task(args, model, spec, tasks_plan, plan, looks, formats, paths, batch, originals, failures) -> int:
    """``run`` for a segmentation model, a detector or an output head: each image's questions
    (:mod:`.tasks`) from one forward pass, the images that ask something explained together."""
    from ..api import explain
    from . import tasks

    raw = tasks.forward(model, batch, args.batch_size, tasks_plan)
    asked = tasks.questions(tasks_plan, spec, raw, [o.shape[:2] for o in originals])
    rows = [row for row, q in enumerate(asked) if q]
    explanations = []
    if rows:
        targets, _ = tasks.build_targets([asked[row] for row in rows])
        explanations = [
            explain(model, batch[rows], name, targets, batch_size=args.batch_size, **options) for name, options in plan
        ]
    folders = outputs.explain_dirs(paths)
    manifest = outputs.Manifest(os.path.join(args.out, outputs.MANIFEST))
    lines = []
    for row, path in enumerate(paths):
        print(f"{path}: " + tasks.describe(tasks_plan, spec, raw[row], asked[row]))
        if row not in rows:
            lines.append(outputs.nothing_line(path))
            continue
        at = rows.index(row)
        results = outputs.per_image(explanations, at, looks, "npz" in formats, subjects=asked[row])
        written = outputs.write_image_outputs(
            args.out, folders[path], originals[row], results, spec.class_names, formats, input_size=spec.input_size
        )
        lines += outputs.manifest_lines(path, written)
        files = [os.path.join(args.out, w.file) for w in written]
        if "png" in formats:
            files.append(
                _write_task_grid(args, explanations, at, asked[row], path, originals[row], spec, folders[path], looks)
            )
        for file in files:
            print(f"  wrote {file}")
    manifest.replace_images(lines + [outputs.failure_line(path, error) for path, error in failures])
    gallery.write_gallery(args.out)
    print(f"  wrote {os.path.join(args.out, 'index.html')}")
    if failures:
        print(
            f"saliency explain: {len(failures)} of {len(paths) + len(failures)} images could not be read",
            file=sys.stderr,
        )
        return 1
    return 0


class _TaskRow:
    """Row ``row`` of an Explanation restricted to the image's own questions (padding dropped)."""

    def __init__(self, explanation, row: int, questions):
        k = len(questions)
        self.method = explanation.method
        self.maps = np.asarray(explanation.maps[row])[:k][np.newaxis]
        self.targets = np.array([[q.index for q in questions]])
        self.scores = np.asarray(explanation.scores[row])[:k][np.newaxis]


def _write_task_grid(args, explanations, row, questions, path, original, spec, folder, looks) -> str:
    from .. import render

    signs = {look.sign for look in looks.values()}
    figure = render.grid(
        [_TaskRow(e, row, questions) for e in explanations],
        [original],
        spec.class_names,
        sign=signs.pop() if len(signs) == 1 else "abs",
        cmap=args.cmap,
        clip_percentile=args.clip_percentile,
        alpha=args.alpha,
        row_labels=[os.path.basename(path)],
        score_name="score",
        marks=[[q.mark(spec.input_size) for q in questions]],
    )
    return render.save_png(figure, os.path.join(args.out, folder, "grid.png"))
