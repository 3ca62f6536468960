"""Scores: which numbers the gradients are taken of, and taps on inner layers.

:class:`ScoreView` is a callable ``view(x) -> [n, C]`` giving the logits behind a final softmax/sigmoid
(``score="logits"``) or the outputs as they are (``score="output"``); ``view(x, tap=path)`` also returns
that layer's activations (Grad-CAM), and ``view(x, tap=Tap(path, i))`` (:mod:`.taps`) those of the one
call of a layer called more than once (a branch shared by two inputs) that model input ``i`` reaches.
The user's model is never changed: the logits are computed by re-running the model's own functional
graph with its final activation skipped.

Where the logits are found:

* a layer with a fused ``activation="softmax"``/``"sigmoid"`` (``Dense``, ``Conv2D``, ...): re-run
  with a linear twin that shares its variables;
* any other last layer whose computation ends in a ``Sigmoid``/``Softmax`` op, whatever it is
  written as (an ``Activation`` or ``Softmax`` layer, a ``Lambda`` around ``tf.nn.sigmoid`` or a
  lambda calling it, a ``keras.ops`` node, a layer of your own, a subclassed model): recognised
  by tracing it (:mod:`.squash`), and run with the squash's input taken as its output;
* any of these followed by layers that keep values (``Dropout``, ``Identity``,
  ``Activation("linear")``, ``Reshape``, ``Flatten``, ...), or inside a nested
  Functional/Sequential model at the end.

Where a softmax/sigmoid is there but the values before it cannot be reached (it ends a separately compiled
``tf.function`` the model calls), a warning says so once per model and ``view.differentiated`` is
``"output"``: that is what the gradients are of.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np

from . import keras_private
from .copy import input_signature, probe_input
from .inspect import traced_shape
from .placed import Placed
from .squash import eager_or_traced, traced_squash
from .taps import Reach, Tap, inside, not_reached, path_of, recording
from .walker import is_graph_model

__all__ = ["ScoreView", "score_columns", "callable_columns", "final_squash", "output_structure", "output_shapes"]

_SQUASHERS = ("softmax", "sigmoid")
# layers that pass values through unchanged (at inference): a squash before them is still final
_VALUE_KEEPING = (
    keras.layers.Dropout,
    keras.layers.Identity,
    keras.layers.Reshape,
    keras.layers.Flatten,
    keras.layers.GaussianNoise,
    keras.layers.GaussianDropout,
    keras.layers.AlphaDropout,
    keras.layers.SpatialDropout1D,
    keras.layers.SpatialDropout2D,
    keras.layers.SpatialDropout3D,
    keras.layers.ActivityRegularization,
)
_warned: weakref.WeakSet = weakref.WeakSet()
_traced_memo: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # layer -> (token, squash)


def _squasher_name(fn: Callable) -> str | None:
    """``"softmax"``/``"sigmoid"`` for those functions (Keras' or ``tf.nn``'s), else None."""
    name = getattr(fn, "__name__", None) or type(fn).__name__.lower()
    name = name.removesuffix("_v2")  # tf.nn.softmax is softmax_v2
    return name if name in _SQUASHERS else None


def _is_linear(fn: Callable) -> bool:
    return getattr(fn, "__name__", None) == "linear"


def _keeps_values(op: Any) -> bool:
    if isinstance(op, _VALUE_KEEPING):
        return True
    return isinstance(op, keras.layers.Activation) and _is_linear(op.activation)


def _fused(op: Any) -> bool:
    """A weighted layer with Keras' own softmax/sigmoid as its ``activation`` argument (on
    TensorFlow; JAX's traced program and PyTorch's calls show it, and a twin's config would import
    TensorFlow)."""
    if isinstance(op, (keras.layers.Activation, keras.Model)) or keras.backend.backend() != "tensorflow":
        return False
    activation = getattr(op, "activation", None)
    keras_own = (getattr(activation, "__module__", "") or "").startswith("keras")
    return activation is not None and _squasher_name(activation) is not None and keras_own


def _specs(op: Any) -> list | None:
    """``(shape, dtype)`` of each input of ``op``'s (first) call in a functional graph, or of a model."""
    if isinstance(op, keras.Model) and not keras_private.inbound_nodes(op):
        return [(tuple(shape), dtype) for shape, dtype in input_signature(op)]
    inputs = keras_private.first_call_inputs(op)
    if not inputs or not all(keras_private.has_producer(t) for t in inputs):
        return None
    return [(tuple(t.shape), keras.backend.standardize_dtype(t.dtype)) for t in inputs]


