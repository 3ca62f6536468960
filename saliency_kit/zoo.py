"""Named models and user model files: ``load_model``, ``list_models``, ``ModelSpec``.

    model, spec = sk.load_model("resnet50")              # ImageNet weights from Keras' cache
    model, spec = sk.load_model("shapes")                # the shipped model: no network needed
    model, spec = sk.load_model("resnet50", weights="random")
    model, spec = sk.load_model("resnet50", weights="resnet50_weights_tf_dim_ordering_tf_kernels.h5")
    model, spec = sk.load_model("my_model.keras")        # sidecar my_model.keras.toml, if present
    model, spec = sk.load_model("configs/mynet.toml")    # a config file of your own

A *named* model is a TOML config file. The built-in ones live in ``saliency_kit/pretrained_configs/``
(the package ``saliency_kit.pretrained_configs``); directories listed in the environment variable
``SALIENCY_KIT_CONFIGS`` (separated by ``os.pathsep``) are searched first, so a user config can add a
name or replace a built-in one. Config keys (unknown keys are an error, so typos are caught):

==================  ==============================================================================
``constructor``     a ``keras.applications`` function name, e.g. ``"ResNet50"`` (built with
                    ``include_top=True``); or instead
``model_file``      a ``.keras``/``.h5`` model: a path relative to the config file, or
                    ``"package:NAME"`` for a file shipped in ``saliency_kit/data``
``input_size``      ``[height, width]`` (required with ``constructor``; read from the model otherwise)
``preprocess``      ``"caffe"``, ``"tf"``, ``"torch"``, ``"unit"``, ``"none"``, or a table
                    ``{scale, mean, std, channel_order}`` — see :class:`Preprocessing`
``classes``         a list of names, or a text file (one name per line, in index order) given as a
                    path relative to the config or ``"package:NAME"``; default ``"0".."N-1"``
``gradcam_layer``   default Grad-CAM layer (nested layers as ``"outer/inner"``); default: the last
                    layer with a 4-D output
``weights_file``    the file name Keras caches the ImageNet weights under (in ``$KERAS_HOME/models``
                    or ``~/.keras/models``), checked before any download is attempted
``description``     one line for ``saliency models``
``task``            what the model's output is: ``"classification"`` (the default, ``[B, C]``),
                    ``"segmentation"`` (``[B, H', W', C]`` logits per pixel) or ``"detection"`` (raw
                    heads before non-max suppression, ``[B, N, 4 + 1 + C]``: a box in input pixels,
                    an objectness logit and ``C`` class logits per proposal); ``classes`` names the
                    C classes
``score_threshold`` a detector's score a detection needs (default 0.5) and the IoU above which
``iou_threshold``   non-max suppression drops the weaker of two boxes of a class (default 0.45);
                    see :func:`saliency_kit.detections.decode`
``name``            defaults to the config file's stem
==================  ==============================================================================

Configs are data only: nothing in them is imported or executed.

``weights``: ``"imagenet"`` (the default) means the config's pretrained weights — Keras' ImageNet
weights for a ``constructor`` config, the file's own weights for a ``model_file`` config (so
``load_model("shapes")`` loads the shipped weights); ``"random"`` a freshly initialised network (seed
it with ``keras.utils.set_random_seed``); any other value is a local weights file loaded into the
architecture (``.weights.h5``, a Keras-applications ``.h5`` download, or a ``.keras`` model).

With no cached ImageNet file, ``load_model`` checks in a few seconds whether the download server
can be reached; if not (or if ``SALIENCY_KIT_OFFLINE=1``) it raises :class:`WeightsUnavailableError`
naming the expected file and the ways out, before Keras starts a download.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import sys
import threading
import weakref
from importlib import resources
from pathlib import Path
from typing import Callable

import numpy as np

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["ModelSpec", "Preprocessing", "WeightsUnavailableError", "get_spec", "list_models", "spec_of",
           "load_model"]

CONFIG_ENV = "SALIENCY_KIT_CONFIGS"
OFFLINE_ENV = "SALIENCY_KIT_OFFLINE"
MODEL_SUFFIXES = (".keras", ".h5", ".hdf5")
KERAS_WEIGHTS_URL = "https://storage.googleapis.com/tensorflow/keras-applications/"
_PACKAGE_PREFIX = "package:"
_CONFIG_KEYS = {"name", "constructor", "model_file", "input_size", "preprocess", "classes",
                "gradcam_layer", "weights_file", "description", "task", "score_threshold", "iou_threshold"}
TASKS = ("classification", "segmentation", "detection")
DETECTION_FIELDS = 5  # a detector's raw output: 4 box coordinates and an objectness logit before the classes
_SIDECAR_KEYS = _CONFIG_KEYS - {"constructor", "model_file", "weights_file"}


class WeightsUnavailableError(FileNotFoundError):
    """Pretrained weights are neither cached nor downloadable (no network)."""


# ----------------------------------------------------------------------------- preprocessing
@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """``uint8 [B, H, W, 3]`` RGB -> float32 model input: ``(x[..., order] * scale - mean) / std``.

    Named modes (each matches ``keras.applications.<module>.preprocess_input``):

    - ``"caffe"``: RGB -> BGR, minus the ImageNet BGR mean (103.939, 116.779, 123.68): ResNet, VGG.
    - ``"tf"``: ``x / 127.5 - 1`` to [-1, 1]: ResNetV2, MobileNetV2, InceptionV3, Xception.
    - ``"torch"``: ``x / 255``, minus mean (0.485, 0.456, 0.406), over std (0.229, 0.224, 0.225):
      DenseNet.
    - ``"none"``: float32 0..255 unchanged: EfficientNet, ConvNeXt (they normalise inside the model).
    - ``"unit"``: ``x / 255`` to [0, 1]: the shapes model, and user models without a config.
    """

    mode: str = "custom"
    scale: float = 1.0
    mean: tuple = (0.0, 0.0, 0.0)
    std: tuple = (1.0, 1.0, 1.0)
    channel_order: str = "RGB"

    MODES = {
        "caffe": dict(scale=1.0, mean=(103.939, 116.779, 123.68), channel_order="BGR"),
        "tf": dict(scale=1 / 127.5, mean=(1.0, 1.0, 1.0)),
        "torch": dict(scale=1 / 255, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
        "none": dict(),
        "unit": dict(scale=1 / 255),
    }

    @classmethod
    def from_config(cls, value) -> "Preprocessing":
        """A mode name, or a table with any of ``scale``, ``mean``, ``std``, ``channel_order``."""
        if isinstance(value, str):
            if value not in cls.MODES:
                raise ValueError(f"unknown preprocess mode {value!r}; expected one of "
                                 f"{sorted(cls.MODES)} or a table {{scale, mean, std, channel_order}}")
            return cls(mode=value, **cls.MODES[value])
        if isinstance(value, dict):
            unknown = set(value) - {"scale", "mean", "std", "channel_order"}
            if unknown:
                raise ValueError(f"unknown preprocess keys {sorted(unknown)}; "
                                 "allowed: scale, mean, std, channel_order")
            kwargs = {k: tuple(float(v) for v in value[k]) if k in ("mean", "std") else value[k]
                      for k in value}
            if "scale" in kwargs:
                kwargs["scale"] = float(kwargs["scale"])
            for key in ("mean", "std"):
                if key in kwargs and len(kwargs[key]) != 3:
                    raise ValueError(f"preprocess {key} needs 3 values (R, G, B order of the "
                                     f"model input), got {kwargs[key]}")
            if kwargs.get("channel_order", "RGB") not in ("RGB", "BGR"):
                raise ValueError(f"channel_order must be 'RGB' or 'BGR', got {kwargs['channel_order']!r}")
            return cls(**kwargs)
        raise ValueError(f"preprocess must be a mode name or a table, got {value!r}")

    def __call__(self, images) -> np.ndarray:
        """uint8 (or float 0..255) ``[..., 3]`` RGB -> float32, computed in float64 and rounded
        once (so ``"unit"`` is exactly ``np.float32(x) / 255``)."""
        x = np.asarray(images, dtype=np.float64)
        if x.ndim < 1 or x.shape[-1] != 3:
            raise ValueError(f"expected RGB images [..., 3], got shape {x.shape}")
        if self.channel_order == "BGR":
            x = x[..., ::-1]
        x = x * self.scale
        if any(self.mean):
            x = x - np.asarray(self.mean)
        if any(s != 1.0 for s in self.std):
            x = x / np.asarray(self.std)
        return np.ascontiguousarray(x, dtype=np.float32)


# -------------------------------------------------------------------------------------- spec
@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """How to feed and read a model.

    ``name``; ``input_size`` ``(H, W)``; ``preprocess``: uint8 ``[B, H, W, 3]`` RGB -> float32 model
    input; ``class_names``: one name per class; ``gradcam_layer``: the default Grad-CAM layer
    (a layer name, nested models as ``"outer/inner"``); ``source``: the config or model file;
    ``task``: ``"classification"``, ``"segmentation"`` or ``"detection"`` (what the output is, see
    the module docstring); ``score_threshold``, ``iou_threshold``: a detector's decoding.
    """

    name: str
    input_size: tuple
    preprocess: Callable
    class_names: list
    gradcam_layer: str | None
    source: str = ""
    constructor: str | None = None
    model_file: str | None = None
    weights_file: str | None = None
    description: str = ""
    task: str = "classification"
    score_threshold: float = 0.5
    iou_threshold: float = 0.45


# ------------------------------------------------------------------------------ config files
def _config_dirs() -> list:
    """User directories from ``$SALIENCY_KIT_CONFIGS`` first, then the packaged configs."""
    dirs = [Path(p).expanduser() for p in os.environ.get(CONFIG_ENV, "").split(os.pathsep) if p]
    return dirs + [_builtin_config_dir()]


def _builtin_config_dir():
    """The package ``saliency_kit.pretrained_configs``: the built-in configs."""
    return resources.files("saliency_kit.pretrained_configs")


def _named_configs() -> dict:
    """``{name: config path}``; the first directory that defines a name wins."""
    found = {}
    for directory in _config_dirs():
        if not directory.is_dir():
            continue
        for entry in sorted(directory.iterdir(), key=lambda p: p.name):
            if entry.name.endswith(".toml"):
                found.setdefault(entry.name[:-5], entry)
    return found


def list_models() -> list:
    """Names accepted by :func:`load_model` (built-in configs and ``$SALIENCY_KIT_CONFIGS``)."""
    return sorted(_named_configs())


def _read_toml(path) -> dict:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"config {path} is not valid TOML: {e}") from None


def _resolve(value: str, base: Path | None):
    """``"package:NAME"`` -> a file in saliency_kit/data; else a path relative to ``base``."""
    if value.startswith(_PACKAGE_PREFIX):
        return resources.files("saliency_kit.data").joinpath(value[len(_PACKAGE_PREFIX):])
    path = Path(value).expanduser()
    return path if path.is_absolute() or base is None else Path(base) / path


def resolved_file(value: str, source):
    """A context manager giving a real file path for a config's file value (``"package:NAME"`` or
    a path relative to the config ``source``)."""
    return resources.as_file(_resolve(value, Path(str(source)).parent))


def read_class_names(text: str, where) -> list:
    """Class names from the text of a class-names file: one name per line, in index order.

    A blank line or a name given twice would shift or merge classes silently, so each is a
    ``ValueError`` naming the line. Trailing blank lines at the end of the file are allowed.
    """
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    names, first_line = [], {}
    for number, line in enumerate(lines, start=1):
        name = line.strip()
        if not name:
            raise ValueError(f"class names file {where}, line {number}: a blank line; every line up to the "
                             f"last must name one class (class {number - 1}); received an empty line.")
        if name in first_line:
            raise ValueError(f"class names file {where}, line {number}: class name {name!r} is already on line "
                             f"{first_line[name]}; class names must be distinct; received it twice.")
        first_line[name] = number
        names.append(name)
    return names


def _read_classes(value, base) -> list | None:
    if value is None:
        return None
    if isinstance(value, list):
        return [str(v) for v in value]
    path = _resolve(str(value), base)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise FileNotFoundError(f"class names file {path} cannot be read: {e}") from None
    return read_class_names(text, path)


def _spec_from_config(config: dict, source, *, allowed=_CONFIG_KEYS) -> ModelSpec:
    """A ModelSpec from a parsed config; ``input_size``/``class_names`` may be None until the model
    is known (filled in by ``_complete``)."""
    unknown = set(config) - allowed
    if unknown:
        raise ValueError(f"config {source}: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    base = Path(str(source)).parent if source else None
    if "constructor" in config and "model_file" in config:
        raise ValueError(f"config {source}: give either 'constructor' or 'model_file', not both")
    size = config.get("input_size")
    if size is not None:
        if not (isinstance(size, list) and len(size) == 2 and all(isinstance(s, int) and s > 0 for s in size)):
            raise ValueError(f"config {source}: input_size must be [height, width], got {size!r}")
        size = tuple(size)
    elif "constructor" in config:
        raise ValueError(f"config {source}: 'input_size' is required with 'constructor'")
    task = config.get("task", "classification")
    if task not in TASKS:
        raise ValueError(f"config {source}: task must be one of {', '.join(map(repr, TASKS))}; received {task!r}.")
    thresholds = {}
    for key in ("score_threshold", "iou_threshold"):
        if key in config:
            value = config[key]
            if task != "detection":
                raise ValueError(f"config {source}: {key} applies to task = \"detection\" only; received it "
                                 f"with task {task!r}.")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ValueError(f"config {source}: {key} must be a number from 0 to 1; received {value!r}.")
            thresholds[key] = float(value)
    return ModelSpec(
        name=config.get("name") or _stem(source),
        input_size=size,
        preprocess=Preprocessing.from_config(config.get("preprocess", "unit")),
        class_names=_read_classes(config.get("classes"), base),
        gradcam_layer=config.get("gradcam_layer"),
        source=str(source),
        constructor=config.get("constructor"),
        model_file=config.get("model_file"),
        weights_file=config.get("weights_file"),
        description=config.get("description", ""),
        task=task,
        **thresholds,
    )


def _stem(source) -> str:
    """``resnet50.toml`` -> ``resnet50``; ``net.keras.toml`` and ``net.keras`` -> ``net``."""
    name = Path(str(source)).name
    if name.endswith(".toml"):
        name = name[:-5]
    for suffix in MODEL_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def get_spec(name_or_path) -> ModelSpec:
    """The spec of a named model or a ``.toml`` config without building the model (so
    ``input_size``/``class_names`` of a ``model_file`` config may still be None)."""
    path = Path(str(name_or_path))
    if path.suffix == ".toml":
        if not path.is_file():
            raise FileNotFoundError(f"config file {path} does not exist")
        return _spec_from_config(_read_toml(path), path)
    configs = _named_configs()
    if str(name_or_path) not in configs:
        close = difflib.get_close_matches(str(name_or_path), configs, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"unknown model {str(name_or_path)!r}.{hint} Known models: {', '.join(sorted(configs))}. "
            f"A model file must end in {', '.join(MODEL_SUFFIXES)}; a config file in .toml; "
            f"add config directories with ${CONFIG_ENV}.")
    source = configs[str(name_or_path)]
    return _spec_from_config(_read_toml(source), source)


def sidecar_spec(path) -> ModelSpec:
    """The spec of a model file from its sidecar config ``NAME.keras.toml`` (if any), without
    loading the model (so ``input_size``/``class_names`` may still be None)."""
    path = Path(os.fspath(path))
    sidecar = path.with_name(path.name + ".toml")
    config = _read_toml(sidecar) if sidecar.is_file() else {}
    return _spec_from_config(config, sidecar if config else path, allowed=_SIDECAR_KEYS)


# -------------------------------------------------------------------------------- the loader
def load_model(name_or_path, weights="imagenet", *, unsafe: bool = False):
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
    from .keras_backend import require_tensorflow

    require_tensorflow()  # another Keras backend: one clear RuntimeError, not a failure deep inside
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
            with resources.as_file(_resolve(spec.model_file, Path(spec.source).parent)) as file:
                model = _load_model_file(Path(file), weights, unsafe)
        else:
            raise ValueError(f"config {spec.source} needs 'constructor' or 'model_file'")
    spec = _complete(spec, model)
    _SPECS[model] = spec
    from .model.layers import configure_cam_layer

    configure_cam_layer(model, spec.gradcam_layer)
    return model, spec


def _complete(spec: ModelSpec, model) -> ModelSpec:
    """Fill what only the model knows (input size, class count, Grad-CAM layer) and check the
    config agrees with the model."""
    in_shape = tuple(model.input_shape) if not isinstance(model.input_shape, list) else None
    if in_shape is None or len(in_shape) != 4:
        raise ValueError(f"{spec.name}: expected one image input [B, H, W, C], "
                         f"got input shape {model.input_shape}")
    size = spec.input_size or in_shape[1:3]
    if None in size:
        raise ValueError(f"{spec.name}: the model accepts any image size {in_shape}; give "
                         "input_size = [height, width] in its config")
    n_out = _class_count(spec, model.output_shape)
    names = spec.class_names or [str(i) for i in range(n_out or 0)]
    if n_out is not None and len(names) != n_out:
        raise ValueError(f"{spec.name}: {len(names)} class names for {n_out} model outputs "
                         f"(config {spec.source})")
    layer = spec.gradcam_layer or _last_4d_layer(model)
    if layer is not None:
        _get_layer(model, layer, spec)
    return dataclasses.replace(spec, input_size=tuple(int(s) for s in size), class_names=list(names),
                    gradcam_layer=layer)


def _class_count(spec: ModelSpec, output_shape) -> int | None:
    """How many classes the output of a ``spec.task`` model scores (``None``: several outputs,
    or not known); an output that does not fit the task is a ``ValueError``."""
    if isinstance(output_shape, (list, dict)):
        return None
    shape = tuple(output_shape)
    expected = {"classification": 2, "segmentation": 4, "detection": 3}[spec.task]
    if len(shape) != expected:
        form = {"classification": "[B, C]", "segmentation": "[B, H', W', C]",
                "detection": "[B, N, 4 + 1 + C]"}[spec.task]
        if spec.task != "classification":  # a classifier config may describe any one-output model
            raise ValueError(f"{spec.name}: task {spec.task!r} needs an output {form}; received a model whose "
                             f"output shape is {shape} (config {spec.source}).")
    if spec.task == "detection":
        if shape[-1] is None or shape[-1] <= DETECTION_FIELDS:
            raise ValueError(f"{spec.name}: a detector's output needs 4 box values, an objectness logit and at "
                             f"least one class logit per proposal; received an output shape {shape}.")
        return shape[-1] - DETECTION_FIELDS
    return shape[-1]


def _last_4d_layer(model) -> str | None:
    """Path of the last layer (nested models included) whose output is 4-D, or ``None``."""
    from .model.layers import layer_paths, output_rank

    found = [path for path, layer in layer_paths(model) if output_rank(layer) == 4]
    return found[-1] if found else None


def _get_layer(model, path: str, spec=None):
    """The layer at ``"outer/inner"`` (or a bare layer name); ValueError naming what exists."""
    from .model.layers import find_layer, layer_at

    try:
        return layer_at(model, find_layer(model, path))
    except ValueError as error:
        raise ValueError(f"{getattr(spec, 'name', '')}: gradcam_layer {path!r}: {error}") from None


# The spec of each model load_model returned, so that explaining that model uses its configured
# class names and Grad-CAM layer (model.layers.configure_cam_layer records the latter). Weak keys: the model is not kept alive
# and not changed.
_SPECS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def spec_of(model) -> "ModelSpec | None":
    """The :class:`ModelSpec` that :func:`load_model` returned with ``model``, or ``None``."""
    try:
        return _SPECS.get(model)
    except TypeError:  # not weak-referenceable: never returned by load_model
        return None


def _build_application(spec: ModelSpec, weights):
    import keras

    ctor = getattr(keras.applications, spec.constructor, None)
    if ctor is None or not callable(ctor):
        raise ValueError(f"config {spec.source}: keras.applications has no {spec.constructor!r}")
    kwargs = dict(include_top=True, input_shape=(*spec.input_size, 3))
    if weights == "random":
        return ctor(weights=None, **kwargs)
    if weights == "imagenet":
        _check_imagenet_weights(spec)
        return ctor(weights="imagenet", **kwargs)
    model = ctor(weights=None, **kwargs)
    _load_weights_into(model, weights, spec.name)
    return model


def _load_weights_into(model, weights, name: str) -> None:
    path = Path(os.fspath(weights)) if isinstance(weights, (str, os.PathLike)) else None
    if path is None:
        raise ValueError(f"weights must be 'imagenet', 'random' or a file path, got {weights!r}")
    if not path.is_file():
        raise FileNotFoundError(f"weights file {path} does not exist (weights= accepts 'imagenet', "
                                "'random' or the path of a weights file)")
    try:
        if path.suffix == ".keras":
            import keras

            source = keras.saving.load_model(path, compile=False)
            model.set_weights(source.get_weights())
        else:
            model.load_weights(path)
    except (ValueError, OSError, KeyError, TypeError, IndexError) as e:  # what Keras and h5py raise for a
        # file that does not fit the model; one clear message is what users need (--debug: the cause)
        raise ValueError(f"cannot load weights from {path} into {name}: {type(e).__name__}: {e}") from e


def _load_model_file(path: Path, weights, unsafe: bool):
    """A ``.keras``/``.h5`` model (safe mode unless ``unsafe``), with its own weights, fresh
    random ones (``"random"``: a clone), or those of another file."""
    import keras

    try:
        from .gradients import layers as _sk_layers  # noqa: F401  registers saliency_kit's own layers
    except ImportError:
        pass
    from .data import scene_models as _scene_models  # noqa: F401  registers the shipped detector's CellBoxes
    if not path.is_file():
        raise FileNotFoundError(f"model file {path} does not exist")
    try:
        model = keras.saving.load_model(path, compile=False, safe_mode=not unsafe)
    except ValueError as e:
        if "safe_mode" in str(e) or "unsafe" in str(e).lower():
            raise ValueError(f"{path} contains code (e.g. a Lambda layer) that safe mode refuses "
                             "to run; load it with unsafe=True (--unsafe) only if you trust the "
                             "file") from None
        raise ValueError(f"cannot load model {path}: {e}") from None
    except OSError as e:
        raise ValueError(f"cannot load model {path}: {e}") from None
    if weights == "random":
        return keras.models.clone_model(model)  # same architecture, freshly initialised layers
    if weights != "imagenet":  # "imagenet" (the default) keeps the file's own weights
        _load_weights_into(model, weights, path.name)
    return model


# ---------------------------------------------------------------------- imagenet, offline-safe
def keras_cache_dir() -> Path:
    """Where ``keras.utils.get_file`` keeps downloaded models: ``$KERAS_HOME/models``, else
    ``~/.keras/models`` (``/tmp/.keras/models`` when the home directory is not writable)."""
    home = os.environ.get("KERAS_HOME")
    if home is None:
        base = Path("~").expanduser()
        home = (base if os.access(base, os.W_OK) else Path("/tmp")) / ".keras"
    home = Path(home).expanduser()
    if home.exists() and not os.access(home, os.W_OK):
        home = Path("/tmp") / ".keras"
    return home / "models"


def _server_reachable(url: str | None = None, timeout: float = 3.0) -> bool:
    """True when an HTTP request to ``url`` (Keras' weights server) gets any answer within
    ``timeout`` seconds; False at once when ``$SALIENCY_KIT_OFFLINE`` is set."""
    if os.environ.get(OFFLINE_ENV, "").strip() not in ("", "0"):
        return False
    url = url or KERAS_WEIGHTS_URL
    import urllib.error
    import urllib.request

    result = []

    def probe():
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout)
            result.append(True)
        except urllib.error.HTTPError:  # the server answered: the network works
            result.append(True)
        except (OSError, ValueError):  # no route, no DNS, a timeout, TLS trouble: offline
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)  # DNS look-ups ignore socket timeouts
    thread.start()
    thread.join(timeout + 1)
    return bool(result and result[0])


def _check_imagenet_weights(spec: ModelSpec) -> None:
    """Raise WeightsUnavailableError unless the weights are cached or downloadable."""
    if not spec.weights_file:
        return  # nothing to check against: let Keras try
    expected = keras_cache_dir() / spec.weights_file
    if expected.is_file() or _server_reachable():
        return
    raise WeightsUnavailableError(
        f"ImageNet weights for {spec.name} are not cached at {expected} and cannot be downloaded "
        f"(no network). Copy the file there, pass it with --weights PATH (weights=PATH), use "
        f"--weights random (weights=\"random\") for an untrained network, or use the shipped "
        f"offline model: --model shapes.")
