"""The built-in methods, imported in this order (the order of ``names()`` and ``saliency methods``)."""
from . import gradient, integrated_gradients, smoothgrad, gradcam, occlusion  # noqa: F401,I001
