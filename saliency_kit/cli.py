"""The ``saliency`` command: explain images, explain whole folders, list models and methods.

    saliency explain photo.jpg                       # shipped model, guided backprop, top class
    saliency explain a.png b.png --method gradcam --method smoothgrad --target top2 --target star
    saliency batch images/ --out maps/ --shard 0/4 --resume
    saliency models
    saliency methods

Exit status: 0 everything done; 1 some inputs failed (unreadable images, reported and skipped) or
an unexpected error; 2 the command could not start: bad arguments, an unknown model, method or
class, a model whose weights are not available here, an --out folder holding an earlier run.
Errors are one line; ``--debug`` shows the traceback.

Subcommands register themselves with ``set_defaults(handler=fn)``, ``fn(args) -> exit status``.
Other modules add subcommands the same way and reuse :func:`add_model_options` and
:func:`load_model_from_args` (``saliency_kit.sanity`` does). TensorFlow is imported only once a
command runs, so ``saliency --help`` and argument errors are instant.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import warnings
from collections.abc import Sequence

import numpy as np

DEFAULT_MODEL = "shapes"
DEFAULT_METHOD = "guided_backprop"
DEFAULT_TARGET = "top1"
DEFAULT_OUT = "saliency_out"
FORMATS = {"png": ("png",), "npz": ("npz",), "both": ("png", "npz")}

# Which methods each command-line option configures (options of the methods in API.md §2).
_SMOOTHGRAD = ("smoothgrad",)
_CAMS = ("gradcam", "gradcam_plus_plus", "guided_gradcam")
METHOD_OPTIONS = {  # argparse dest -> (explain option name, methods that take it)
    "samples": ("samples", _SMOOTHGRAD),
    "noise": ("noise", _SMOOTHGRAD),
    "seed": ("seed", _SMOOTHGRAD),
    "steps": ("steps", ("integrated_gradients",)),
    "layer": ("layer", _CAMS),
}


class UsageError(Exception):
    """A problem with what was asked (exit status 2), reported as one line."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``saliency explain: error: ...``), exit status 2."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        print(f"{self.prog}: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(2)


# ------------------------------------------------------------------------------ option types
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _noise(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number such as 0.15, got {text!r}") from None
    if not (np.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a noise level >= 0 (a fraction of the input's "
                                         f"range, e.g. 0.15), got {text!r}")
    return value


def _shard(text: str) -> tuple[int, int]:
    from .batch import parse_shard

    try:
        return parse_shard(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--shard ")) from None


# ------------------------------------------------------------------------- shared options
def add_model_options(parser: argparse.ArgumentParser) -> None:
    """--model, --weights, --unsafe, --batch-size (used by every command that runs a model)."""
    group = parser.add_argument_group("model")
    group.add_argument("--model", default=DEFAULT_MODEL, metavar="NAME|PATH",
                       help=f"a model name from 'saliency models' or a .keras/.h5 file (default: {DEFAULT_MODEL})")
    group.add_argument("--weights", default=None, metavar="W",
                       help="'imagenet' (Keras' cache), 'random', or a weights file (default: the model's own)")
    group.add_argument("--unsafe", action="store_true",
                       help="allow a .keras file to run arbitrary code when loaded (only for files you trust)")
    group.add_argument("--batch-size", type=_positive_int, default=32, metavar="N",
                       help="most model evaluations per compiled call, and images per batch (default: 32)")


def load_model_from_args(args) -> tuple:
    """``sk.load_model`` from the options of :func:`add_model_options`; problems -> :class:`UsageError`."""
    import saliency_kit as sk

    kwargs = {"unsafe": True} if getattr(args, "unsafe", False) else {}
    if getattr(args, "weights", None) is not None:
        kwargs["weights"] = args.weights
    try:
        return sk.load_model(args.model, **kwargs)
    except (FileNotFoundError, ValueError, KeyError) as error:
        # WeightsUnavailableError (no cached weights, no network) is a FileNotFoundError whose
        # message already says where the file is expected and what to do.
        raise UsageError(_message(error)) from error


def _add_explain_options(parser: argparse.ArgumentParser) -> None:
    add_model_options(parser)
    group = parser.add_argument_group("what to explain")
    group.add_argument("--method", action="append", metavar="M",
                       help=f"an attribution method from 'saliency methods'; repeat for several "
                            f"(default: {DEFAULT_METHOD})")
    group.add_argument("--target", action="append", metavar="T",
                       help="topK (the K best classes), a class index or a class name; repeat for "
                            f"several (default: {DEFAULT_TARGET})")
    group = parser.add_argument_group("method options (each used only by the methods that take it)")
    group.add_argument("--samples", type=_positive_int, metavar="N", help="smoothgrad: noisy copies (default 50)")
    group.add_argument("--noise", type=_noise, metavar="F",
                       help="smoothgrad: noise sigma as a fraction of the input's range (default 0.15)")
    group.add_argument("--steps", type=_positive_int, metavar="N", help="integrated_gradients: path points (default 50)")
    group.add_argument("--layer", metavar="NAME",
                       help="gradcam, gradcam_plus_plus, guided_gradcam: the layer (default: the model's)")
    group.add_argument("--seed", type=_int, metavar="N", help="smoothgrad: random seed, for repeatable maps")
    group = parser.add_argument_group("output")
    group.add_argument("--format", choices=sorted(FORMATS), default="png",
                       help="png: heatmap and overlay images; npz: arrays (map, attributions, class, "
                            "score); both (default: png)")


def _common(debug_default) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=debug_default,
                        help="show the full traceback of an error")
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="saliency",
        description="Saliency maps for Keras models: explain images, or whole folders of them.",
        epilog="Exit status: 0 all done; 1 some inputs failed; 2 usage error (bad arguments, unknown "
               "model/method/class, model weights not available, --out holding an earlier run).",
        parents=[_common(False)],
    )
    # Subcommands take --debug too, without resetting a --debug given before the subcommand.
    common = _common(argparse.SUPPRESS)
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND", required=True,
                                     parser_class=_Parser)

    explain = commands.add_parser("explain", parents=[common], help="explain one or more images",
                                  description="Explain images: per image, method and class a heatmap "
                                              "and an overlay PNG, plus one grid PNG per image.")
    explain.add_argument("images", nargs="+", metavar="IMAGE", help="image files (PNG, JPEG, ...)")
    _add_explain_options(explain)
    explain.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                         help=f"output folder (default: {DEFAULT_OUT})")
    explain.set_defaults(handler=cmd_explain)

    batch = commands.add_parser(
        "batch", parents=[common], help="explain every image under a folder",
        description="Explain every image under INPUT_DIR (recursively). Outputs mirror the input "
                    "folders under --out; manifest.jsonl gets one line per file written and one "
                    "per unreadable input. Files are written atomically; a killed run can be "
                    "continued with --resume.")
    batch.add_argument("input_dir", metavar="INPUT_DIR")
    batch.add_argument("--out", required=True, metavar="DIR", help="output folder")
    _add_explain_options(batch)
    batch.add_argument("--shard", type=_shard, metavar="I/N",
                       help="take only shard I of N (0 <= I < N): a fixed split by file path, so N "
                            "machines can share a folder; each writes manifest.shard-I-of-N.jsonl")
    batch.add_argument("--resume", action="store_true",
                       help="continue an earlier run into the same --out: skip complete images")
    _add_ray_options(batch)
    batch.set_defaults(handler=cmd_batch)

    models = commands.add_parser("models", parents=[common], help="list the named models")
    models.set_defaults(handler=cmd_models)
    methods = commands.add_parser("methods", parents=[common], help="list the attribution methods")
    methods.set_defaults(handler=cmd_methods)

    if importlib.util.find_spec(f"{__package__}.sanity") is not None:
        from . import sanity

        sanity.add_parser(commands)
    return parser


