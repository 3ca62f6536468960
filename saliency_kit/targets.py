"""Targets and scores: which numbers the attributions explain.

Two jobs live here, with no model runs and no gradients:

* **Targets** — the one parser of target requests, used by ``sk.explain``, the command line and
  ``saliency sanity`` alike: :func:`parse` (every form of API.md: an ``int``, a sequence of ``B``
  ints or class names, an array ``[B, K]``, ``"topK"``, a class name, a callable),
  :func:`parse_string` (one command-line ``--target``), :func:`combine` (several of them) and
  :func:`resolve` (a spec and, for ``topK``, the scores → int ``[B, K]``). Everything is
  checked *before* any model evaluation.

  Strings: ``"topK"`` in any case (``"top1"``, ``"TOP5"``); a string of digits is a class
  index; anything else is a class name, matched case-insensitively (an unknown name gets the
  closest names in the message). A string of digits that is also the *name* of another class
  is refused as ambiguous (the message gives the index of the class so named), never guessed.
* **Scores** (:class:`ScoreView`): a callable ``view(x) -> [n, C]`` giving the values whose
  gradients we take: the logits behind a final softmax/sigmoid (``score="logits"``), the outputs
  as they are (``score="output"``), or ``score_fn(values)`` for a callable target. It can also
  *tap* an inner layer (nested models included), returning that layer's activations alongside,
  which is what Grad-CAM needs. The user's model is never changed: the logits are computed by
  re-running the model's own graph with its final activation skipped.
"""
from __future__ import annotations

import difflib
import numbers
import re
import weakref
from dataclasses import dataclass
from typing import Callable, Sequence

import keras
import numpy as np

__all__ = [
    "TargetSpec",
    "parse",
    "parse_string",
    "combine",
    "resolve",
    "class_names_of",
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
    """A checked target request: ``parts`` in order, each ``("top", K)``, ``("class", index)``
    (every input) or ``("classes", int array [B, k])``; or ``score_fn`` for a callable target.

    Resolved by :func:`resolve` to int ``[B, ΣK]``, the columns of the parts side by side.
    """

    parts: tuple = ()
    score_fn: Callable | None = None

    @property
    def kind(self) -> str:
        """``"callable"``, ``"top"`` (needs the scores), or ``"classes"``."""
        if self.score_fn is not None:
            return "callable"
        return "top" if self.needs_scores else "classes"

    @property
    def needs_scores(self) -> bool:
        """Whether resolving needs the scores of every class (a ``topK`` part)."""
        return any(part[0] == "top" for part in self.parts)


def class_names_of(class_names) -> list[str] | None:
    """``class_names`` (a list of str, or a ``ModelSpec``) as a list, or ``None``."""
    if class_names is None:
        return None
    names = getattr(class_names, "class_names", class_names)
    if names is None:
        return None
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"class_names must be a list of str or a ModelSpec; received {class_names!r}.")
    return list(names)


def _top(text: str, k: int, num_classes: int) -> tuple:
    if k < 1:
        raise ValueError(f"targets string must look like 'top1' or 'top5' (K ≥ 1); received {text!r}.")
    if k > num_classes:
        raise ValueError(
            f"targets={text!r} asks for {k} classes but the model has {num_classes}; use top1 ... "
            f"top{num_classes}; received {text!r}."
        )
    return ("top", k)


def _check_index(index: int, num_classes: int) -> int:
    if not 0 <= index < num_classes:
        raise ValueError(
            f"target class {index} is out of range: the model has {num_classes} classes, so targets "
            f"must lie in [0, {num_classes - 1}]; received {index}."
        )
    return index


