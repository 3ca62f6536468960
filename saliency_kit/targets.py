"""Targets and scores: which numbers the attributions explain.

Two jobs live here, both pure bookkeeping with no gradients:

* **Targets** (:func:`resolve_targets`; :func:`parse_targets` then :func:`resolve_spec`): every
  target form of API.md — an
  ``int``, a sequence of ``B`` ints, an array ``[B, K]``, ``"topK"`` or a callable — checked
  *before* any model evaluation and turned into an int array ``[B, K]``.
* **Scores** (:class:`ScoreView`): a callable ``view(x) -> [n, C]`` giving the values whose
  gradients we take: the logits behind a final softmax/sigmoid (``score="logits"``), the outputs
  as they are (``score="output"``), or ``score_fn(values)`` for a callable target. It can also
  *tap* an inner layer (nested models included), returning that layer's activations alongside,
  which is what Grad-CAM needs. The user's model is never changed: the logits are computed by
  re-running the model's own graph with its final activation skipped.
"""
from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from typing import Callable, Sequence

import keras
import numpy as np

__all__ = [
    "TargetSpec",
    "parse_targets",
    "resolve_targets",
    "resolve_spec",
    "score_columns",
    "ScoreView",
    "layer_paths",
    "find_layer",
    "default_cam_layer",
]

_SQUASHERS = ("softmax", "sigmoid")


# ----------------------------------------------------------------------------------------------
# Targets
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TargetSpec:
    """A checked target request.

    ``kind`` is ``"classes"`` (``classes`` is int ``[B, K]``), ``"top"`` (``k`` classes chosen
    per input from its scores) or ``"callable"`` (``score_fn(values) -> [B]`` or ``[B, K]``).
    """

    kind: str
    classes: np.ndarray | None = None
    k: int = 1
    score_fn: Callable | None = None


def parse_targets(targets, num_inputs: int, num_classes: int | None) -> TargetSpec:
    """Check ``targets`` against ``num_inputs`` inputs and ``num_classes`` outputs.

    Raises ``ValueError`` (saying what was expected and what was received) for out-of-range
    classes, wrong lengths, non-integers, booleans and unknown strings. Nothing is evaluated.
    ``num_classes`` may be ``None`` only for callable targets (models whose output is not
    ``[B, C]``).
    """
    if callable(targets) and not isinstance(targets, (str, bytes)):
        return TargetSpec("callable", score_fn=targets)
    if num_classes is None:
        raise ValueError(
            "class targets need a model whose output is [batch, classes]; this model's output "
            "is not. Pass targets=score_fn, a callable returning a [B] or [B, K] score tensor."
        )
    if isinstance(targets, str):
        match = re.fullmatch(r"top(\d+)", targets.strip().lower())
        if not match or int(match.group(1)) < 1:
            raise ValueError(
                f"targets string must look like 'top1' or 'top5'; received {targets!r}."
            )
        k = int(match.group(1))
        if k > num_classes:
            raise ValueError(
                f"targets={targets!r} asks for {k} classes but the model has {num_classes}."
            )
        return TargetSpec("top", k=k)
    if isinstance(targets, (bool, np.bool_)):
        raise ValueError(f"targets must be a class index, not a boolean ({targets!r}).")
    if isinstance(targets, (int, np.integer)):
        classes = np.full((num_inputs, 1), int(targets), dtype=np.int64)
    else:
        try:
            array = np.asarray(targets)
        except Exception as err:  # ragged lists and the like
            raise ValueError(f"targets could not be read as an array: {err}") from None
        if array.dtype == bool or not (
            np.issubdtype(array.dtype, np.integer)
            or (np.issubdtype(array.dtype, np.floating) and np.all(np.mod(array, 1) == 0))
        ):
            raise ValueError(
                f"targets must hold integer class indices; received dtype {array.dtype}."
            )
        if array.ndim == 1:
            array = array[:, None]
        if array.ndim != 2 or array.shape[0] != num_inputs or array.shape[1] < 1:
            raise ValueError(
                f"targets must be an int, 'topK', a callable, a sequence of {num_inputs} ints "
                f"(one per input) or an array [{num_inputs}, K]; received an array of shape "
                f"{tuple(np.shape(targets))}."
            )
        classes = array.astype(np.int64)
    bad = classes[(classes < 0) | (classes >= num_classes)]
    if bad.size:
        raise ValueError(
            f"target class {int(bad.flat[0])} is out of range: the model has {num_classes} "
            f"classes, so targets must lie in [0, {num_classes - 1}]."
        )
    return TargetSpec("classes", classes=classes)