# ---------------------------------------------------------------------------- entry point
def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _quiet_tensorflow()
    try:
        with warnings.catch_warnings():
            if not args.debug:
                warnings.showwarning = _show_warning(f"saliency {args.command}")
            return int(args.handler(args) or 0)
    except UsageError as error:
        if args.debug:
            raise
        print(f"saliency {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"saliency {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - one line for users, the traceback with --debug
        if args.debug:
            raise
        print(f"saliency {args.command}: error: {type(error).__name__}: {_message(error)} "
              f"(run with --debug for the traceback)", file=sys.stderr)
        return 1


def _show_warning(prefix: str):
    """Warnings as one line each (``saliency batch: warning: ...``), without source lines, and
    each kind once: a batch run would otherwise repeat the same warning for every batch."""
    seen = set()

    def show(message, category, filename, lineno, file=None, line=None):
        text = " ".join(str(message).split())
        kind = (category, re.sub(r"\d+", "#", text))
        if kind not in seen:
            seen.add(kind)
            print(f"{prefix}: warning: {text}", file=file or sys.stderr)

    return show


def _quiet_tensorflow() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("MPLBACKEND", "Agg")


def _message(error: BaseException) -> str:
    text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    return " ".join(str(text).split()) or type(error).__name__


# ------------------------------------------------------------------------- methods, targets
def _method_names() -> list[str]:
    from .methods import describe

    return [name for name, _ in describe()]


def method_plan(args) -> list[tuple[str, dict]]:
    """``[(method, explain options)]`` from --method and the method options; unknown methods and
    options that no chosen method takes are usage errors."""
    methods = list(dict.fromkeys(args.method or [DEFAULT_METHOD]))
    known = _method_names()
    for name in methods:
        if name not in known:
            raise UsageError(f"unknown method {name!r}; choose from: {', '.join(known)}")
    plan = []
    for name in methods:
        options = {}
        for dest, (option, takers) in METHOD_OPTIONS.items():
            value = getattr(args, dest, None)
            if value is not None and name in takers:
                options[option] = value
        plan.append((name, options))
    for dest, (_, takers) in METHOD_OPTIONS.items():
        if getattr(args, dest, None) is not None and not set(takers) & set(methods):
            raise UsageError(f"--{dest} only applies to {', '.join(takers)}, which is not among the "
                             f"chosen methods ({', '.join(methods)})")
    return plan


def parse_targets(texts: Sequence[str] | None, class_names, n_classes: int) -> list[tuple[str, int]]:
    """--target values -> ``[("top", K) | ("class", index)]``; bad values are usage errors."""
    specs = []
    lowered = {str(name).lower(): i for i, name in enumerate(class_names or [])}
    for text in texts or [DEFAULT_TARGET]:
        match = re.fullmatch(r"top(\d+)", text.strip(), flags=re.IGNORECASE)
        if match:
            k = int(match[1])
            if not 1 <= k <= n_classes:
                raise UsageError(f"--target {text}: the model has {n_classes} classes; use top1 ... top{n_classes}")
            specs.append(("top", k))
        elif re.fullmatch(r"-?\d+", text.strip()):
            index = int(text)
            if not 0 <= index < n_classes:
                raise UsageError(f"--target {text}: class index out of range; the model has classes 0 ... {n_classes - 1}")
            specs.append(("class", index))
        elif class_names and text in class_names:
            specs.append(("class", list(class_names).index(text)))
        elif text.strip().lower() in lowered:
            specs.append(("class", lowered[text.strip().lower()]))
        else:
            sample = ", ".join(map(str, list(class_names or [])[:8]))
            more = ", ..." if class_names and len(class_names) > 8 else ""
            known = f"the classes are {sample}{more}" if class_names else "this model has no class names"
            raise UsageError(f"--target {text!r}: not topK, a class index or a class name ({known})")
    return specs


def targets_array(specs, scores: np.ndarray) -> np.ndarray:
    """int ``[B, K]``: for each input the classes its target specs name (topK from ``scores``)."""
    order = np.argsort(-scores, axis=-1, kind="stable")
    columns = []
    for kind, value in specs:
        if kind == "top":
            columns.append(order[:, :value])
        else:
            columns.append(np.full((scores.shape[0], 1), value))
    return np.concatenate(columns, axis=1).astype(np.int64)


def targets_argument(specs, model, batch_size: int):
    """A ``targets_for(inputs)`` function: the plain ``"topK"`` / int when one spec says it all
    (no extra forward pass), else an explicit ``[B, K]`` array from the model's outputs."""
    if len(specs) == 1:
        kind, value = specs[0]
        return lambda inputs: f"top{value}" if kind == "top" else value
    if all(kind == "class" for kind, _ in specs):
        return lambda inputs: np.tile(np.array([[v for _, v in specs]]), (len(inputs), 1))
    return lambda inputs: targets_array(specs, predict(model, inputs, batch_size))


def explain_or_usage_error(model, inputs, method: str, targets, batch_size: int, options: dict):
    """``sk.explain``; its ValueErrors (raised before any work: a --layer the model lacks, a method
    the model cannot support) are usage errors of the command."""
    import saliency_kit as sk

    try:
        return sk.explain(model, inputs, method, targets, batch_size=batch_size, **options)
    except ValueError as error:
        raise UsageError(f"{method}: {_message(error)}") from error


def predict(model, inputs: np.ndarray, batch_size: int) -> np.ndarray:
    """The model's outputs ``[B, classes]`` as NumPy, in batches of ``batch_size``."""
    outputs = [np.asarray(model(inputs[i:i + batch_size], training=False))
               for i in range(0, len(inputs), batch_size)]
    return np.concatenate(outputs).reshape(len(inputs), -1)


def _n_classes(model, spec) -> int:
    names = getattr(spec, "class_names", None)
    if names:
        return len(names)
    shape = model.output_shape
    return int(shape[-1])


def _formats(args) -> tuple[str, ...]:
    return FORMATS[args.format]


# -------------------------------------------------------------------------------- explain
def cmd_explain(args) -> int:
    from . import batch as outputs
    from . import render

    missing = [path for path in args.images if not os.path.isfile(path)]
    if missing:
        raise UsageError(f"no such file: {missing[0]}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    model, spec = load_model_from_args(args)
    plan = method_plan(args)
    n_classes = _n_classes(model, spec)
    specs = parse_targets(args.target, spec.class_names, n_classes)
    formats = _formats(args)

    from .images import load_image

    paths, inputs, originals, failures = [], [], [], []
    for path in args.images:
        try:
            item, original = load_image(path, spec)
        except Exception as error:  # noqa: BLE001 - reported, skipped, exit status 1
            message = _message(error)
            failures.append((path, message))
            print(f"skipped: {message}" if path in message else f"skipped {path}: {message}", file=sys.stderr)
            continue
        paths.append(path)
        inputs.append(item)
        originals.append(original)
    if not paths:
        print(f"saliency explain: none of the {len(args.images)} images could be read", file=sys.stderr)
        return 1

    batch = np.stack(inputs)
    outputs_now = predict(model, batch, args.batch_size)
    probabilities = _looks_like_probabilities(outputs_now)
    targets = targets_array(specs, outputs_now)
    explanations = [(name, explain_or_usage_error(model, batch, name, targets, args.batch_size, options))
                    for name, options in plan]

    folders = _explain_folders(paths)
    for row, path in enumerate(paths):
        print(f"{path}: " + _top_line(outputs_now[row], spec.class_names, probabilities))
        per_method = [(name, e.maps[row], e.targets[row], e.scores[row],
                       e.attributions[row] if "npz" in formats else None) for name, e in explanations]
        written = outputs.write_image_outputs(args.out, folders[path], originals[row], per_method,
                                              spec.class_names, formats)
        files = [os.path.join(args.out, w.file) for w in written]
        if "png" in formats:
            figure = render.grid([_rows(e, row) for _, e in explanations], [originals[row]],
                                 spec.class_names, row_labels=[os.path.basename(path)], score_name="logit")
            files.append(render.save_png(figure, os.path.join(args.out, folders[path], "grid.png")))
        for file in files:
            print(f"  wrote {file}")
    if failures:
        print(f"saliency explain: {len(failures)} of {len(args.images)} images could not be read", file=sys.stderr)
        return 1
    return 0


def _explain_folders(paths: Sequence[str]) -> dict[str, str]:
    """One output folder per image, named after the file (``cat.jpg`` -> ``cat``; repeats -> ``cat-2``)."""
    from .batch import safe_name

    folders, used = {}, set()
    for path in paths:
        stem = safe_name(os.path.splitext(os.path.basename(path))[0], limit=100)
        name, n = stem, 1
        while name in used:
            n += 1
            name = f"{stem}-{n}"
        used.add(name)
        folders[path] = name
    return folders


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


def _rows(explanation, row: int) -> _Row:
    return _Row(explanation, row)


def _looks_like_probabilities(outputs: np.ndarray) -> bool:
    return bool(outputs.size and outputs.min() >= 0 and outputs.max() <= 1
                and np.allclose(outputs.sum(axis=-1), 1.0, atol=1e-3))


def _top_line(outputs: np.ndarray, class_names, probabilities: bool, k: int = 5) -> str:
    from .batch import class_name_of

    order = np.argsort(-outputs, kind="stable")[: min(k, outputs.size)]
    label = "top predictions" if probabilities else "top scores"
    return f"{label}: " + ", ".join(f"{class_name_of(class_names, int(i))} {outputs[i]:.3f}" for i in order)


# -------------------------------------------------------------------------------- batch
def cmd_batch(args) -> int:
    from . import batch

    _check_ray_args(args)
    if not os.path.isdir(args.input_dir):
        raise UsageError(f"INPUT_DIR {args.input_dir!r} is not a folder")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out!r} exists and is not a folder")
    everything = batch.discover_images(args.input_dir, exclude=[args.out])
    if not everything:
        raise UsageError(f"no images under {args.input_dir!r} (looked for {', '.join(sorted(batch.IMAGE_EXTENSIONS))})")
    folders = batch.output_dirs(everything)
    mine = batch.select_shard(everything, *args.shard) if args.shard else everything
    manifest = batch.Manifest(os.path.join(args.out, batch.manifest_name(args.shard)))

    records = manifest.read()
    if not args.resume:
        existing = [p for p in mine if os.path.isdir(os.path.join(args.out, folders[p]))]
        if os.path.exists(manifest.path) or existing:
            what = os.path.basename(manifest.path) if os.path.exists(manifest.path) else \
                f"{len(existing)} output folder(s) such as {folders[existing[0]]!r}"
            raise UsageError(f"--out {args.out!r} already holds an earlier run ({what}); add --resume "
                             f"to continue it, or choose another --out")

    model, spec = load_model_from_args(args)
    plan = method_plan(args)
    specs = parse_targets(args.target, spec.class_names, _n_classes(model, spec))
    os.makedirs(args.out, exist_ok=True)

    _check_settings(args, plan, os.path.join(args.out, "settings.json"))
    skip = batch.complete_images(records, args.out) if args.resume else set()
    skip &= set(mine)
    shard = f" (shard {args.shard[0]}/{args.shard[1]} of {len(everything)})" if args.shard else ""
    print(f"saliency batch: {len(mine)} images{shard} under {args.input_dir}"
          + (f", {len(skip)} already complete" if skip else ""), file=sys.stderr, flush=True)

    if args.ray is not None:
        summary = _run_ray(args, mine, folders, plan, specs, manifest, skip, records)
    else:
        summary = batch.run(
            input_dir=args.input_dir, out_dir=args.out, relative_paths=mine, folders=folders,
            model=model, spec=spec, methods=plan,
            targets_for=targets_argument(specs, model, args.batch_size), explain=explain_or_usage_error,
            batch_size=args.batch_size, formats=_formats(args), manifest=manifest, skip=skip,
            recorded=batch.recorded_keys(records),
        )
    rate = summary.explained / summary.seconds if summary.seconds > 0 else 0.0
    print(f"saliency batch: {summary.explained} images explained, {summary.skipped} already complete, "
          f"{len(summary.failures)} failed; {summary.files} files written in {summary.seconds:.1f} s "
          f"({rate:.1f} images/s); manifest: {manifest.path}")
    for path, message in summary.failures[:20]:
        print(f"  failed: {message}" if path in message else f"  failed: {path}: {message}")
    if len(summary.failures) > 20:
        print(f"  ... and {len(summary.failures) - 20} more (see the manifest)")
    return 1 if summary.failures else 0


# ------------------------------------------------------------------- batch --ray (Ray Data)
def _add_ray_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Ray (needs the extra: pip install \"saliency_kit[ray]\")")
    group.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                       help="compute on Ray Data actors: no ADDRESS starts a local Ray instance (all "
                            "cores); 'auto' or ray://HOST:PORT joins a cluster (--out must be shared)")
    group.add_argument("--workers", type=_positive_int, metavar="N",
                       help="--ray: actors, each loading the model once (default: one per CPU, or per "
                            "--gpus-per-worker GPUs)")
    group.add_argument("--gpus-per-worker", type=_gpus, default=0, metavar="G",
                       help="--ray: GPUs Ray gives each actor (default 0)")
    group.add_argument("--batch-images", type=_positive_int, metavar="N",
                       help="--ray: images per actor call (default: --batch-size, the local run's batches)")


def _gpus(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of GPUs such as 1 or 0.5, got {text!r}") from None
    if not (np.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a number of GPUs >= 0, got {text!r}")
    return value


def _check_ray_args(args) -> None:
    """--workers, --gpus-per-worker and --batch-images only with --ray; Ray Data installed."""
    if args.ray is None:
        given = [flag for flag, value in (("--workers", args.workers), ("--batch-images", args.batch_images),
                                           ("--gpus-per-worker", args.gpus_per_worker or None)) if value is not None]
        if given:
            raise UsageError(f"{given[0]} only applies with --ray")
        return
    from .ray_runner import RayUnavailable, import_ray

    try:
        import_ray()
    except RayUnavailable as error:
        raise UsageError(str(error)) from None
    if args.ray and not re.fullmatch(r"auto|ray://\S+|[\w.-]+:\d+", args.ray):
        raise UsageError(f"--ray ADDRESS must be auto, ray://HOST:PORT or HOST:PORT (or nothing, for a "
                         f"local Ray instance); received {args.ray!r}")


def _run_ray(args, mine, folders, plan, specs, manifest, skip, records):
    import functools

    from . import batch, ray_runner

    try:
        return ray_runner.run(
            input_dir=args.input_dir, out_dir=args.out, relative_paths=mine, folders=folders,
            model=ray_runner.ModelSource.from_args(args.model, args.weights, args.unsafe), methods=plan,
            targets_for_model=functools.partial(_targets_for_model, specs, args.batch_size),
            explain=explain_or_usage_error, batch_size=args.batch_size, formats=_formats(args),
            manifest=manifest, skip=skip, recorded=batch.recorded_keys(records),
            address=args.ray or None, workers=args.workers, gpus_per_worker=args.gpus_per_worker,
            batch_images=args.batch_images)
    except ray_runner.OutputNotShared as error:
        raise UsageError(str(error)) from None


def _targets_for_model(specs, batch_size: int, model):
    return targets_argument(specs, model, batch_size)


def _check_settings(args, plan, path: str) -> None:
    """Record what a batch run computes in ``settings.json``; a later run (``--resume``, or another
    shard into the same --out) with different settings is refused rather than mixed in."""
    import json

    from .render import atomic_path

    settings = {"model": args.model, "weights": args.weights,
                "methods": [[name, options] for name, options in plan],
                "targets": list(args.target or [DEFAULT_TARGET]), "format": args.format}
    settings = json.loads(json.dumps(settings))  # the form it has once read back
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            try:
                before = json.load(handle)
            except ValueError:
                before = None
        if before is not None and before != settings:
            changed = ", ".join(k for k in settings if before.get(k) != settings[k])
            raise UsageError(f"--out {args.out!r} holds results made with other settings ({changed} "
                             f"differ, see {path}); use the same options, or another --out")
        if before is not None:
            return
    with atomic_path(path) as temp:
        with open(temp, "w", encoding="utf-8") as handle:
            json.dump(settings, handle, indent=1)


# ------------------------------------------------------------------------- models, methods
def cmd_models(args) -> int:
    import saliency_kit as sk
    from . import zoo

    names = [str(name) for name in sk.list_models()]
    width = max((len(name) for name in names), default=0)
    for name in names:
        try:
            description = getattr(zoo.get_spec(name), "description", "") or ""
        except Exception:  # noqa: BLE001 - a broken config still gets listed, by name
            description = ""
        print(f"{name:<{width}}  {description}".rstrip())
    return 0


def cmd_methods(args) -> int:
    from .methods import describe

    entries = describe()
    width = max(len(name) for name, _ in entries)
    for name, summary in entries:
        print(f"{name:<{width}}  {summary}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
