"""Options shared by the subcommands: the model, what to explain (methods, their options, targets),
how maps are drawn, and the error every problem with them becomes (:class:`UsageError`).

Every option a method declares (:mod:`saliency_kit.methods`) is a flag: option ``x_y`` is
``--x-y``, typed from the declaration, and one flag serves every method declaring that option.
Reading the declarations imports neither TensorFlow nor Keras, so building the parser and
checking methods, their options and (for named models) class names is instant.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import methods as method_registry
from .. import zoo
from ..batch.outputs import FORMATS, SIGNS, Look
from ..keras_backend import require_tensorflow
from ..targets import combine, parse_string
from ..zoo import load_model
from .startup import BackendError, import_tensorflow

if TYPE_CHECKING:
    import keras

    from ..targets import TargetSpec
    from ..zoo import ModelSpec

DEFAULT_MODEL = "shapes"
DEFAULT_METHOD = "guided_backprop"
DEFAULT_TARGET = "top1"
DEFAULT_OUT = "saliency_out"
#: The methods that change the backward pass of ReLU-family activations (on a model without any,
#: their maps would be the plain gradient, which they refuse).
RELU_RULE_METHODS = ("guided_backprop", "deconvnet", "guided_gradcam")
#: Array options the command line reads from a file: ``--NAME PATH``, a ``.npy`` file of model
#: inputs ``[N, H, W, C]`` (already preprocessed) or a folder of images (read like the images
#: explained: resized, preprocessed).
FILE_OPTIONS = ("baselines",)
#: Array options the command line cannot fill (no flag; the method's default is used).
PYTHON_ONLY_OPTIONS = {"segments": "XRAI's own Felzenszwalb segments are used"}
OPTION_DEST = "method_option_"  # argparse dest prefix of a method option's flag


class UsageError(Exception):
    """A problem with what was asked (exit status 2), reported as one line."""


def message(error: BaseException) -> str:
    """An exception's message on one line (a KeyError without its quotes), any NumPy array in it
    shown as ``array(...)``: an error line never prints an array's values."""
    text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    return without_arrays(" ".join(str(text).split())) or type(error).__name__


def without_arrays(text: str) -> str:
    """``text`` with the contents of every ``array(...)`` (a NumPy repr) elided."""
    parts, start = [], 0
    while (at := text.find("array(", start)) >= 0:
        depth, end = 0, at + len("array")
        while end < len(text):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
            if depth == 0:
                break
        parts.append(text[start:at] + "array(...)")
        start = end
    return "".join(parts) + text[start:]


def did_you_mean(name: str, known: Sequence[str], *, n: int = 3) -> str:
    """`` (did you mean 'a', 'b'?)`` with the closest few of ``known`` (case-insensitive), or ``""``."""
    lowered = {str(k).lower(): str(k) for k in known}
    close = difflib.get_close_matches(str(name).lower(), list(lowered), n=n, cutoff=0.6)
    return f" (did you mean {', '.join(repr(lowered[c]) for c in close)}?)" if close else ""


# ------------------------------------------------------------------------------ value types
def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number; received {text!r}.") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number; received {text!r}.")
    return value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number; received {text!r}.") from None


def _real(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number such as 0.5; received {text!r}.") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number; received {text!r}.")
    return value


def _fraction(text: str) -> float:
    value = _real(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1; received {text!r}.")
    return value


def _percentile(text: str) -> float:
    value = _real(text)
    if not 0 < value <= 100:
        raise argparse.ArgumentTypeError(f"expected a percentile in (0, 100]; received {text!r}.")
    return value


def _colormap(text: str) -> str:
    from matplotlib import colormaps  # no TensorFlow; matplotlib's registry only

    if text not in colormaps:
        hint = did_you_mean(text, list(colormaps))
        raise argparse.ArgumentTypeError(f"not a matplotlib colormap{hint}; received {text!r}.")
    return text


_FLAG_TYPES: dict[type, Callable[[str], Any]] = {int: _whole, float: _real, str: str}


# ------------------------------------------------------------------------------ the model
def add_model_options(parser: argparse.ArgumentParser) -> None:
    """--model, --weights, --unsafe, --batch-size (used by every command that runs a model)."""
    group = parser.add_argument_group("model")
    group.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        metavar="NAME|PATH",
        help=f"a model name from 'saliency models', a .toml config or a .keras/.h5 file "
        f"(default: {DEFAULT_MODEL}, a small network trained on 64x64 shapes)",
    )
    group.add_argument(
        "--weights",
        default=None,
        metavar="W",
        help="'imagenet' (Keras' cache), 'random', or a weights file (default: the model's own)",
    )
    group.add_argument(
        "--unsafe",
        action="store_true",
        help="allow a .keras file to run arbitrary code when loaded (only for files you trust)",
    )
    group.add_argument(
        "--batch-size",
        type=positive_int,
        default=32,
        metavar="N",
        help="most model evaluations per compiled call, and images per batch (default: 32)",
    )


