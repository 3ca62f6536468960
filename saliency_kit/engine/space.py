"""The space an explanation lives in when it is not one model input: several inputs, an input's
embedding, an inner layer.

A :class:`Space` names the *parts* a request explains — model inputs (:class:`Part` with
``input`` set) or the outputs of inner layers (``layer`` set: an ``Embedding`` for token ids, any
layer for ``attribute_to=LAYER``) — and the model inputs every row carries (the *held* inputs:
all of the model's inputs, in its graph order, at the values the user gave). The engine's points
are then one array ``[B, *part.shape]`` for one part, or the parts flattened and packed side by
side ``[B, P]`` (``P = Σ size(part)``) for several, so a method's formula runs unchanged; a
kernel places each part back where it belongs (:meth:`Space.place`): a model input is replaced
by it, a layer's output is swapped for it while the model runs. The held inputs travel through
the engine's chunking with the rows (noisy copies and path points included), so the inputs a
request does not explain keep their values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model.placed import Placed

__all__ = ["Part", "Space"]


@dataclass(frozen=True)
class Part:
    """One explained part. ``name``: the input's name, or the layer's path; ``input``: its index
    among the model's inputs (graph order) for an input part; ``layer``: the path of the layer
    whose output it is, else ``None``; ``shape``/``dtype``: one row's; ``embedding``: integer
    ids explained at the output of the layer that reads them (token ids at their ``Embedding``'s:
    ``layer`` is that layer), ``reads`` the label of their input kind."""

    name: str
    input: int | None
    layer: str | None
    shape: tuple
    dtype: str
    embedding: bool = False
    reads: str = "embedding"

    @property
    def kind(self) -> str:
        """What ``Explanation.parts`` calls it: its input kind's label for ids, else ``"input"`` or ``"layer"``."""
        return self.reads if self.embedding else "input" if self.input is not None else "layer"

    @property
    def size(self) -> int:
        return int(math.prod(self.shape))


@dataclass(frozen=True)
class Space:
    """The parts a request explains, and how the model's inputs are laid out.

    ``lookup``: the one part is an embedding's output (token ids) and the engine's rows are its
    token ids ``[B, *part.shape[:-1]]``, embedded inside the kernel by its layer; otherwise
    the rows are the points themselves. ``fills``: ``((option name, token id), ...)``, array
    options (a baseline) that hold one token at every position, embedded inside the kernel too
    (:meth:`fill`; the host passes zeros of their shape)."""

    parts: tuple
    num_inputs: int
    lookup: bool = False
    fills: tuple = ()

    def __post_init__(self) -> None:
        if (self.lookup or self.fills) and (len(self.parts) != 1 or not self.parts[0].embedding or not self.lookup):
            raise ValueError(
                "a space whose rows are token ids holds one embedding part, and only such a space fills options "
                f"with a token's embedding; received parts {[(p.name, p.embedding) for p in self.parts]}, "
                f"lookup={self.lookup}, fills={self.fills}."
            )

    @property
    def packed(self) -> bool:
        return len(self.parts) > 1

    @property
    def shape(self) -> tuple:
        """One row of points: the part's shape, or ``(P,)`` packed."""
        if not self.packed:
            return tuple(self.parts[0].shape)
        return (sum(p.size for p in self.parts),)

    @property
    def dtype(self) -> str:
        dtypes = {p.dtype for p in self.parts}
        return dtypes.pop() if len(dtypes) == 1 else "float32"

    @property
    def segments(self) -> tuple:
        """``((offset, size), ...)`` of each part in a packed row (one ``(0, size)`` unpacked)."""
        out, offset = [], 0
        for part in self.parts:
            out.append((offset, part.size))
            offset += part.size
        return tuple(out)

    @property
    def held_inputs(self) -> tuple:
        """The model inputs (graph order) a kernel must be given: all but those an input part
        replaces (an embedding's token ids still run the model up to the embedding)."""
        replaced = {p.input for p in self.parts if p.layer is None}
        return tuple(i for i in range(self.num_inputs) if i not in replaced)

    def key(self) -> tuple:
        return (self.num_inputs, self.parts, self.lookup, self.fills)

    # -- NumPy ------------------------------------------------------------------------------------
    def pack(self, arrays: list) -> np.ndarray:
        """The parts' arrays ``[B, *shape_i]`` as points ``[B, *self.shape]``."""
        if not self.packed:
            return np.asarray(arrays[0], dtype=self.dtype)
        return np.concatenate([np.reshape(a, (len(a), -1)) for a in arrays], axis=1, dtype=self.dtype, casting="unsafe")

    def unpack(self, array: np.ndarray, lead: int = 2) -> list:
        """Results ``[*lead axes, *self.shape]`` as one array per part ``[*lead axes, *shape_i]``."""
        if not self.packed:
            return [array]
        head = array.shape[:lead]
        return [
            array[..., offset : offset + size].reshape(*head, *part.shape)
            for part, (offset, size) in zip(self.parts, self.segments)
        ]

    # -- inside a kernel -----------------------------------------------------------------------------
    def fill(self, options: dict, embed: Any) -> dict:
        """``options`` with each of :attr:`fills` replaced by the embedding of its token at every
        position (``embed(ids [1, T]) -> [1, T, D]``, the part's layer), in the shape and dtype
        the option has."""
        from keras import ops

        out = dict(options)
        part = self.parts[0]
        for name, token in self.fills:
            embedded = embed(ops.full((1, *part.shape[:-1]), token, dtype="int32"))[0]
            given = ops.convert_to_tensor(out[name])
            out[name] = ops.broadcast_to(ops.cast(embedded, given.dtype), tuple(given.shape))
        return out

    def place(self, points: Any, held: Any) -> Any:
        """``points [rows, *self.shape]`` and the held inputs (:attr:`held_inputs`, each
        ``[rows, ...]``) as what the model runs on: input parts take their input's place, layer
        parts swap their layer's output."""
        from keras import ops

        inputs: list = [None] * self.num_inputs
        for index, value in zip(self.held_inputs, held):
            inputs[index] = value
        swaps: dict = {}
        values = [points]
        if self.packed:  # one split (its gradient one concatenation), not a slice (a zero-padded row) per part
            pieces = ops.split(points, [offset for offset, _ in self.segments[1:]], axis=1)
            values = [ops.reshape(piece, [-1, *part.shape]) for piece, part in zip(pieces, self.parts)]
        for part, value in zip(self.parts, values):
            if part.layer is None:
                inputs[part.input] = ops.cast(value, part.dtype)
            else:
                swaps[part.layer] = ops.cast(value, part.dtype)
        return Placed(inputs, swaps)
