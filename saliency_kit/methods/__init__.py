"""Attribution methods, one small module per family, all running on :mod:`saliency_kit.engine`.

=====================  ==========================================  ============================
method                 module                                      map (reduction of the last axis)
=====================  ==========================================  ============================
gradient               :mod:`.gradients`                           max |a|
gradient_x_input       :mod:`.gradients`                           sum
guided_backprop        :mod:`.gradients`                           max |a|
deconvnet              :mod:`.gradients`                           max |a|
integrated_gradients   :mod:`.integrated_gradients`                sum
smoothgrad             :mod:`.smoothgrad`                          as its base method
gradcam                :mod:`.cam`                                 the CAM itself
gradcam_plus_plus      :mod:`.cam`                                 the CAM itself
guided_gradcam         :mod:`.cam`                                 max |a|
occlusion              :mod:`.occlusion`                           mean
=====================  ==========================================  ============================
"""
from __future__ import annotations

# importing a module registers its methods; this order is the order of names() and describe()
from . import gradients  # noqa: F401,I001
from . import integrated_gradients, smoothgrad, cam, occlusion  # noqa: F401,I001
from . import smoothgrad_variants, expected_gradients, blur_ig, guided_ig, scorecam, layercam, rise, xrai  # noqa: F401,I001
from ._base import REGISTRY, Method, Request, Result

__all__ = ["Method", "Request", "Result", "describe", "get", "names"]


def names() -> list[str]:
    """Every method name, in registration order."""
    return list(REGISTRY)


def get(name: str) -> Method:
    """The method called ``name``; ``ValueError`` listing the known names otherwise."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(REGISTRY)}.") from None


def describe() -> list[tuple[str, str]]:
    """``(name, one-line summary)`` for every method, for ``saliency methods``."""
    return [(method.name, method.summary) for method in REGISTRY.values()]