def model_spec(args: argparse.Namespace) -> ModelSpec:
    """The model's spec from its config alone (no TensorFlow); for a model file, from its sidecar
    config if any (without one, ``class_names`` and ``input_size`` are still ``None``: loading the
    model completes them). Problems -> :class:`UsageError`."""
    path = str(args.model)
    try:
        if path.lower().endswith(zoo.MODEL_SUFFIXES):
            if not os.path.isfile(path):
                raise FileNotFoundError(f"model file {path} does not exist")
            return zoo.sidecar_spec(path)
        return zoo.get_spec(path)
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(message(error)) from error


def start_tensorflow(debug: bool) -> None:
    """Import TensorFlow quietly (see :mod:`.startup`); another Keras backend is a usage error."""
    try:
        import_tensorflow(debug)
    except BackendError as error:
        raise UsageError(message(error)) from error


def load_model_from_args(args: argparse.Namespace) -> tuple[keras.Model, Any]:
    """``sk.load_model`` from the options of :func:`add_model_options`, TensorFlow started quietly
    (:mod:`.startup`): the model and its ``ModelSpec``, completed (its class names and input size
    set); problems -> :class:`UsageError`."""
    start_tensorflow(getattr(args, "debug", False))

    require_tensorflow()

    kwargs = {"unsafe": True} if getattr(args, "unsafe", False) else {}
    if getattr(args, "weights", None) is not None:
        kwargs["weights"] = args.weights
    try:
        model, spec = load_model(args.model, **kwargs)
    except (FileNotFoundError, ValueError, KeyError) as error:
        # WeightsUnavailableError (no cached weights, no network) is a FileNotFoundError whose
        # message already says where the file is expected and what to do.
        raise UsageError(message(error)) from error
    check_task(str(args.model), model, spec)
    return model, spec


def check_task(path: str, model: keras.Model, spec: ModelSpec) -> None:
    """A model read as a classifier (no ``task`` in its config) whose one output is a map per pixel
    ``[B, H', W', C]`` is a usage error naming the config line it lacks and where that goes."""
    shape = getattr(model, "output_shape", None)
    if spec.task != "classification" or not isinstance(shape, tuple) or len(shape) != 4:
        return
    where = (
        f"write a sidecar config {path}.toml next to it holding"
        if path.lower().endswith(zoo.MODEL_SUFFIXES)
        else f"add to its config {spec.source}"
    )
    size = "x".join(str(s) for s in shape[1:])
    raise UsageError(
        f"model {spec.name!r} outputs a {size} map per pixel, not class scores; if it is a "
        f'segmentation model, {where} the line: task = "segmentation"'
    )


def describe_model(args: argparse.Namespace, model: keras.Model, spec: ModelSpec) -> str:
    """The first line of a command's output: which model explains, and what its scores are."""
    where = f" ({args.model})" if str(args.model) != spec.name else ""
    weights = f", weights {args.weights}" if args.weights else ""
    size = "x".join(map(str, spec.input_size or ()))
    heads = getattr(model, "outputs", None) or []
    if len(heads) > 1:
        names = getattr(model, "output_names", None) or [str(i) for i in range(len(heads))]
        shapes = ["x".join(str(s) for s in head.shape[1:]) for head in heads]
        listed = ", ".join(f"{name} ({shape})" for name, shape in zip(names, shapes))
        return f"model: {spec.name}{where}{weights}; input {size}; {len(heads)} outputs: {listed}"
    return f"model: {spec.name}{where}{weights}; input {size}; {len(spec.class_names or [])} classes"


