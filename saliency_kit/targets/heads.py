"""``output`` (one head of a multi-output model) and ``unit`` (an inner unit's activation).

``output(name_or_index, classes)``: the head's values as they are (a regression head is scored
on its values, a classifier head on its outputs: ``score="output"`` semantics), column k being
component ``classes[:, k]`` of the head flattened to ``[B, D]``; default every component. A
sequence of ints picks the same components for every input, whatever the batch size.

``unit(layer, index)``: the activation of one unit of an inner layer, read from the layer's
output ``a``: an int ``index`` is a channel averaged over the other axes (a neuron of a
``Dense`` output ``[B, D]``; a convolution's channel ``c`` over space,
``mean_{h,w} a[:, h, w, c]``); a tuple is one element ``a[:, *index]``. A list of indices gives
several columns from one forward pass.

Score-CAM's probability of either: the score itself.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from .base import Resolved, Target, TargetRequest, class_info
from .parse import parse, resolve

if TYPE_CHECKING:
    import keras

__all__ = ["Output", "Unit", "output", "unit"]


class Output(Target):
    """See :func:`output`."""

    kind = "output"

    def __init__(self, head: Any, classes: Any = None):
        if isinstance(head, bool) or not isinstance(head, (str, numbers.Integral)):
            raise TypeError(f"output() takes a head's name or index; received {head!r}.")
        self.head = head
        self.classes = classes
        self.key = None  # the head's place in the model's output structure, set when bound

    def kernel_key(self) -> tuple:
        return (type(self), self.key)

    def __repr__(self) -> str:
        return f"output({self.head!r}, classes={self.classes!r})"

    def resolve(self, request: TargetRequest) -> Resolved:
        key, shape = _head(request.model, self.head)
        width = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        if any(s is None for s in shape[1:]):
            raise ValueError(f"output {self.head!r} has an unknown size {list(shape)}; received {self.head!r}.")
        bound = Output(self.head, None)
        bound.key = key
        B = request.num_inputs
        if self.classes is None:
            columns = np.tile(np.arange(width, dtype=np.int64), (B, 1))
        else:
            spec = parse(_every_input(self.classes, B), B, width, request.class_names)
            values = None
            if spec.needs_scores:
                outputs = request.clean_outputs()
                values = np.asarray(outputs[key]).reshape(B, -1)
            columns = resolve(spec, values, B)
        info = class_info(columns, request.class_names, kind="output")
        for row in info:
            for entry in row:
                entry["output"] = self.head
        return Resolved(columns, None, info, bound)

    def outputs(self, values: Any, taps: dict) -> Any:
        return _getitem(values, self.key)

    def score(self, outputs: Any, payload: Any) -> Any:
        from keras import ops

        flat = ops.reshape(outputs, (-1, int(np.prod(outputs.shape[1:]))))
        return ops.take_along_axis(flat, ops.cast(payload, "int32"), axis=1)

    def class_count(self, model: Any) -> int:
        """The head's components (flattened)."""
        shape = _head(model, self.head)[1]
        return int(np.prod(shape[1:])) if len(shape) > 1 else 1


def _every_input(classes: Any, B: int) -> Any:
    """A flat sequence of component indices as the same components for each of ``B`` inputs
    (int ``[B, K]``); anything else as it is (an int, ``"topK"``, an array ``[B, K]``)."""
    if isinstance(classes, (list, tuple, np.ndarray)) and np.ndim(classes) == 1:
        if not any(isinstance(c, str) for c in classes):
            return np.tile(np.asarray(classes), (B, 1))
    return classes


def _head(model: keras.Model, head: Any) -> tuple:
    """``(key into the output structure, shape)`` of the head called or numbered ``head``."""
    from ..model.scores import output_structure

    structure = output_structure(model)
    if isinstance(structure, dict):
        keys = list(structure)
        if isinstance(head, str) and head in structure:
            return head, structure[head]
        if isinstance(head, numbers.Integral) and 0 <= int(head) < len(keys):
            return keys[int(head)], structure[keys[int(head)]]
        raise ValueError(f"output must be one of the model's outputs {keys} (or their index); received {head!r}.")
    heads = structure if isinstance(structure, list) else [structure]
    names = list(getattr(model, "output_names", None) or [])
    if isinstance(head, str):
        if head not in names:
            raise ValueError(
                f"output {head!r} is not an output of model {model.name!r}; its outputs are "
                f"{names or 'unnamed: give an index'}; received {head!r}."
            )
        index = names.index(head)
    else:
        index = int(head)
        if not 0 <= index < len(heads):
            raise ValueError(
                f"output index must lie in [0, {len(heads) - 1}] (model {model.name!r} has "
                f"{len(heads)} outputs); received {head!r}."
            )
    return (index if isinstance(structure, list) else _WHOLE), heads[index]


class _Whole:
    """The key of a single output: the values themselves."""

    def __repr__(self) -> str:
        return "<whole output>"

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, _Whole)


_WHOLE = _Whole()


def _getitem(values: Any, key: Any) -> Any:
    return values if isinstance(key, _Whole) else values[key]


