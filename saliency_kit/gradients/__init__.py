"""Gradient tools: keep the forward pass, change the backward pass.

The functions (:mod:`.ops`: ``scale``, ``clip``, ``clip_norm``, ``straight_through``,
``numpy_function``) and the Keras layers built on them (:mod:`.layers`: ``GradientScale``,
``GradientClip``, ``GradientClipNorm``, also ``sk.layers``), on Keras' TensorFlow, JAX and PyTorch
backends: each backend's own mechanisms are in :mod:`.tf_ops`, :mod:`.jax_ops` and
:mod:`.torch_ops`, imported only on it.
"""

from .ops import clip, clip_norm, numpy_function, scale, straight_through

__all__ = ["scale", "clip", "clip_norm", "straight_through", "numpy_function"]