def model_notes(
    args: argparse.Namespace, spec: ModelSpec, model: keras.Model, image_sizes: Sequence[tuple[int, int]]
) -> list[str]:
    """One-line notes about silent defaults that may not be what the user wants."""
    notes = []
    input_size = tuple(spec.input_size or ())
    if str(args.model) == DEFAULT_MODEL and any(tuple(size) != input_size for size in image_sizes):
        notes.append(
            f"note: the default model '{DEFAULT_MODEL}' knows only {input_size[0]}x"
            f"{input_size[1]} pictures of five shapes; --model picks a real network "
            f"(see 'saliency models')"
        )
    path = str(args.model)

    if (
        path.lower().endswith(zoo.MODEL_SUFFIXES)
        and not os.path.isfile(path + ".toml")
        and len(spec.class_names or []) == 1000
    ):
        notes.append(
            f"note: {os.path.basename(path)} has 1,000 outputs and no sidecar config, so its "
            f"classes are shown as numbers; if it is an ImageNet model, write {path}.toml with "
            f'classes = "package:imagenet_classes.txt"'
        )
    return notes


# ------------------------------------------------------------------------- methods, options
def option_flags() -> dict[str, tuple]:
    """``{option name: (Option, [methods declaring it])}`` over every registered method."""
    flags: dict[str, tuple] = {}
    for name in method_registry.names():
        for option in method_registry.get(name).options:
            flags.setdefault(option.name, (option, []))[1].append(name)
    return flags


def add_method_options(parser: argparse.ArgumentParser) -> None:
    """--method, and one flag per declared method option."""
    group = parser.add_argument_group("what to explain")
    group.add_argument(
        "--method",
        action="append",
        metavar="M",
        help=f"an attribution method from 'saliency methods'; repeat for several (default: {DEFAULT_METHOD})",
    )
    group.add_argument(
        "--target",
        action="append",
        metavar="T",
        help="topK (the K best classes, any case), a class index or a class name "
        f"(any case); repeat for several (default: {DEFAULT_TARGET})",
    )
    group = parser.add_argument_group("method options (each used only by the methods that take it)")
    for name, (option, takers) in option_flags().items():
        if name in PYTHON_ONLY_OPTIONS:
            continue
        text = f"{', '.join(takers)}: {option.help or name.replace('_', ' ')}{_range_text(name, takers)}"
        if name in FILE_OPTIONS:
            text = (
                f"{', '.join(takers)}: {option.help or name}: a .npy file of model inputs [N, H, W, C] "
                "(preprocessed), or a folder of images (read like the images explained)"
            )
            group.add_argument(option.flag, metavar="PATH", dest=OPTION_DEST + name, default=None, help=text)
            continue
        if "default" not in text:
            text += f" (default: {'chosen by the method' if option.default is None else repr(option.default)})"
        dest, helped = OPTION_DEST + name, text.replace("%", "%%")
        if option.type is bool:
            group.add_argument(option.flag, action=argparse.BooleanOptionalAction, dest=dest, default=None, help=helped)
        else:
            group.add_argument(
                option.flag,
                type=_FLAG_TYPES[option.value_type],
                choices=option.choices,
                metavar=_metavar(option),
                dest=dest,
                default=None,
                help=helped,
            )


def _range_text(name: str, takers: list) -> str:
    """``"; a positive int"``: the declared range, per method where the declarations differ."""
    ranges = {method: method_registry.get(method).option(name).range_text for method in takers}
    if len(set(ranges.values())) == 1:
        text = next(iter(ranges.values()))
        return f"; {text}" if text else ""
    return "".join(f"; {method}: {text}" for method, text in ranges.items() if text)


def _metavar(option) -> str | None:
    if option.choices is not None:
        return None
    return {int: "N", float: "F", str: "TEXT"}[option.type]


def method_plan(args: argparse.Namespace) -> list[tuple[str, dict]]:
    """``[(method, options)]`` from --method and the option flags, each checked against the
    declarations. Unknown methods, flags no chosen method takes, and values of the wrong type
    or outside their choices are usage errors. No TensorFlow."""
    chosen = list(dict.fromkeys(args.method or [DEFAULT_METHOD]))
    known = method_registry.names()
    for name in chosen:
        if name not in known:
            raise UsageError(f"unknown method {name!r}{did_you_mean(name, known)}; choose from: {', '.join(known)}")
    given = {
        key[len(OPTION_DEST) :]: value
        for key, value in vars(args).items()
        if key.startswith(OPTION_DEST) and value is not None
    }
    plan, used = [], set()
    for name in chosen:
        method = method_registry.get(name)
        accepted = method.accepted({k: v for k, v in given.items() if k == method.extends})
        options = {k: v for k, v in given.items() if k in accepted}
        used |= set(options)
        try:
            method.check_options({k: v for k, v in options.items() if k not in FILE_OPTIONS})
        except (TypeError, ValueError) as error:
            raise UsageError(message(error)) from error
        plan.append((name, options))
    for option in sorted(set(given) - used):
        takers = option_flags()[option][1]
        flag = "--" + option.replace("_", "-")
        raise UsageError(
            f"{flag} only applies to {', '.join(takers)}, which is not among the chosen methods ({', '.join(chosen)})"
        )
    check_option_files(args)
    return plan


