"""Model configs: the TOML schema, where configs are found, :class:`Preprocessing` and
:class:`ModelSpec` (see :mod:`saliency_kit.zoo` for the keys).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = [
    "CONFIG_ENV",
    "MODEL_SUFFIXES",
    "ModelSpec",
    "Preprocessing",
    "get_spec",
    "list_models",
    "read_class_names",
    "resolve_path",
    "resolved_file",
    "sidecar_spec",
    "repeated_names",
    "warn_repeated_names",
]


CONFIG_ENV = "SALIENCY_KIT_CONFIGS"


MODEL_SUFFIXES = (".keras", ".h5", ".hdf5")


_PACKAGE_PREFIX = "package:"


_CONFIG_KEYS = {
    "name",
    "constructor",
    "model_file",
    "input_size",
    "preprocess",
    "classes",
    "gradcam_layer",
    "weights_file",
    "description",
    "task",
    "score_threshold",
    "iou_threshold",
}
TASKS = ("classification", "segmentation", "detection")
DETECTION_FIELDS = 5  # a detector's raw output: 4 box coordinates and an objectness logit before the classes


_SIDECAR_KEYS = _CONFIG_KEYS - {"constructor", "model_file", "weights_file"}


# ----------------------------------------------------------------------------- preprocessing
@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """``uint8 [B, H, W, 3]`` RGB -> float32 model input: ``(x[..., order] * scale - mean) / std``.
    Grey images ``[B, H, W, 1]`` (for a 1-channel model) need a mean and a std alike for all three
    channels (as ``"tf"``, ``"unit"`` and ``"none"`` have).

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
    channels_first: bool = False  # output [..., 3, H, W] (a model converted from PyTorch)

    MODES: ClassVar[dict[str, dict[str, Any]]] = {
        "caffe": dict(scale=1.0, mean=(103.939, 116.779, 123.68), channel_order="BGR"),
        "tf": dict(scale=1 / 127.5, mean=(1.0, 1.0, 1.0)),
        "torch": dict(scale=1 / 255, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
        "none": dict(),
        "unit": dict(scale=1 / 255),
    }

    @classmethod
    def from_config(cls, value: Any) -> Preprocessing:
        """A mode name, or a table with any of ``scale``, ``mean``, ``std``, ``channel_order``."""
        if isinstance(value, str):
            if value not in cls.MODES:
                raise ValueError(
                    f"unknown preprocess mode {value!r}; expected one of "
                    f"{sorted(cls.MODES)} or a table {{scale, mean, std, channel_order}}"
                )
            return cls(mode=value, **cls.MODES[value])
        if isinstance(value, dict):
            unknown = set(value) - {"scale", "mean", "std", "channel_order"}
            if unknown:
                raise ValueError(f"unknown preprocess keys {sorted(unknown)}; allowed: scale, mean, std, channel_order")
            kwargs: dict[str, Any] = {
                k: tuple(float(v) for v in value[k]) if k in ("mean", "std") else value[k] for k in value
            }
            if "scale" in kwargs:
                kwargs["scale"] = float(kwargs["scale"])
            for key in ("mean", "std"):
                if key in kwargs and len(kwargs[key]) != 3:
                    raise ValueError(
                        f"preprocess {key} needs 3 values (R, G, B order of the model input), got {kwargs[key]}"
                    )
            if kwargs.get("channel_order", "RGB") not in ("RGB", "BGR"):
                raise ValueError(f"channel_order must be 'RGB' or 'BGR', got {kwargs['channel_order']!r}")
            return cls(**kwargs)
        raise ValueError(f"preprocess must be a mode name or a table, got {value!r}")

    def __call__(self, images: Any) -> np.ndarray:
        """uint8 (or float 0..255) ``[..., 3]`` RGB -> float32, computed in float64 and rounded
        once (so ``"unit"`` is exactly ``np.float32(x) / 255``)."""
        x = np.asarray(images, dtype=np.float64)
        if x.ndim < 1 or x.shape[-1] not in (1, 3):
            raise ValueError(f"expected RGB images [..., 3] (or grey [..., 1]), got shape {x.shape}")
        if x.shape[-1] == 1 and (len(set(self.mean)) > 1 or len(set(self.std)) > 1):
            raise ValueError(
                f"grey images [..., 1] need one mean and one std for every channel; this preprocessing "
                f"has mean {self.mean} and std {self.std} (per RGB channel)"
            )
        if self.channel_order == "BGR":
            x = x[..., ::-1]
        x = x * self.scale
        channels = x.shape[-1]  # grey: the one (common) value of mean and std
        if any(self.mean):
            x = x - np.asarray(self.mean)[:channels]
        if any(s != 1.0 for s in self.std):
            x = x / np.asarray(self.std)[:channels]
        if self.channels_first:
            x = np.moveaxis(x, -1, -3)
        return np.ascontiguousarray(x, dtype=np.float32)


# -------------------------------------------------------------------------------------- spec
@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """How to feed and read a model.

    ``name``; ``input_size`` ``(H, W)``; ``channels``: the image channels the model takes, 3 (RGB)
    or 1 (grey); ``preprocess``: uint8 ``[B, H, W, channels]`` -> float32 model input;
    ``class_names``: one name per output; ``gradcam_layer``: the default Grad-CAM layer
    (a layer name, nested models as ``"outer/inner"``); ``source``: the config or model file.
    """

    name: str
    input_size: tuple[int, ...] | None
    preprocess: Callable
    class_names: list[str] | None
    gradcam_layer: str | None
    source: str = ""
    constructor: str | None = None
    model_file: str | None = None
    weights_file: str | None = None
    description: str = ""
    task: str = "classification"
    channels: int = 3
    score_threshold: float = 0.5
    iou_threshold: float = 0.45


# ------------------------------------------------------------------------------ config files
def _config_dirs() -> list[Path | Traversable]:
    """User directories from ``$SALIENCY_KIT_CONFIGS`` first, then the packaged configs."""
    dirs = [Path(p).expanduser() for p in os.environ.get(CONFIG_ENV, "").split(os.pathsep) if p]
    return dirs + [_builtin_config_dir()]


#: The folder holding the ``saliency_kit`` package: a repository checkout when it also holds
#: ``pyproject.toml`` (``site-packages`` never does).
_SOURCE_ROOT = Path(__file__).resolve().parents[2]


def _builtin_config_dir() -> Traversable:
    """The built-in configs: the repository's top-level ``pretrained_configs/`` when running from a
    checkout (on ``PYTHONPATH`` or installed editable), else the installed package
    ``saliency_kit.pretrained_configs`` (pyproject maps the folder to that package)."""
    checkout = _SOURCE_ROOT / "pretrained_configs"
    if (_SOURCE_ROOT / "pyproject.toml").is_file() and (checkout / "__init__.py").is_file():
        return checkout
    return resources.files("saliency_kit.pretrained_configs")


def _named_configs() -> dict:
    """``{name: config path}``; the first directory that defines a name wins."""
    found: dict[str, Any] = {}
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


def _read_toml(path: Any) -> dict:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"config {path} is not valid TOML: {e}") from None