def resolve_targets(model, inputs, targets="top1", *, score="logits", batch_size=32) -> np.ndarray:
    """Any target form of API.md for ``model`` and ``inputs`` as int ``[B, K]``.

    ``"topK"`` costs one batched forward pass; a callable gives its column indices
    ``arange(K)`` per row. Raises ``ValueError`` like :func:`saliency_kit.explain`.
    """
    from . import engine

    x = engine.check_inputs(model, inputs)
    score_fn = targets if callable(targets) and not isinstance(targets, str) else None
    columns = score_columns(model, score_fn)
    spec = parse_targets(targets, len(x), columns)
    values = None
    if spec.kind == "top":
        values = engine.all_scores(model, x, score=score, batch_size=batch_size)
    return resolve_spec(spec, values, columns, len(x))


def resolve_spec(spec: TargetSpec, all_scores=None, num_columns: int | None = None,
                 num_inputs: int | None = None) -> np.ndarray:
    """Turn a :class:`TargetSpec` into int ``[B, K]``.

    ``all_scores`` ``[B, C]`` (the scores of every class) is needed for ``"top"`` targets; the
    K best classes come first, best first. For callable targets the result is the column index
    of ``score_fn``'s output, ``arange(num_columns)`` on each of ``num_inputs`` rows.
    """
    if spec.kind == "classes":
        return spec.classes
    if spec.kind == "top":
        scores = np.asarray(all_scores)
        # a stable sort keeps ties in class order, so the choice is reproducible
        order = np.argsort(-scores.astype(np.float64), axis=1, kind="stable")
        return order[:, : spec.k].astype(np.int64)
    return np.tile(np.arange(num_columns, dtype=np.int64), (num_inputs, 1))


# ----------------------------------------------------------------------------------------------
# Looking inside models: layer paths
# ----------------------------------------------------------------------------------------------
def _graph_of(model):
    """The functional graph of a Functional or built Sequential model, else ``None``."""
    if isinstance(model, keras.Sequential):
        return getattr(model, "_functional", None)
    if hasattr(model, "_run_through_graph") and hasattr(model, "_nodes_by_depth"):
        return model
    return None


def _is_model(layer) -> bool:
    return isinstance(layer, keras.Model)


def layer_paths(model, prefix: str = ""):
    """Yield ``(path, layer)`` for every leaf layer, nested models expanded in place.

    A layer inside a nested model has the path ``"outer/inner"`` (any depth). Order follows
    ``model.layers`` (topological for functional models).
    """
    for layer in model.layers:
        path = f"{prefix}{layer.name}"
        if _is_model(layer):
            yield from layer_paths(layer, prefix=path + "/")
        elif not isinstance(layer, keras.layers.InputLayer):
            yield path, layer


def _output_rank(layer) -> int | None:
    try:
        return len(layer.output.shape)
    except Exception:  # a layer called several times, or never
        return None


def find_layer(model, name: str) -> str:
    """The full path of the layer ``name`` (``"outer/inner"`` or a bare layer name).

    Raises ``ValueError`` for unknown or ambiguous names, listing the candidates.
    """
    paths = [path for path, _ in layer_paths(model)]
    if name in paths:
        return name
    matches = [p for p in paths if p.split("/")[-1] == name or p.endswith("/" + name)]
    if len(matches) == 1:
        return matches[0]
    spatial = [p for p, layer in layer_paths(model) if _output_rank(layer) == 4]
    if not matches:
        raise ValueError(
            f"layer {name!r} is not in model {model.name!r}. Layers with a spatial 4-D output: "
            f"{spatial or 'none'}."
        )
    raise ValueError(f"layer name {name!r} is ambiguous: it matches {matches}; give the full path.")


