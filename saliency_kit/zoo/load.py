"""Loading a model from a name, a config or a model file, and the spec a loaded model carries
(:func:`spec_of`).
"""

from __future__ import annotations

import dataclasses
import os
import weakref
from importlib import resources
from pathlib import Path
from typing import Any

from ..keras_backend import require_supported_backend
from .config import DETECTION_FIELDS, MODEL_SUFFIXES, ModelSpec, Preprocessing, get_spec, resolve_path, sidecar_spec
from .weights import check_imagenet_weights, load_weights_into

__all__ = ["load_model", "spec_of", "keras_dtype"]


# -------------------------------------------------------------------------------- the loader
def load_model(name_or_path: Any, weights: Any = "imagenet", *, unsafe: bool = False) -> tuple[Any, ModelSpec]:
    """Load a named model, a ``.toml`` config, or a ``.keras``/``.h5`` model file.

    Returns ``(keras.Model, ModelSpec)``. ``weights``: ``"imagenet"`` (the config's pretrained
    weights: see the module docstring), ``"random"``, or a local weights file. ``unsafe=True``
    lets a model file run code it contains (``Lambda`` layers); leave it off for files you did
    not make.

    A user model ``net.keras`` gets its spec from a sidecar config ``net.keras.toml`` beside it
    (keys ``name``, ``input_size``, ``preprocess``, ``classes``, ``gradcam_layer``,
    ``description``), defaulting to: name ``"net"``, the model's input size, ``x / 255``
    preprocessing, classes ``"0".."N-1"``, and the last layer with a 4-D output for Grad-CAM.
    """
    require_supported_backend()  # another Keras backend: one clear RuntimeError, not a failure deep inside
    path = Path(os.fspath(name_or_path)) if isinstance(name_or_path, (str, os.PathLike)) else None
    if path is None:
        raise TypeError(f"name_or_path must be a model name or a path, got {type(name_or_path).__name__}")
    if path.suffix.lower() in MODEL_SUFFIXES:
        spec = sidecar_spec(path)
        model = _load_model_file(path, weights, unsafe)
    else:
        spec = get_spec(name_or_path)
        if spec.constructor:
            model = _build_application(spec, weights)
        elif spec.model_file:
            with resources.as_file(resolve_path(spec.model_file, Path(spec.source).parent)) as file:
                model = _load_model_file(Path(file), weights, unsafe)
        else:
            raise ValueError(f"config {spec.source} needs 'constructor' or 'model_file'")
    spec = _complete(spec, model)
    _SPECS[model] = spec
    from ..model.walker import configure_cam_layer

    configure_cam_layer(model, spec.gradcam_layer)
    return model, spec


def _complete(spec: ModelSpec, model: Any) -> ModelSpec:
    """Fill what only the model knows (input size, class count, Grad-CAM layer) and check the
    config agrees with the model."""
    in_shape = tuple(model.input_shape) if not isinstance(model.input_shape, list) else None
    if in_shape is None or len(in_shape) != 4:
        raise ValueError(f"{spec.name}: expected one image input [B, H, W, C], got input shape {model.input_shape}")
    first = _takes_channels_first(model, in_shape)
    if first and isinstance(spec.preprocess, Preprocessing):
        spec = dataclasses.replace(spec, preprocess=dataclasses.replace(spec.preprocess, channels_first=True))
    size = spec.input_size or (in_shape[2:4] if first else in_shape[1:3])
    if None in size:
        raise ValueError(
            f"{spec.name}: the model accepts any image size {in_shape}; give input_size = [height, width] in its config"
        )
    n_out = _class_count(spec, model.output_shape)
    names = spec.class_names or [str(i) for i in range(n_out or 0)]
    if n_out is not None and len(names) != n_out:
        raise ValueError(f"{spec.name}: {len(names)} class names for {n_out} model outputs (config {spec.source})")
    layer = spec.gradcam_layer or _last_4d_layer(model)
    if layer is not None:
        _get_layer(model, layer, spec)
    channels = in_shape[1] if first else in_shape[-1]
    return dataclasses.replace(
        spec,
        input_size=tuple(int(s) for s in size),
        class_names=list(names),
        gradcam_layer=layer,
        channels=int(channels) if channels is not None else 3,
    )


def _takes_channels_first(model: Any, in_shape: Any) -> bool:
    """Whether ``model`` takes ``[B, C, H, W]`` images (channels-first layers, or a conversion
    inside the model as PyTorch converters write it): then images are fed transposed."""
    from ..model.inspect import channel_axis

    if in_shape[-1] in (1, 3, 4) and in_shape[1] not in (1, 3, 4):
        return False  # clearly [B, H, W, C]: no trace needed
    try:
        return channel_axis(model, 3, in_shape[1:], keras_dtype(model)) == 0
    except ValueError:  # which axis cannot be told here: explain refuses with the reason
        return False


