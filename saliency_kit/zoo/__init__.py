"""Named models and user model files: ``load_model``, ``list_models``, ``ModelSpec``.

    model, spec = sk.load_model("resnet50")              # ImageNet weights from Keras' cache
    model, spec = sk.load_model("shapes")                # the shipped model: no network needed
    model, spec = sk.load_model("resnet50", weights="random")
    model, spec = sk.load_model("resnet50", weights="resnet50_weights_tf_dim_ordering_tf_kernels.h5")
    model, spec = sk.load_model("my_model.keras")        # sidecar my_model.keras.toml, if present
    model, spec = sk.load_model("configs/mynet.toml")    # a config file of your own

A *named* model is a TOML config file. The built-in ones live in the repository's top-level
``pretrained_configs/`` (installed as the package ``saliency_kit.pretrained_configs``); directories
listed in the environment variable ``SALIENCY_KIT_CONFIGS`` (separated by ``os.pathsep``) are searched
first, so a user config can add a name or replace a built-in one. Config keys (unknown keys are an
error, so typos are caught):

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
                    see :func:`saliency_kit.targets.detections.decode`
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

from .config import (
    CONFIG_ENV,
    MODEL_SUFFIXES,
    ModelSpec,
    Preprocessing,
    get_spec,
    list_models,
    read_class_names,
    resolved_file,
    sidecar_spec,
)
from .load import load_model, spec_of
from .weights import OFFLINE_ENV, WeightsUnavailableError, keras_cache_dir

__all__ = [
    "CONFIG_ENV",
    "MODEL_SUFFIXES",
    "ModelSpec",
    "OFFLINE_ENV",
    "Preprocessing",
    "WeightsUnavailableError",
    "get_spec",
    "keras_cache_dir",
    "list_models",
    "load_model",
    "read_class_names",
    "resolved_file",
    "sidecar_spec",
    "spec_of",
]