def _traced(op: Any) -> tuple[str, str] | None:
    """``("traced" | "opaque", squash)`` when ``op``'s computation ends in a softmax/sigmoid.

    Traced once per layer (and again when its ``activation`` or ``function`` is replaced)."""

    token = (getattr(op, "activation", None), getattr(op, "function", None))
    known = _traced_memo.get(op)
    if known is not None and all(a is b for a, b in zip(known[0], token)):
        return known[1]
    specs = _specs(op)
    found = traced_squash(_call_op(op), specs, getattr(op, "variables", ())) if specs else None
    _traced_memo[op] = (token, found)
    return found


def _squash_kind(op: Any) -> str | None:
    """``"fused"`` (re-run with a linear twin), ``"traced"`` (take the squash's input),
    ``"nested"`` (a functional model ending in one), ``"opaque"`` (one that cannot be looked
    behind) or ``None``."""
    if is_graph_model(op):
        inner = final_squash(op)
        return None if inner is None else "opaque" if _leaf_kind(inner) == "opaque" else "nested"
    if _fused(op):
        return "fused"
    found = _traced(op)
    return found[0] if found else None


def _leaf_kind(squash: Any) -> str:
    kind, op = squash
    return _leaf_kind(final_squash(op)) if kind == "nested" else kind


def final_squash(model: keras.Model) -> tuple[str, Any] | None:
    """How ``model``'s output squashes its logits: ``(kind, op)`` or ``None``.

    ``op`` is the layer whose computation ends in the softmax/sigmoid (followed only by
    value-keeping layers); ``kind`` is ``"fused"``, ``"traced"``, ``"nested"`` (``op`` is a model
    that itself ends in one) or ``"opaque"`` (the values before it cannot be reached). A
    subclassed ``model`` is its own ``op``.
    """
    graph = keras_private.functional_graph(model)
    if graph is None:
        if not isinstance(model, keras.Model):
            return None
        found = _traced(model)
        return (found[0], model) if found else None
    if len(graph.outputs) != 1:
        return None
    op = keras_private.producer(graph.outputs[0])
    while _keeps_values(op):
        inputs = keras_private.first_call_inputs(op)
        if not inputs or len(inputs) != 1 or not keras_private.has_producer(inputs[0]):
            return None
        op = keras_private.producer(inputs[0])
    kind = _squash_kind(op)
    return (kind, op) if kind else None


def _linear_twin(layer: Any) -> keras.layers.Layer:
    """A twin of ``layer`` with a linear activation that *shares* ``layer``'s variables.

    Built from the layer's config; each variable attribute is pointed at the original variable
    (so later training of the user's model is seen), and the result is checked numerically.
    """
    config = dict(layer.get_config())
    config["activation"] = "linear"
    twin = type(layer).from_config(config)
    input_shape = tuple(layer.input.shape)
    twin.build(input_shape)
    for attribute, value in vars(layer).items():
        if isinstance(value, keras.Variable):
            mine = getattr(twin, attribute, None)
            if not isinstance(mine, keras.Variable) or tuple(mine.shape) != tuple(value.shape):
                raise ValueError(
                    f"cannot separate the {_squasher_name(layer.activation)} of layer "
                    f"{layer.name!r} from its weights; use score='output'; received {type(layer).__name__}."
                )
            object.__setattr__(twin, attribute, value)
    shape = tuple(2 if s is None else s for s in input_shape[1:])
    probe = np.random.default_rng(0).normal(size=(2, *shape)).astype(layer.input.dtype)
    expected = keras.ops.convert_to_numpy(layer(probe))
    got = keras.ops.convert_to_numpy(layer.activation(twin(probe)))
    if not np.allclose(expected, got, rtol=1e-3, atol=1e-4):
        raise ValueError(
            f"cannot compute the logits of layer {layer.name!r} (its linear twin disagrees); "
            f"use score='output'; received {type(layer).__name__}."
        )
    return twin


