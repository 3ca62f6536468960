"""What a model runs on when a request is not one float input (see :mod:`saliency_kit.engine.space`)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Placed"]


@dataclass
class Placed:
    """``inputs``: every model input in its graph order; ``swaps``: layer path (``"outer/inner"``)
    -> the tensor that layer's output is replaced by while the model runs (an embedding's output,
    an inner layer explained)."""

    inputs: list
    swaps: dict = field(default_factory=dict)
