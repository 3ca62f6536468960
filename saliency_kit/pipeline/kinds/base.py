"""The declaration of an input kind (:class:`IdsKind`) and the registry of them (see the package)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import keras

__all__ = ["IdsKind", "register", "unregister", "kinds", "kind_of", "reader", "explained_by_default", "HELD_BY_NAME"]

#: Integer inputs whose name contains one of these are held by default, not explained.
HELD_BY_NAME = ("segment", "position", "type", "mask")


@dataclass(frozen=True)
class IdsKind:
    """Integer inputs explained at the output of the layer that reads them (see the module).

    Attributes:
        label: what :attr:`~saliency_kit.Explanation.parts` calls such a part (``"embedding"``).
        reads: ``reads(layer) -> bool``: the layer is of this kind.
        vocabulary: ``vocabulary(layer) -> int | None``: the ids it takes are ``[0, V)``
            (``None``: not checked).
        layer_name: what errors call the layer (``"Embedding"``).
        summary: one line for the documentation.
    """

    label: str
    reads: Callable[[Any], bool]
    vocabulary: Callable[[Any], int | None]
    layer_name: str
    summary: str = ""

    def check_ids(self, layer: Any, path: str, ids: Any) -> None:
        """``ValueError`` naming the first of ``ids`` outside the layer's vocabulary, if any."""
        import numpy as np

        ids = np.asarray(ids)
        size = self.vocabulary(layer)
        if isinstance(size, int) and ids.size and (ids.min() < 0 or ids.max() >= size):
            at = np.argwhere((ids < 0) | (ids >= size))[0]
            raise ValueError(
                f"token ids for the {self.layer_name} {path!r} must lie in [0, {size}), its vocabulary; received "
                f"{ids[tuple(at)]} at position {at.tolist()}."
            )


_KINDS: dict[str, IdsKind] = {}


def register(kind: IdsKind) -> IdsKind:
    """Add ``kind`` (its ``label`` unique); returns it. ``ValueError`` if the label is taken."""
    if not isinstance(kind, IdsKind):
        raise TypeError(f"register takes an IdsKind; received {type(kind).__name__}.")
    if kind.label in _KINDS or kind.label in ("input", "layer"):
        raise ValueError(f"an input kind is already called {kind.label!r}; received another of that label.")
    _KINDS[kind.label] = kind
    return kind


def unregister(label: str) -> IdsKind:
    """Remove the kind ``label`` and return it (``KeyError`` if there is none)."""
    return _KINDS.pop(label)


def kinds() -> tuple[IdsKind, ...]:
    """Every declared kind, in the order they were registered (the built-ins first)."""
    return tuple(_KINDS.values())


def kind_of(layer: Any) -> IdsKind | None:
    """The declared kind that reads through ``layer``, if any."""
    return next((kind for kind in kinds() if kind.reads(layer)), None)


def reader(model: keras.Model, index: int) -> tuple[str, IdsKind] | None:
    """``(path, kind)`` of the layer of a declared kind reading integer model input ``index``
    directly (in ``model``'s graph or a nested functional model's), else ``None``."""
    from ...model.model_inputs import reading_layer

    path = reading_layer(model, index, lambda layer: kind_of(layer) is not None)
    if path is None:
        return None
    from ...model.walker import layer_at

    return path, kind_of(layer_at(model, path))  # type: ignore[return-value]


def explained_by_default(model: keras.Model, index: int, name: str) -> tuple[str, IdsKind] | None:
    """:func:`reader` of integer input ``index`` called ``name`` when the default explanation
    explains it: not when its name marks segment, position or type ids, or a mask."""
    if any(word in name.lower() for word in HELD_BY_NAME):
        return None
    return reader(model, index)