def _name_index(text: str, names: Sequence[str] | None) -> int:
    """The index of the class called ``text`` (exactly, else case-insensitively)."""
    if names:
        if text in names:
            return list(names).index(text)
        lowered = [n.lower() for n in names]
        key = text.strip().lower()
        if lowered.count(key) == 1:
            return lowered.index(key)
        if lowered.count(key) > 1:
            raise ValueError(f"class name {text!r} matches several classes when case is ignored; give its "
                             f"exact spelling; received {text!r}.")
        close = difflib.get_close_matches(key, lowered, n=3, cutoff=0.6)
        hint = f" Did you mean {', '.join(repr(names[lowered.index(c)]) for c in close)}?" if close else ""
        sample = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        raise ValueError(
            f"targets string must look like 'top1' or 'top5', a class index or a class name "
            f"(the classes are {sample}).{hint} Received {text!r}."
        )
    raise ValueError(
        "targets string must look like 'top1' or 'top5' or a class index (this model has no class "
        f"names; pass class_names= to use names); received {text!r}."
    )


def parse_string(text: str, num_classes: int, class_names=None) -> TargetSpec:
    """One target string (a command-line ``--target``): ``"topK"`` in any case, a class index
    (digits) or a class name (case-insensitive). ``ValueError`` saying what was expected."""
    if not isinstance(text, str):
        raise TypeError(f"a target string must be a str; received {text!r}.")
    names = class_names_of(class_names)
    stripped = text.strip()
    match = re.fullmatch(r"top(\d+)", stripped, flags=re.IGNORECASE)
    if match:
        return TargetSpec((_top(text, int(match.group(1)), num_classes),))
    if re.fullmatch(r"-?\d+", stripped):
        index = int(stripped)
        if names and stripped in names and names.index(stripped) != index:
            raise ValueError(
                f"target {text!r} is ambiguous: a string of digits is a class index, and {stripped!r} is "
                f"also the name of class {names.index(stripped)}; give {names.index(stripped)} for that "
                f"class, or the name of class {index} for class {index}; received {text!r}."
            )
        return TargetSpec((("class", _check_index(index, num_classes)),))
    return TargetSpec((("class", _check_index(_name_index(text, names), num_classes)),))


def combine(specs: Sequence[TargetSpec]) -> TargetSpec:
    """Several specs side by side (``--target top2 --target star``): their columns in order."""
    parts = tuple(part for spec in specs for part in spec.parts)
    if any(spec.score_fn is not None for spec in specs) or not parts:
        raise ValueError(f"combine takes one or more non-callable target specs; received {list(specs)!r}.")
    return TargetSpec(parts)


def parse(targets, num_inputs: int, num_classes: int | None, class_names=None) -> TargetSpec:
    """Check ``targets`` against ``num_inputs`` inputs and ``num_classes`` outputs.

    Every form of API.md: an ``int`` (every input), a sequence of ``num_inputs`` ints or class
    names (one per input), an int array ``[B, K]``, a string (see :func:`parse_string`) or a
    callable ``score_fn(values) -> [B] or [B, K]``. ``class_names``: a list of str or a
    ``ModelSpec``. Raises ``TypeError`` for wrong types (booleans, floats, other objects) and
    ``ValueError`` for wrong values (out of range, wrong length, unknown names), saying what was
    expected and what was received. Nothing is evaluated. ``num_classes`` may be ``None`` only
    for callable targets (models whose output is not ``[B, C]``).
    """
    if callable(targets) and not isinstance(targets, (str, bytes)):
        return TargetSpec(score_fn=targets)
    if num_classes is None:
        raise ValueError(
            "class targets need a model whose output is [batch, classes]; this model's output "
            "is not. Pass targets=score_fn, a callable returning a [B] or [B, K] score tensor; "
            f"received {targets!r}."
        )
    if isinstance(targets, str):
        return parse_string(targets, num_classes, class_names)
    if isinstance(targets, (bool, np.bool_)):
        raise TypeError(f"targets must be a class index, not a boolean; received {targets!r}.")
    if isinstance(targets, numbers.Integral):
        return TargetSpec((("class", _check_index(int(targets), num_classes)),))
    if isinstance(targets, (numbers.Real, np.floating)):
        raise TypeError(
            f"targets must be an int class index (or 'topK', a class name, a sequence, an array or a "
            f"callable), not a float; received {targets!r}."
        )
    if isinstance(targets, (list, tuple)) and targets and all(isinstance(t, str) for t in targets):
        names = class_names_of(class_names)
        if len(targets) != num_inputs:
            raise ValueError(f"targets must name one class per input ({num_inputs}); received {len(targets)} names.")
        indices = [parse_string(t, num_classes, names).parts[0] for t in targets]
        if any(kind != "class" for kind, _ in indices):
            raise ValueError(f"a sequence of targets holds one class per input, not 'topK'; received {targets!r}.")
        return TargetSpec((("classes", np.array([[i] for _, i in indices], np.int64)),))
    try:
        array = np.asarray(targets)
    except Exception as err:  # ragged lists and the like
        raise ValueError(f"targets could not be read as an array ({err}); received {targets!r}.") from None
    if array.dtype == object:
        raise ValueError(f"targets could not be read as an array of class indices; received {targets!r}.")
    if array.dtype == bool or not (
        np.issubdtype(array.dtype, np.integer)
        or (np.issubdtype(array.dtype, np.floating) and np.all(np.mod(array, 1) == 0))
    ):
        raise ValueError(f"targets must hold integer class indices; received dtype {array.dtype}.")
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2 or array.shape[0] != num_inputs or array.shape[1] < 1:
        raise ValueError(
            f"targets must be an int, 'topK', a class name, a callable, a sequence of {num_inputs} ints "
            f"(one per input) or an array [{num_inputs}, K]; received an array of shape "
            f"{tuple(np.shape(targets))}."
        )
    classes = array.astype(np.int64)
    bad = classes[(classes < 0) | (classes >= num_classes)]
    if bad.size:
        _check_index(int(bad.flat[0]), num_classes)
    return TargetSpec((("classes", classes),))


