"""Options shared by the subcommands: the model, what to explain (the methods' flags, from
:mod:`.method_options`; targets), how maps are drawn, and the error every problem with them
becomes (:class:`UsageError`, from :mod:`.values`). Checking methods, their options and (for
named models) class names imports no TensorFlow, so it is instant.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import methods as method_registry
from .. import zoo
from ..batch.outputs import FORMATS, SIGNS, Look
from ..keras_backend import backend, require_supported_backend
from ..targets import combine, parse_string
from ..zoo import load_model
from .method_options import (  # the methods' flags, used through this module by the subcommands
    DEFAULT_METHOD,
    DEFAULT_TARGET,
    FILE_OPTIONS,
    OPTION_DEST,
    PYTHON_ONLY_OPTIONS,
    RELU_RULE_METHODS,
    add_method_options,
    check_layer,
    check_option_files,
    check_relus,
    method_plan,
    option_flags,
    preflight,
    read_option_files,
)
from .startup import BackendError, import_tensorflow
from .values import UsageError, colormap, did_you_mean, fraction, message, percentile, positive_int, without_arrays

if TYPE_CHECKING:
    import keras

    from ..targets import TargetSpec
    from ..zoo import ModelSpec

DEFAULT_MODEL = "shapes"
DEFAULT_OUT = "saliency_out"


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

    require_supported_backend()

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
        scores = f"{len(heads)} outputs: {listed}"
    else:
        scores = f"{len(spec.class_names or [])} classes"
    return f"model: {spec.name}{where}{weights}; input {size}; {scores}; backend {backend()}"


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
        type=colormap,
        default=None,
        metavar="NAME",
        help="a matplotlib colormap (default: inferno for abs, RdBu_r for all)",
    )
    group.add_argument(
        "--alpha",
        type=fraction,
        default=0.5,
        metavar="F",
        help="opacity of the heatmap in overlays, 0 to 1 (default: 0.5)",
    )
    group.add_argument(
        "--clip-percentile",
        type=percentile,
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
    "DEFAULT_MODEL",
    "DEFAULT_METHOD",
    "DEFAULT_TARGET",
    "DEFAULT_OUT",
    "OPTION_DEST",
    "RELU_RULE_METHODS",
    "FILE_OPTIONS",
    "PYTHON_ONLY_OPTIONS",
    "UsageError",
    "add_model_options",
    "load_model_from_args",
    "check_task",
    "method_plan",
    "check_option_files",
    "read_option_files",
    "parse_targets",
    "looks",
    "did_you_mean",
    "message",
    "without_arrays",
    "positive_int",
    "model_spec",
    "start_tensorflow",
    "describe_model",
    "model_notes",
    "option_flags",
    "add_method_options",
    "preflight",
    "check_relus",
    "check_layer",
    "add_render_options",
    "warn",
]