def check_option_files(args: argparse.Namespace) -> None:
    """Every file option given names an existing ``.npy`` file or folder (a usage error if not)."""
    for name in FILE_OPTIONS:
        path = getattr(args, OPTION_DEST + name, None)
        if path is not None and not (os.path.isdir(path) or (path.lower().endswith(".npy") and os.path.isfile(path))):
            raise UsageError(f"--{name.replace('_', '-')} {path}: expected a .npy file or a folder of images")


def read_option_files(plan: list[tuple[str, dict]], spec: ModelSpec) -> list[tuple[str, dict]]:
    """``plan`` with each file option's path (:data:`FILE_OPTIONS`) replaced by its array
    ``[N, H, W, C]``: a ``.npy`` file as saved, a folder's images (sorted by name, read with
    :func:`saliency_kit.images.load_images` for ``spec``). Unreadable files are usage errors."""
    import numpy as np

    from ..batch.discovery import IMAGE_EXTENSIONS
    from ..images import ImageLoadError, load_images

    read: dict[str, Any] = {}
    completed = []
    for method, options in plan:
        for name in FILE_OPTIONS:
            path = options.get(name)
            if not isinstance(path, str):
                continue
            flag = f"--{name.replace('_', '-')} {path}"
            if path not in read:
                try:
                    if os.path.isdir(path):
                        files = sorted(
                            os.path.join(path, f)
                            for f in os.listdir(path)
                            if os.path.splitext(f)[1].lower() in IMAGE_EXTENSIONS
                        )
                        if not files:
                            raise UsageError(f"{flag}: the folder holds no image files")
                        read[path] = load_images(files, spec)[0]
                    else:
                        read[path] = np.load(path, allow_pickle=False)
                except (ImageLoadError, OSError, ValueError) as error:
                    raise UsageError(f"{flag}: {message(error)}") from error
            options = {**options, name: read[path]}
        completed.append((method, options))
    return completed


def preflight(model: keras.Model, spec: Any, sample: Any, plan: list[tuple[str, dict]], batch_size: int) -> None:
    """Check each method's option values against the model and a sample input before any work,
    with the checks ``sk.explain`` makes first (:func:`saliency_kit.pipeline.api.check`: the method's
    declared ``prepare`` included): a --layer the model lacks, a noise level below zero, a baseline
    of the wrong shape. ``spec``: the model's ``ModelSpec`` (its class names and Grad-CAM layer,
    which ``check`` reads from it). Problems are usage errors; anything raised later, while working,
    is not."""
    from ..pipeline.api import check

    check_relus(model, [name for name, _ in plan])
    for name, options in plan:
        if options.get("layer") is not None:
            check_layer(model, options["layer"])
        try:
            check(model, sample, name, batch_size=batch_size, class_names=spec, **options)
        except (TypeError, ValueError) as error:
            raise UsageError(f"{name}: {message(error)}") from error


def check_relus(model: keras.Model, chosen: Sequence[str]) -> None:
    """A method of :data:`RELU_RULE_METHODS` on a model with no ReLU-family activation (none at the
    layer level, and no layer that may hide one) is a usage error naming other methods as flags,
    raised before any work (the default method is one of them)."""
    from ..model.rewrite import _may_hide_relus, find_relu_activations, nothing_to_rewrite
    from ..model.walker import walk

    needing = [name for name in chosen if name in RELU_RULE_METHODS]
    if not needing or find_relu_activations(model) or any(_may_hide_relus(v.layer) for v in walk(model)):
        return
    found = re.search(r"\(activations found: ([^)]*)\)", str(nothing_to_rewrite(model)))
    default = " (the default method)" if needing[0] == DEFAULT_METHOD else ""
    raise UsageError(
        f"--method {needing[0]}{default} needs ReLU activations to act on, and model {model.name!r} has "
        f"none (its activations: {found.group(1) if found else 'none'}); pick a gradient method, e.g. "
        "--method gradient or --method integrated_gradients (see 'saliency methods')"
    )


