"""Keras layers that change the gradient and keep the forward pass (see :mod:`.ops`).

Each is the identity on the forward pass, has no weights, and serialises: a model that contains
them saves and loads with ``model.save`` / ``keras.models.load_model`` (safe mode included).
"""

from __future__ import annotations

from typing import Any

import keras

from . import ops as gradients

__all__ = ["GradientScale", "GradientClip", "GradientClipNorm"]


class _GradientLayer(keras.layers.Layer):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.supports_masking = True

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape


@keras.saving.register_keras_serializable(package="saliency_kit")
class GradientScale(_GradientLayer):
    """Identity forward; gradient multiplied by ``factor`` (``-1``: gradient reversal)."""

    def __init__(self, factor: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.factor = float(factor)

    def call(self, inputs: Any) -> Any:
        return gradients.scale(inputs, self.factor)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "factor": self.factor}


@keras.saving.register_keras_serializable(package="saliency_kit")
class GradientClip(_GradientLayer):
    """Identity forward; gradient clipped element-wise to ``[low, high]``."""

    def __init__(self, low: float, high: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if low > high:
            raise ValueError(f"GradientClip needs low <= high; received low={low}, high={high}")
        self.low, self.high = float(low), float(high)

    def call(self, inputs: Any) -> Any:
        return gradients.clip(inputs, self.low, self.high)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "low": self.low, "high": self.high}


@keras.saving.register_keras_serializable(package="saliency_kit")
class GradientClipNorm(_GradientLayer):
    """Identity forward; gradient rescaled to an L2 norm of at most ``max_norm``.

    ``per_sample=False`` (default) takes the norm over the whole batch's gradient, as
    ``tf.clip_by_norm`` does; ``per_sample=True`` clips each sample's gradient separately.
    """

    def __init__(self, max_norm: float, per_sample: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if max_norm <= 0:
            raise ValueError(f"GradientClipNorm needs max_norm > 0; received {max_norm}")
        self.max_norm = float(max_norm)
        self.per_sample = bool(per_sample)

    def call(self, inputs: Any) -> Any:
        axes = list(range(1, len(inputs.shape))) if self.per_sample else None
        return gradients.clip_norm(inputs, self.max_norm, axes=axes)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "max_norm": self.max_norm, "per_sample": self.per_sample}