class Unit(Target):
    """See :func:`unit`."""

    kind = "unit"

    def __init__(self, layer: Any, index: Any):
        def check(i: Any) -> Any:  # an int, or a tuple of ints
            if (
                isinstance(i, bool)
                or not isinstance(i, (numbers.Integral, tuple))
                or (isinstance(i, tuple) and not all(isinstance(j, numbers.Integral) for j in i))
            ):
                raise TypeError(
                    f"unit index must be an int (a channel), a tuple of ints (one element) or a list of "
                    f"them; received {index!r}."
                )
            return i

        self.layer = layer
        self.index = [check(i) for i in index] if isinstance(index, list) else check(index)
        self.path: str | None = None
        self.channels: bool | None = None  # True: a channel averaged over the other axes; False: one element
        self.channel_axis = -1

    def kernel_key(self) -> tuple:
        return (type(self), self.path, self.channels, self.channel_axis)

    def __repr__(self) -> str:
        return f"unit({getattr(self.layer, 'name', self.layer)!r}, {self.index!r})"

    def resolve(self, request: TargetRequest) -> Resolved:
        from ..model.walker import find_layer, layer_at

        path = find_layer(request.model, self.layer)
        found = layer_at(request.model, path)
        try:
            shape = tuple(found.output.shape)
        except (AttributeError, ValueError):
            raise ValueError(
                f"unit targets need a layer with one known output shape; layer {path!r} has none "
                f"(a layer called several times, or inside a subclassed model); received {path!r}."
            ) from None
        indices = self.index if isinstance(self.index, list) else [self.index]
        kinds = {isinstance(i, tuple) for i in indices}
        if len(kinds) != 1:
            raise ValueError(f"unit indices must be all ints or all tuples; received {self.index!r}.")
        element = kinds.pop()
        bound = Unit(self.layer, self.index)
        bound.path, bound.channels = path, not element
        bound.taps = (path,)
        first = getattr(found, "data_format", None) == "channels_first" and len(shape) > 2
        bound.channel_axis = 1 if first else -1
        inner = shape[1:]
        if element:
            if any(len(i) != len(inner) for i in indices) or any(s is None for s in inner):
                raise ValueError(
                    f"a tuple unit index needs one int per axis of layer {path!r}'s output "
                    f"{list(shape)}; received {self.index!r}."
                )
            try:
                flat = [int(np.ravel_multi_index(i, inner)) for i in indices]
            except ValueError:
                raise ValueError(
                    f"unit index {self.index!r} is outside layer {path!r}'s output {list(shape)}; "
                    f"received {self.index!r}."
                ) from None
        else:
            size = inner[bound.channel_axis if bound.channel_axis < 0 else 0]
            if any(not 0 <= i < size for i in indices):
                raise ValueError(
                    f"unit channel must lie in [0, {size - 1}] for layer {path!r} (output "
                    f"{list(shape)}); received {self.index!r}."
                )
            flat = [int(i) for i in indices]
        B = request.num_inputs
        columns = np.tile(np.array(flat, np.int64), (B, 1))
        info = [[{"kind": "unit", "layer": path, "index": i} for i in indices] for _ in range(B)]
        return Resolved(columns, None, info, bound)

    def outputs(self, values: Any, taps: dict) -> Any:
        return taps[self.path]

    def score(self, outputs: Any, payload: Any) -> Any:
        from keras import ops

        activations = ops.cast(outputs, "float32")
        if self.channels:
            rank = len(activations.shape)
            axis = rank - 1 if self.channel_axis < 0 else 1
            others = tuple(a for a in range(1, rank) if a != axis)
            activations = ops.mean(activations, axis=others) if others else activations
        else:
            activations = ops.reshape(activations, (-1, int(np.prod(activations.shape[1:]))))
        return ops.take_along_axis(activations, ops.cast(payload, "int32"), axis=1)

    def class_count(self, model: Any) -> int:
        """The layer's units (of a bound unit): its channels, or its elements."""
        from ..model.walker import layer_at

        shape = tuple(layer_at(model, str(self.path)).output.shape)
        if self.channels:
            return int(shape[self.channel_axis])
        return int(np.prod(shape[1:]))


def output(name_or_index: str | int, classes: Any = None) -> Output:
    """One head of a multi-output model: its values (component ``classes``; default all).

    Args:
        name_or_index: the output's name (``model.output_names``, or a key of a dict output) or
            its position.
        classes: which components of the head (flattened to ``[B, D]``) are the columns:
            ``None`` (all ``D``), an int or a sequence of ints (the same components for every
            input, whatever the batch size), an int array ``[B, K]`` (per input), or ``"topK"``
            of the head's values.

    ``Explanation.target_info[b][k]``: ``{"kind": "output", "output", "class"}``.
    """
    return Output(name_or_index, classes)


def unit(layer: Any, index: int) -> Unit:
    """The activation of an inner unit of ``layer`` (a name, a path ``"outer/inner"`` or the layer).

    ``index``: an int, a channel (of a ``Dense`` output: a neuron; of a convolution: its channel
    averaged over space); a tuple, one element of the layer's output ``[B, ...]``; or a list of
    either (several columns). Subclassed models cannot be tapped from outside.

    ``Explanation.target_info[b][k]``: ``{"kind": "unit", "layer", "index"}``.
    """
    return Unit(layer, index)
