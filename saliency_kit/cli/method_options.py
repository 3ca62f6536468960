"""The flags of the methods: ``--method``, ``--target``, and one flag per option a method declares
(:mod:`saliency_kit.methods`): option ``x_y`` is ``--x-y``, typed from the declaration, one flag
serving every method declaring it. Reading the declarations imports neither TensorFlow nor Keras,
so building the parser and checking methods and their options is instant. Array options the
command line reads from files (:data:`FILE_OPTIONS`) are read once the model is loaded; those it
cannot fill (:data:`PYTHON_ONLY_OPTIONS`) have no flag. Checks against the model
(:func:`preflight`) come before any work."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import methods as method_registry
from ..batch.discovery import IMAGE_EXTENSIONS
from ..images import ImageLoadError, load_images
from .values import FLAG_TYPES, UsageError, did_you_mean, message

if TYPE_CHECKING:
    import keras

    from ..zoo import ModelSpec

__all__ = [
    "DEFAULT_METHOD",
    "DEFAULT_TARGET",
    "OPTION_DEST",
    "RELU_RULE_METHODS",
    "FILE_OPTIONS",
    "PYTHON_ONLY_OPTIONS",
    "option_flags",
    "add_method_options",
    "method_plan",
    "check_option_files",
    "read_option_files",
    "preflight",
    "check_relus",
    "check_layer",
]

DEFAULT_METHOD = "guided_backprop"
DEFAULT_TARGET = "top1"
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
                type=FLAG_TYPES[option.value_type],
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
    from ..model.relu_layers import find_relu_activations, may_hide_relus, nothing_to_rewrite
    from ..model.walker import walk

    needing = [name for name in chosen if name in RELU_RULE_METHODS]
    if not needing or find_relu_activations(model) or any(may_hide_relus(v.layer) for v in walk(model)):
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