def _call_op(op: Any) -> Callable:
    """``op`` called as ``keras.Model.call`` would, with ``training=False``."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if keras_private.call_takes_training(op):
            kwargs["training"] = False
        return op(*args, **kwargs)

    return call


class ScoreView:
    """``view(x) -> [n, C]``: the score vector whose entries the targets pick.

    Args:
        model: a Keras model with one input (Functional, Sequential or subclassed).
        score: ``"logits"`` (values before a final softmax/sigmoid, if the model has one) or
            ``"output"`` (the model's output as it is).

    ``view(x, tap="outer/inner")`` returns ``(scores, activations_of_that_layer)``;
    ``view(x, tap=Tap("outer/inner", i))`` those of its call on the path from model input ``i``.
    ``view.differentiated`` is ``"logits"`` or ``"output"``: what the scores really are (``"output"``
    when ``score="logits"`` was asked of a model whose softmax/sigmoid cannot be looked behind;
    a warning says so once per model).
    The model always runs with ``training=False`` (Dropout off, BatchNorm statistics unused
    and unchanged). Subclassed models are scored on their output and cannot be tapped.
    """

    def __init__(self, model: keras.Model, score: str = "logits"):
        if score not in ("logits", "output"):
            raise ValueError(f"score must be 'logits' or 'output'; received {score!r}.")
        self._model = weakref.ref(model)  # the engine caches views per model: never keep it alive
        self.score = score
        self._squash = final_squash(model) if score == "logits" else None
        self.differentiated = score
        self._twins: dict[int, object] = {}
        if self._squash is not None and _leaf_kind(self._squash) == "opaque":
            self._squash = None
            self.differentiated = "output"
            if model not in _warned:
                _warned.add(model)
                warnings.warn(
                    f"score='logits': model {model.name!r} ends in a softmax/sigmoid inside a separately "
                    "compiled tf.function (on JAX: a function with a differentiation rule of its own), and the "
                    "values before it cannot be reached; the gradients "
                    "are of the model's output (recorded as score='output').",
                    stacklevel=3,
                )
        elif self._squash is not None:
            self._prepare_twins(model)

    def _prepare_twins(self, model: keras.Model) -> None:
        found = final_squash(model)
        if found is None:
            return
        kind, op = found
        if kind == "fused":
            self._twins[id(op)] = _linear_twin(op)
        elif kind == "nested":
            self._prepare_twins(op)

    @property
    def model(self) -> keras.Model:
        model = self._model()
        if model is None:
            raise RuntimeError("the model of this score view no longer exists")
        return model

    @property
    def strips_activation(self) -> bool:
        """Whether the view removes a final softmax/sigmoid."""
        return self._squash is not None

    # -- running the graph ---------------------------------------------------------------------
    def _run(
        self,
        model: keras.Model,
        x: Any,
        taps: tuple,
        strip: bool,
        taken: dict,
        prefix: str = "",
        swaps: dict | None = None,
        reach: Reach | None = None,
        shifts: dict | None = None,
    ) -> Any:
        """Run ``model``'s graph on ``x`` (one input, or a list); ``taps``: ``(path below this
        model, key)``, each call's activations to ``taken[key]`` (:func:`.taps.recording`); a
        layer whose path is in ``swaps`` returns the tensor there."""
        swaps = swaps or {}
        graph = keras_private.functional_graph(model)
        if graph is None:
            shown = ", ".join(prefix + "/".join(parts) for parts, _ in taps) or None
            raise ValueError(
                f"cannot look inside model {model.name!r}: it is a subclassed keras.Model "
                f"({type(model).__name__}), whose layers cannot be tapped from outside. Grad-CAM and unit "
                "targets need a functional or Sequential model (build one from its layers), or use a "
                f"gradient method; received layer {shown!r}."
            )

        squash = final_squash(model) if strip else None
        kind, final = squash if squash else (None, None)

        def recorder(op: Any, fn: Callable) -> Callable:
            return recording(fn, [key for parts, key in taps if parts == (op.name,)], taken, reach, self.model, shifts)

        def operation_fn(op: Any) -> Callable:
            inner = tuple((parts[1:], key) for parts, key in taps if len(parts) > 1 and parts[0] == op.name)
            if (op.name,) in swaps:
                return recorder(op, lambda *args, swapped=swaps[(op.name,)], **kwargs: swapped)
            inner_swaps = {path[1:]: value for path, value in swaps.items() if len(path) > 1 and path[0] == op.name}
            if op is final and kind == "traced":  # a tap on the stripped layer sees its logits
                return recorder(op, eager_or_traced(_call_op(op), getattr(op, "variables", ())))
            if op is final and kind == "fused":
                return recorder(op, _call_op(self._twins[id(op)]))
            if (op is final or inner or inner_swaps) and is_graph_model(op):
                return recorder(
                    op,
                    lambda *args, **kwargs: self._run(
                        op,
                        args[0] if len(keras_private.functional_graph(op).inputs) == 1 else keras.tree.flatten(args[0]),
                        inner,
                        strip=op is final,
                        taken=taken,
                        prefix=f"{prefix}{op.name}/",
                        swaps=inner_swaps,
                        reach=reach,
                        shifts=shifts,
                    ),
                )
            if inner or inner_swaps:  # layers inside a custom layer
                where = f"{prefix}{op.name}"
                fn = inside(op, _call_op(op), inner, inner_swaps, taken, reach, self.model, shifts, where)
                return recorder(op, fn)
            return recorder(op, _call_op(op))

        outputs = keras_private.run_graph(graph, x if isinstance(x, list) else [x], operation_fn)
        if len(graph.outputs) == 1 and isinstance(outputs, (list, tuple)):
            return outputs[0]
        return outputs

    def raw(
        self, x: Any, taps: Sequence[str | Tap] = (), strip: bool = True, shifts: dict | None = None
    ) -> tuple[Any, dict]:
        """``(values, {tap: activations})``: the model's outputs (its structure; the logits of a
        single output with a final softmax/sigmoid under ``score="logits"``, unless
        ``strip=False``) and the activations of each tap: a path (a layer called once) or a
        :class:`.taps.Tap`; ``ValueError`` for no such call, or several. ``shifts`` (``{tap:
        zeros of its shape}``) are added where the model reads those taps (:func:`.taps.recording`)."""
        taken: dict = {}
        strip = strip and self.strips_activation
        swaps, called = {}, x
        if isinstance(x, Placed):
            swaps = {tuple(path.split("/")): value for path, value in x.swaps.items()}
            x = x.inputs[0] if len(x.inputs) == 1 else x.inputs
            called = keras_private.pack_inputs(self.model, x) if isinstance(x, list) else x
        if not taps and not strip and not swaps:
            return self.model(called, training=False), taken
        if not taps and not swaps and self._squash is not None and self._squash[1] is self.model:  # subclassed
            return eager_or_traced(_call_op(self.model), self.model.variables)(called), taken
        wanted = tuple((tuple(path_of(tap).split("/")), tap) for tap in taps)
        reach = Reach(x if isinstance(x, list) else [x]) if any(isinstance(tap, Tap) for tap in taps) else None
        values = self._run(self.model, x, wanted, strip, taken, swaps=swaps, reach=reach, shifts=shifts)
        missing = [tap for tap in taps if tap not in taken]
        if missing:
            raise ValueError(not_reached(self.model, missing[0]))
        return values, taken

    def values(self, x: Any, tap: str | Tap | None = None) -> tuple[Any, Any]:
        """The logits (or outputs) for ``x``, and the tapped activations when ``tap`` is given."""
        values, taken = self.raw(x, (tap,) if tap else ())
        return values, taken.get(tap)

    def __call__(self, x: Any, tap: str | Tap | None = None) -> Any:
        values, activation = self.values(x, tap)
        if tap is None:
            return values
        return values, activation


def _output_spec(model: keras.Model) -> tuple[tuple, str] | None:
    """``(shape, dtype)`` of the model's single output, or ``None`` for several outputs."""
    if is_graph_model(model):
        outputs = model.outputs
        if len(outputs) != 1:
            return None
        return tuple(outputs[0].shape), keras.backend.standardize_dtype(outputs[0].dtype)

    # a subclassed model: run it once on a generated input
    outputs = keras.tree.flatten(model(probe_input(model), training=False))
    if len(outputs) != 1:
        return None
    return (None, *outputs[0].shape[1:]), keras.backend.standardize_dtype(outputs[0].dtype)