def default_cam_layer(model) -> str:
    """Path of the last layer with a spatial 4-D output ``[B, h, w, c]``, nested models included."""
    found = [path for path, layer in layer_paths(model) if _output_rank(layer) == 4]
    if not found:
        raise ValueError(
            f"model {model.name!r} has no layer with a 4-D [batch, height, width, channels] "
            "output, so CAM methods cannot run on it; use a gradient method instead."
        )
    return found[-1]


# ----------------------------------------------------------------------------------------------
# Scores: logits behind a final softmax / sigmoid, taps on inner layers
# ----------------------------------------------------------------------------------------------
def _squasher_name(fn) -> str | None:
    """``"softmax"``/``"sigmoid"`` for those activations (Keras' or ``tf.nn``'s), else None."""
    name = getattr(fn, "__name__", None) or type(fn).__name__.lower()
    name = name.removesuffix("_v2")  # tf.nn.softmax is softmax_v2
    return name if name in _SQUASHERS else None


def _final_operation(graph):
    (output,) = graph.outputs
    return output._keras_history.operation


def _final_squash(model):
    """How ``model``'s output squashes its logits: ``(kind, op)`` or ``None``.

    ``kind`` is ``"pure"`` (an ``Activation``/``Softmax`` layer or a ``keras.ops`` softmax or
    sigmoid: drop it), ``"fused"`` (a layer built with ``activation="softmax"``: re-run it with a
    linear activation) or ``"nested"`` (the final op is a model that itself ends in one).
    """
    graph = _graph_of(model)
    if graph is None or len(graph.outputs) != 1:
        return None
    op = _final_operation(graph)
    if isinstance(op, keras.layers.Activation):
        return ("pure", op) if _squasher_name(op.activation) else None
    if type(op).__name__ in ("Softmax", "Sigmoid"):  # keras.layers.Softmax, keras.ops ops
        return "pure", op
    if _is_model(op):
        return ("nested", op) if _final_squash(op) else None
    activation = getattr(op, "activation", None)
    if activation is not None and _squasher_name(activation):
        return "fused", op
    return None


def _linear_twin(layer):
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
                    f"{layer.name!r} from its weights; use score='output'."
                )
            object.__setattr__(twin, attribute, value)
    probe = np.random.default_rng(0).normal(size=(2, *input_shape[1:])).astype(layer.input.dtype)
    expected = keras.ops.convert_to_numpy(layer(probe))
    got = keras.ops.convert_to_numpy(layer.activation(twin(probe)))
    if not np.allclose(expected, got, rtol=1e-3, atol=1e-4):
        raise ValueError(
            f"cannot compute the logits of layer {layer.name!r} (its linear twin disagrees); "
            "use score='output'."
        )
    return twin


def _call_op(op):
    """``op`` called as ``keras.Model.call`` would, with ``training=False``."""

    def call(*args, **kwargs):
        if "training" in getattr(op, "_call_context_args", ()):
            kwargs["training"] = False
        return op(*args, **kwargs)

    return call