def resolve_path(value: str, base: Path | None) -> Path | Traversable:
    """``"package:NAME"`` -> a file in saliency_kit/data; else a path relative to ``base``."""
    if value.startswith(_PACKAGE_PREFIX):
        return resources.files("saliency_kit.data").joinpath(value[len(_PACKAGE_PREFIX) :])
    path = Path(value).expanduser()
    return path if path.is_absolute() or base is None else Path(base) / path


def resolved_file(value: str, source: Any) -> contextlib.AbstractContextManager[Path]:
    """A context manager giving a real file path for a config's file value (``"package:NAME"`` or
    a path relative to the config ``source``)."""
    return resources.as_file(resolve_path(value, Path(str(source)).parent))


def read_class_names(text: str, where: Any) -> list:
    """Class names from the text of a class-names file: one name per line, in index order.

    A blank line would shift every later class silently, so it is a ``ValueError`` naming the
    line. Trailing blank lines at the end of the file are allowed. A name given to several
    classes (the usual ImageNet list has "crane" and "maillot" twice) is kept, with one warning
    naming them (:func:`warn_repeated_names`).
    """
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    names = []
    for number, line in enumerate(lines, start=1):
        name = line.strip()
        if not name:
            raise ValueError(
                f"class names file {where}, line {number}: a blank line; every line up to the "
                f"last must name one class (class {number - 1}); received an empty line."
            )
        names.append(name)
    warn_repeated_names(names, f"class names file {where}")
    return names


def repeated_names(names: Sequence[str]) -> dict[str, list[int]]:
    """``{name: [indices]}`` for each name given to more than one class, in index order."""
    indices: dict[str, list[int]] = {}
    for index, name in enumerate(names):
        indices.setdefault(name, []).append(index)
    return {name: where for name, where in indices.items() if len(where) > 1}


_warned_lists: set = set()


def warn_repeated_names(names: Sequence[str], where: str) -> None:
    """One warning (once per list and place) naming the class names given to several classes:
    outputs stay apart by their class index; a target given by such a name is refused."""
    repeated = repeated_names(names)
    key = (where, tuple(names))
    if not repeated or key in _warned_lists:
        return
    _warned_lists.add(key)
    listed = ", ".join(f"{name!r} (classes {', '.join(map(str, where_))})" for name, where_ in repeated.items())
    warnings.warn(
        f"{where}: {len(repeated)} class name(s) given to several classes: {listed}; outputs are told apart "
        "by class index, and a target given by one of these names is refused (give the index).",
        stacklevel=3,
    )


def _read_classes(value: Any, base: Any) -> list | None:
    if value is None:
        return None
    if isinstance(value, list):
        names = [str(v) for v in value]
        warn_repeated_names(names, "the config's classes")
        return names
    path = resolve_path(str(value), base)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise FileNotFoundError(f"class names file {path} cannot be read: {e}") from None
    return read_class_names(text, path)


def _spec_from_config(config: dict, source: Any, *, allowed: Any = _CONFIG_KEYS) -> ModelSpec:
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
    thresholds: dict[str, Any] = {}
    for key in ("score_threshold", "iou_threshold"):
        if key in config:
            value = config[key]
            if task != "detection":
                raise ValueError(
                    f'config {source}: {key} applies to task = "detection" only; received it with task {task!r}.'
                )
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


def _stem(source: Any) -> str:
    """``resnet50.toml`` -> ``resnet50``; ``net.keras.toml`` and ``net.keras`` -> ``net``."""
    name = Path(str(source)).name
    if name.endswith(".toml"):
        name = name[:-5]
    for suffix in MODEL_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def get_spec(name_or_path: str | os.PathLike) -> ModelSpec:
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
            f"add config directories with ${CONFIG_ENV}."
        )
    source = configs[str(name_or_path)]
    return _spec_from_config(_read_toml(source), source)


def sidecar_spec(path: str | os.PathLike) -> ModelSpec:
    """The spec of a model file from its sidecar config ``NAME.keras.toml`` (if any), without
    loading the model (so ``input_size``/``class_names`` may still be None)."""
    path = Path(os.fspath(path))
    sidecar = path.with_name(path.name + ".toml")
    config = _read_toml(sidecar) if sidecar.is_file() else {}
    return _spec_from_config(config, sidecar if config else path, allowed=_SIDECAR_KEYS)