def resolve(spec: TargetSpec, scores=None, num_inputs: int | None = None, num_columns: int | None = None) -> np.ndarray:
    """Turn a :class:`TargetSpec` into int ``[B, K]``.

    ``scores`` ``[B, C]`` (the scores of every class) are needed when the spec has a ``topK``
    part: the K best classes, best first (ties in class order). ``num_inputs`` gives ``B`` when
    there are no scores. For a callable spec the result is the column index of ``score_fn``'s
    output, ``arange(num_columns)`` on each row.
    """
    if scores is not None:
        num_inputs = len(scores)
    if spec.score_fn is not None:
        return np.tile(np.arange(num_columns, dtype=np.int64), (num_inputs, 1))
    if spec.needs_scores and scores is None:
        raise ValueError("resolving 'topK' targets needs the scores of every class; received scores=None.")
    order = None
    if spec.needs_scores:
        # a stable sort keeps ties in class order, so the choice is reproducible
        order = np.argsort(-np.asarray(scores, np.float64), axis=1, kind="stable")
    columns = []
    for kind, value in spec.parts:
        if kind == "top":
            columns.append(order[:, :value])
        elif kind == "class":
            columns.append(np.full((num_inputs, 1), value))
        else:
            columns.append(value)
    return np.concatenate(columns, axis=1).astype(np.int64)


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


def _single_output(model):
    """The symbolic output of a single-output model (a subclassed one: traced from its build
    shape), or ``None``."""
    try:
        outputs = model.outputs
    except AttributeError:  # a subclassed model has no symbolic outputs
        outputs = None
    if outputs is None:
        config = model.get_build_config() if getattr(model, "built", False) else None
        shape = (config or {}).get("input_shape")
        if shape is None:
            return None
        spec = model.compute_output_spec(keras.KerasTensor(tuple(shape), dtype=keras.config.floatx()))
        outputs = list(spec) if isinstance(spec, (list, tuple)) else [spec]
    return outputs[0] if len(outputs) == 1 else None


def score_columns(model, score_fn: Callable | None = None) -> int | None:
    """How many columns the score vector has: the model's classes ``C``, or ``K`` of ``score_fn``.

    ``None`` when the model's output is not ``[B, C]`` and there is no ``score_fn``. A
    ``score_fn`` is traced symbolically (nothing runs) and must return ``[B]`` or ``[B, K]``.
    """
    output = _single_output(model)
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