class ScoreView:
    """``view(x) -> [n, C]``: the score vector whose entries the targets pick.

    Args:
        model: a Keras model with one input.
        score: ``"logits"`` (values before a final softmax/sigmoid, if the model has one) or
            ``"output"`` (the model's output as it is).
        score_fn: optional callable; when given the view returns ``score_fn(values)`` reshaped
            to ``[n, K]``, where ``values`` are what ``score`` selects.

    ``view(x, tap="outer/inner")`` returns ``(scores, activations_of_that_layer)``.
    The model always runs with ``training=False`` (Dropout off, BatchNorm statistics unused
    and unchanged). Subclassed models cannot be looked into: they are scored on their output.
    """

    def __init__(self, model, score: str = "logits", score_fn: Callable | None = None):
        if score not in ("logits", "output"):
            raise ValueError(f"score must be 'logits' or 'output'; received {score!r}.")
        self._model = weakref.ref(model)  # the engine caches views per model: never keep it alive
        self.score = score
        self.score_fn = score_fn
        self._squash = _final_squash(model) if score == "logits" else None
        self._twins: dict[int, object] = {}
        if self._squash is not None:
            self._prepare_twins(model)

    def _prepare_twins(self, model):
        kind, op = _final_squash(model)
        if kind == "fused":
            self._twins[id(op)] = _linear_twin(op)
        elif kind == "nested":
            self._prepare_twins(op)

    @property
    def model(self):
        model = self._model()
        if model is None:
            raise RuntimeError("the model of this score view no longer exists")
        return model

    @property
    def strips_activation(self) -> bool:
        """Whether the view removes a final softmax/sigmoid."""
        return self._squash is not None

    # -- running the graph ---------------------------------------------------------------------
    def _run(self, model, x, tap: Sequence[str], strip: bool, taken: dict):
        graph = _graph_of(model)
        if graph is None:
            raise ValueError(
                f"cannot look inside model {model.name!r} (a subclassed model): name a layer of "
                "a functional or Sequential model, or use score='output'."
            )
        final = _final_operation(graph) if strip else None
        kind = _final_squash(model)[0] if strip else None

        def operation_fn(op):
            here = tap and op.name == tap[0]
            if op is final or (here and _is_model(op)):
                inner_tap = tap[1:] if here else ()
                if op is final and kind == "pure":
                    return lambda *args, **kwargs: args[0]
                if op is final and kind == "fused":
                    return _call_op(self._twins[id(op)])
                if _is_model(op):
                    return lambda *args, **kwargs: self._run(
                        op, args[0], inner_tap, strip=op is final, taken=taken
                    )
            if here and len(tap) == 1:
                plain = _call_op(op)

                def record(*args, **kwargs):
                    out = plain(*args, **kwargs)
                    taken["activation"] = out
                    return out

                return record
            return _call_op(op)

        outputs = graph._run_through_graph([x], operation_fn=operation_fn)
        return outputs[0] if isinstance(outputs, (list, tuple)) else outputs

    def values(self, x, tap: str | None = None):
        """The logits (or outputs) for ``x``, and the tapped activations when ``tap`` is given."""
        taken: dict = {}
        if tap is None and not self.strips_activation:
            values = self.model(x, training=False)
        else:
            parts = tuple(tap.split("/")) if tap else ()
            values = self._run(self.model, x, parts, self.strips_activation, taken)
            if tap is not None and "activation" not in taken:
                raise ValueError(f"layer {tap!r} was not reached when running the model.")
        return values, taken.get("activation")

    def __call__(self, x, tap: str | None = None):
        values, activation = self.values(x, tap)
        if self.score_fn is not None:
            values = self.score_fn(values)
            if len(values.shape) == 1:
                values = values[:, None]
        if tap is None:
            return values
        return values, activation


def score_columns(model, score_fn: Callable | None = None) -> int | None:
    """How many columns the score vector has: the model's classes ``C``, or ``K`` of ``score_fn``.

    ``None`` when the model's output is not ``[B, C]`` and there is no ``score_fn``. A
    ``score_fn`` is traced symbolically (nothing runs) and must return ``[B]`` or ``[B, K]``.
    """
    (output,) = model.outputs if len(model.outputs) == 1 else (None,)
    if score_fn is None:
        if output is None or len(output.shape) != 2 or output.shape[-1] is None:
            return None
        return int(output.shape[-1])
    if output is None:
        raise ValueError("a score_fn target needs a model with exactly one output.")
    import tensorflow as tf

    spec = tf.TensorSpec([3, *output.shape[1:]], keras.backend.standardize_dtype(output.dtype))
    try:
        result = tf.function(score_fn, autograph=False).get_concrete_function(spec).structured_outputs
    except Exception as err:
        raise ValueError(
            f"targets callable failed on outputs of shape [B, {', '.join(map(str, output.shape[1:]))}]: {err}"
        ) from None
    shape = tuple(getattr(result, "shape", ()))
    if len(shape) not in (1, 2) or shape[0] != 3 or (len(shape) == 2 and not shape[1]):
        raise ValueError(
            f"targets callable must return a [B] or [B, K] tensor; for B=3 it returned shape {shape}."
        )
    return 1 if len(shape) == 1 else int(shape[1])