def check_layer(model: keras.Model, name: str) -> None:
    """A layer name (or ``outer/inner`` path) the model has; else a usage error naming the closest few."""
    from ..model.walker import find_layer, layer_paths

    try:
        find_layer(model, name)
    except ValueError as error:
        paths = [path for path, _ in layer_paths(model)]
        if not any(path == name or path.split("/")[-1] == name for path in paths):
            hint = did_you_mean(name, paths + sorted({p.split("/")[-1] for p in paths}))
            raise UsageError(f"--layer {name!r}: model {model.name!r} has no such layer{hint}") from error
        raise UsageError(f"--layer {name!r}: {message(error)}") from error


# ------------------------------------------------------------------------------- targets
def parse_targets(
    texts: Sequence[str] | None, class_names: Sequence[str] | None, n_classes: int, *, debug: bool = False
) -> TargetSpec:
    """--target values -> one target spec, each value read by the package's one target parser
    (:func:`saliency_kit.targets.parse_string`, as ``sk.explain`` reads a target string); bad
    values are usage errors (the parser names the closest class names). Starts no TensorFlow:
    ``saliency_kit.targets`` imports neither it nor Keras, so a misspelt class name is refused
    at once. (``debug`` is accepted for the callers that pass it; nothing here logs.)"""
    specs = []
    for text in texts or [DEFAULT_TARGET]:
        try:
            specs.append(parse_string(text, n_classes, class_names))
        except (TypeError, ValueError) as error:
            raise UsageError(f"--target {text!r}: {message(error)}") from error
    return combine(specs)


# ------------------------------------------------------------------------------ rendering
def add_render_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("output")
    group.add_argument(
        "--format",
        choices=sorted(FORMATS),
        default="png",
        help="what to write per image, method and class: png = a heatmap PNG and an "
        "overlay PNG (plus a grid PNG per image with explain); npz = one NumPy .npz "
        "file holding the map, the attributions, class and score; both = the PNGs "
        "and the .npz (default: png)",
    )
    group.add_argument(
        "--sign",
        choices=SIGNS,
        default=None,
        help="which part of a map to draw: abs (magnitude), positive (evidence for the "
        "class), negative (against), all (both, diverging colours around zero) "
        "(default: all for signed methods such as integrated_gradients, else abs)",
    )
    group.add_argument(
        "--cmap",
        type=_colormap,
        default=None,
        metavar="NAME",
        help="a matplotlib colormap (default: inferno for abs, RdBu_r for all)",
    )
    group.add_argument(
        "--alpha",
        type=_fraction,
        default=0.5,
        metavar="F",
        help="opacity of the heatmap in overlays, 0 to 1 (default: 0.5)",
    )
    group.add_argument(
        "--clip-percentile",
        type=_percentile,
        default=99.0,
        metavar="P",
        help="maps are scaled so this percentile of |map| is full colour (default: 99)",
    )


def looks(args: argparse.Namespace, plan: list[tuple[str, dict]]) -> dict[str, Look]:
    """How each method's maps are drawn: the rendering flags, the sign defaulting to the method's
    declaration (signed methods diverging)."""
    result = {}
    for name, _ in plan:
        sign = args.sign or ("all" if method_registry.get(name).signed else "abs")
        result[name] = Look(sign=sign, cmap=args.cmap, alpha=args.alpha, clip_percentile=args.clip_percentile)
    return result


def warn(command: str, text: str) -> None:
    print(f"saliency {command}: {text}", file=sys.stderr)


__all__ = [
    "UsageError",
    "add_model_options",
    "load_model_from_args",
    "method_plan",
    "parse_targets",
    "looks",
    "did_you_mean",
    "message",
    "without_arrays",
    "check_task",
    "positive_int",
    "model_spec",
    "start_tensorflow",
    "describe_model",
    "model_notes",
    "option_flags",
    "add_method_options",
    "preflight",
    "check_layer",
    "check_relus",
    "check_option_files",
    "read_option_files",
    "add_render_options",
    "warn",
]