def keras_dtype(model: Any) -> str:
    """The dtype of ``model``'s input, as Keras names it."""
    import keras

    return keras.backend.standardize_dtype(model.inputs[0].dtype) if getattr(model, "inputs", None) else "float32"


def _class_count(spec: ModelSpec, output_shape: Any) -> int | None:
    """How many classes the output of a ``spec.task`` model scores (``None``: several outputs,
    or not known); an output that does not fit the task is a ``ValueError``."""
    if isinstance(output_shape, (list, dict)):
        return None
    shape = tuple(output_shape)
    expected = {"classification": 2, "segmentation": 4, "detection": 3}[spec.task]
    if len(shape) != expected:
        form = {"classification": "[B, C]", "segmentation": "[B, H', W', C]", "detection": "[B, N, 4 + 1 + C]"}[
            spec.task
        ]
        if spec.task != "classification":  # a classifier config may describe any one-output model
            raise ValueError(
                f"{spec.name}: task {spec.task!r} needs an output {form}; received a model whose "
                f"output shape is {shape} (config {spec.source})."
            )
    if spec.task == "detection":
        if shape[-1] is None or shape[-1] <= DETECTION_FIELDS:
            raise ValueError(
                f"{spec.name}: a detector's output needs 4 box values, an objectness logit and at "
                f"least one class logit per proposal; received an output shape {shape}."
            )
        return shape[-1] - DETECTION_FIELDS
    return shape[-1]


def _last_4d_layer(model: Any) -> str | None:
    """Path of the last layer (nested models included) whose output is 4-D, or ``None``."""
    from ..model.walker import layer_paths, output_rank

    found = [path for path, layer in layer_paths(model) if output_rank(layer) == 4]
    return found[-1] if found else None


def _get_layer(model: Any, path: str, spec: Any = None) -> Any:
    """The layer at ``"outer/inner"`` (or a bare layer name); ValueError naming what exists."""
    from ..model.walker import find_layer, layer_at

    try:
        return layer_at(model, find_layer(model, path))
    except ValueError as error:
        raise ValueError(f"{getattr(spec, 'name', '')}: gradcam_layer {path!r}: {error}") from None


# The spec of each model load_model returned, so that explaining that model uses its configured
# class names and Grad-CAM layer (model.walker.configure_cam_layer records the latter). Weak keys: the model
# is not kept alive
# and not changed.
_SPECS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def spec_of(model: Any) -> ModelSpec | None:
    """The :class:`ModelSpec` that :func:`load_model` returned with ``model``, or ``None``."""
    try:
        return _SPECS.get(model)
    except TypeError:  # not weak-referenceable: never returned by load_model
        return None


def _build_application(spec: ModelSpec, weights: Any) -> Any:
    import keras

    if spec.constructor is None or spec.input_size is None:
        raise ValueError(
            f"config {spec.source}: building a keras.applications model needs 'constructor' and 'input_size'"
        )
    ctor = getattr(keras.applications, spec.constructor, None)
    if ctor is None or not callable(ctor):
        raise ValueError(f"config {spec.source}: keras.applications has no {spec.constructor!r}")
    kwargs = dict(include_top=True, input_shape=(*spec.input_size, 3))
    if weights == "random":
        return ctor(weights=None, **kwargs)
    if weights == "imagenet":
        check_imagenet_weights(spec)
        return ctor(weights="imagenet", **kwargs)
    model = ctor(weights=None, **kwargs)
    load_weights_into(model, weights, spec.name)
    return model


def _load_model_file(path: Path, weights: Any, unsafe: bool) -> Any:
    """A ``.keras``/``.h5`` model (safe mode unless ``unsafe``), with its own weights, fresh
    random ones (``"random"``: a clone), or those of another file."""
    import keras

    try:
        from ..gradients import layers as _sk_layers  # noqa: F401  registers saliency_kit's own layers
    except ImportError:
        pass
    from ..data import scene_models as _scene_models  # noqa: F401  registers the shipped detector's CellBoxes

    if not path.is_file():
        raise FileNotFoundError(f"model file {path} does not exist")
    try:
        model = keras.saving.load_model(path, compile=False, safe_mode=not unsafe)
    except ValueError as e:
        if "safe_mode" in str(e) or "unsafe" in str(e).lower():
            raise ValueError(
                f"{path} contains code (e.g. a Lambda layer) that safe mode refuses "
                "to run; load it with unsafe=True (--unsafe) only if you trust the "
                "file"
            ) from None
        raise ValueError(f"cannot load model {path}: {e}") from None
    except OSError as e:
        raise ValueError(f"cannot load model {path}: {e}") from None
    if weights == "random":
        return keras.models.clone_model(model)  # same architecture, freshly initialised layers
    if weights != "imagenet":  # "imagenet" (the default) keeps the file's own weights
        load_weights_into(model, weights, path.name)
    return model