def output_structure(model: keras.Model) -> Any:
    """The model's output structure with each output's shape (a tuple, batch axis ``None``) as
    its leaf: one tuple, a list of them, or a dict of them."""
    if is_graph_model(model):
        outputs = model.output
    else:
        outputs = model(probe_input(model), training=False)
    structure = keras.tree.map_structure(lambda t: (None, *tuple(t.shape)[1:]), outputs)
    if isinstance(structure, tuple) and structure and isinstance(structure[0], tuple):
        structure = list(structure)
    return structure


def output_shapes(model: keras.Model) -> list:
    """The shape of each of the model's outputs (batch axis ``None``), flattened."""
    structure = output_structure(model)
    if isinstance(structure, dict):
        return list(structure.values())
    return structure if isinstance(structure, list) else [structure]


def score_columns(model: keras.Model) -> int | None:
    """How many columns the score vector has: the model's classes ``C``; ``None`` when the
    model's output is not ``[B, C]``."""
    spec = _output_spec(model)
    if spec is None or len(spec[0]) != 2 or spec[0][-1] is None:
        return None
    return int(spec[0][-1])


def callable_columns(model: keras.Model, score_fn: Callable) -> int:
    """``K`` of a callable target ``score_fn(values) -> [B] or [B, K]`` on ``model``'s one output:
    traced symbolically (nothing runs); ``ValueError`` for another shape or several outputs."""
    spec = _output_spec(model)
    if spec is None:
        raise ValueError("a score_fn target needs a model with exactly one output.")
    shape, dtype = spec
    try:
        out_shape = traced_shape(score_fn, (3, *shape[1:]), dtype)
    except Exception as err:
        raise ValueError(
            f"targets callable failed on outputs of shape [B, {', '.join(map(str, shape[1:]))}]: {err}"
        ) from None
    if len(out_shape) not in (1, 2) or out_shape[0] != 3 or (len(out_shape) == 2 and not out_shape[1]):
        raise ValueError(f"targets callable must return a [B] or [B, K] tensor; for B=3 it returned shape {out_shape}.")
    return 1 if len(out_shape) == 1 else int(out_shape[1])
