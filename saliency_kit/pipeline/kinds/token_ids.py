"""Token ids: integer inputs read by a ``keras.layers.Embedding`` (or a subclass: LoRA,
quantised, KerasHub's), explained at its output ``[T, D]``; the ids lie in ``[0, input_dim)``."""

from __future__ import annotations

from typing import Any

from .base import IdsKind, register

__all__ = ["TOKEN_IDS"]


def _is_embedding(layer: Any) -> bool:
    import keras

    return isinstance(layer, keras.layers.Embedding)


def _vocabulary(layer: Any) -> int | None:
    size = getattr(layer, "input_dim", None)
    return size if isinstance(size, int) else None


TOKEN_IDS = register(
    IdsKind(
        label="embedding",
        reads=_is_embedding,
        vocabulary=_vocabulary,
        layer_name="Embedding",
        summary="token ids, explained in embedding space at their Embedding's output",
    )
)
