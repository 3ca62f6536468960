"""saliency_kit: saliency maps, guided backpropagation and gradient tools for Keras 3 models.

    import saliency_kit as sk
    guided = sk.rewrite(model, "guided")           # a copy whose ReLUs use guided backprop
    expl = sk.explain(model, images, method="smoothgrad", targets="top3")

Public names are imported lazily, on first use, so that ``import saliency_kit`` and the command
line's ``--help`` stay quick; ``dir(sk)`` and ``sk.__all__`` list them all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .keras_backend import require_supported_backend

__version__ = "0.1.0"

# public name -> module that defines it
_NAMES = {
    "backend": "keras_backend",
    "ModifiedBackprop": "rules",
    "GuidedBackprop": "rules",
    "DeconvBackprop": "rules",
    "rewrite": "model.rule_copy",
    "explain": "pipeline.api",
    "explain_generation": "pipeline.generation",
    "jacobian": "pipeline.api",
    "Explanation": "explanation",
    "load_model": "zoo",
    "list_models": "zoo",
    "ModelSpec": "zoo",
    "load_images": "images",
}
# public submodule name -> the module it is
_SUBMODULES = {
    "gradients": "gradients",
    "layers": "gradients.layers",
    "render": "render",
    "evaluate": "evaluate",
    "methods": "methods",
    "rules": "rules",
    "composites": "propagation.composites",
    "callbacks": "callbacks",
    "gallery": "batch.gallery",
    "targets": "targets",
}

__all__ = sorted([*_NAMES, *_SUBMODULES, "__version__"])

if TYPE_CHECKING:  # for editors and type checkers: the eager view of the same names
    from . import callbacks, evaluate, gradients, methods, render, rules, targets
    from .batch import gallery
    from .explanation import Explanation
    from .gradients import layers
    from .images import load_images
    from .keras_backend import backend
    from .model.rule_copy import rewrite
    from .pipeline.api import explain, jacobian
    from .pipeline.generation import explain_generation
    from .propagation import composites
    from .rules import DeconvBackprop, GuidedBackprop, ModifiedBackprop
    from .zoo import ModelSpec, list_models, load_model


# Names that load without a framework; every other one first checks that Keras runs on a backend
# saliency_kit supports (TensorFlow, JAX or PyTorch), so another one (KERAS_BACKEND=numpy) gets one
# clear error, not an ImportError from deep inside.
_WITHOUT_FRAMEWORK = {"methods", "render", "gallery", "Explanation", "list_models", "ModelSpec", "backend"}


def __getattr__(name: str):
    if (name in _NAMES or name in _SUBMODULES) and name not in _WITHOUT_FRAMEWORK:
        require_supported_backend()
    if name in _NAMES:
        value = getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{_SUBMODULES[name]}", __name__)
    else:
        raise AttributeError(f"module 'saliency_kit' has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return __all__
