"""One copier for every copy saliency_kit makes of a user's model (rewrite, randomisation).

:func:`copy_model` rebuilds every layer (nested models, wrappers, subclassed models from their
config), copies each layer's state the way Keras' own loading does — ``save_own_variables`` on the
original, ``load_own_variables`` on the copy, which also re-derives state kept outside variables
(``Normalization.finalize_state()``: the adapted mean and variance; EfficientNet's built-in
normalisation) — and then **checks** the copy: both models run on a generated input (from the
model's input shape and dtype) and outputs that differ raise ``ValueError`` naming the first layer
whose output differs (a custom layer with an incomplete ``get_config``, or state outside its
variables, is refused this way rather than explained wrongly).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from . import keras_private
from .walker import is_graph_model

__all__ = [
    "copy_model",
    "check_copy",
    "copy_state",
    "rebuild_layer",
    "layer_config",
    "probe_input",
    "input_signature",
    "layer_outputs",
]


def rebuild_layer(op: Any) -> keras.layers.Layer:
    """A new layer built from ``op``'s config (unbuilt, no state copied)."""
    if isinstance(op, keras.layers.Lambda):
        # The same Python function, rebuilt in memory: no (unsafe) deserialisation of its code.
        return keras.layers.Lambda(
            op.function,
            output_shape=keras_private.lambda_output_shape(op),
            mask=op.mask,
            arguments=op.arguments,
            name=op.name,
            dtype=op.dtype_policy,
        )
    config = layer_config(op)
    try:
        return type(op).from_config(config)
    except Exception as error:  # any failure to rebuild a layer is reported the same way
        trimmed = {key: value for key, value in config.items() if key in _constructor_arguments(type(op))}
        if trimmed != config:  # a get_config() that also returns derived values (KerasHub's ViT patching)
            try:
                return type(op).from_config(trimmed)  # the copy is checked against the original after
            except Exception:  # noqa: BLE001 - the first error is the one to report
                pass
        raise ValueError(
            f"cannot copy layer {op.name!r} ({type(op).__name__}): it cannot be rebuilt from its "
            f"config ({type(error).__name__}: {error}). Give the layer a get_config() that returns "
            f"its constructor arguments; received {type(op).__name__}."
        ) from error


def _constructor_arguments(cls: type) -> set:
    """The keyword arguments ``cls(...)`` names: its ``__init__``'s and its bases' down to Keras'
    ``Layer`` (whose own are the base layer's: ``name``, ``dtype``, ``trainable``, ...)."""
    names: set = set()
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is not None:
            names.update(
                p.name
                for p in inspect.signature(init).parameters.values()
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            )
        if klass is keras.layers.Layer:
            break
    return names | {"name", "dtype", "trainable", "autocast"}


def layer_config(op: Any, activation: Any = None) -> dict:
    """``op.get_config()``, with ``activation`` (default: ``op``'s own) put in as an object.

    A layer whose activation Keras cannot serialise (a ``functools.partial``, a lambda) gets its
    config from a shallow stand-in with a linear activation; the user's layer is not touched.
    """
    if activation is None and not hasattr(op, "activation"):
        return op.get_config()
    try:
        config = op.get_config()
    except TypeError:  # the activation does not serialise
        config = _linear_stand_in(op).get_config()
    if "activation" in config:
        config["activation"] = activation if activation is not None else op.activation
    return config


def _linear_stand_in(op: Any) -> keras.layers.Layer:
    """A bare shallow copy of ``op`` (Keras' own copy pickles) whose activation is linear. A
    recurrent layer's ``activation`` is a read-only view of its cell's: the cell is stood in for."""
    stand_in = object.__new__(type(op))
    stand_in.__dict__.update(op.__dict__)
    if isinstance(getattr(type(op), "activation", None), property) and hasattr(op, "cell"):
        object.__setattr__(stand_in, "cell", _linear_stand_in(op.cell))
    else:
        object.__setattr__(stand_in, "activation", keras.activations.linear)
    return stand_in


def _own_state(layer: Any) -> dict:
    store: dict = {}
    layer.save_own_variables(store)
    return store


def _depth_first(layer: Any, seen: set) -> list:
    if id(layer) in seen:
        return []
    seen.add(id(layer))
    found = [layer]
    for sub in keras_private.sublayers(layer):
        found += _depth_first(sub, seen)
    return found


def _stateful(layer: Any) -> list:
    """``layer`` and every layer inside it that owns variables, depth first in tracking order
    (the same order in a copy, whatever wraps it)."""
    return [sub for sub in _depth_first(layer, set()) if _own_state(sub)]


def copy_state(original: Any, clone: Any) -> None:
    """Copy the state of ``original`` (a layer or model) into ``clone``, layer by layer, as Keras'
    loading does (``load_own_variables``, which re-derives non-variable state).

    Raises ``ValueError`` naming the layer when the two do not hold the same variables.
    """
    sources, targets = _stateful(original), _stateful(clone)
    if len(sources) != len(targets):
        names = [s.name for s in sources]
        raise ValueError(
            f"cannot copy {original.name!r} ({type(original).__name__}): its copy has state in "
            f"{len(targets)} layer(s) where the original has {len(sources)} ({names[:8]}); its "
            f"get_config() does not describe it fully; received {type(original).__name__}."
        )
    for source, target in zip(sources, targets):
        store = _own_state(source)
        mine = _own_state(target)
        if len(store) != len(mine) or any(tuple(store[k].shape) != tuple(mine[k].shape) for k in store if k in mine):
            raise ValueError(
                f"cannot copy layer {source.name!r} ({type(source).__name__}): the rebuilt layer does "
                f"not have the original's variables ({len(mine)} instead of {len(store)}, or other "
                f"shapes); its get_config() does not describe it fully; received {type(source).__name__}."
            )
        target.load_own_variables(store)


# -- generated input ------------------------------------------------------------------------------
def input_signature(model: keras.Model) -> list[tuple[tuple, str]]:
    """``[(shape, dtype)]`` of the model's inputs (``None`` for unknown sizes)."""
    inputs = getattr(model, "inputs", None) if is_graph_model(model) else None
    if inputs:
        return [(tuple(t.shape), keras.backend.standardize_dtype(t.dtype)) for t in inputs]
    shapes = keras_private.built_input_shapes(model)
    if not shapes:
        raise ValueError(
            f"model {getattr(model, 'name', model)!r} has no defined input; build it first (give it a "
            "keras.Input, call it once on a batch, or call model.build(input_shape)); received an "
            "unbuilt model."
        )
    dtype = keras.backend.standardize_dtype(getattr(model, "input_dtype", None) or model.compute_dtype)
    flat: list = []
    for shape in shapes:  # a model built on a list of inputs records one list of shapes
        nested = isinstance(shape, (list, tuple)) and shape and all(isinstance(s, (list, tuple)) for s in shape)
        flat.extend(shape if nested else [shape])
    return [(tuple(shape), dtype) for shape in flat]


def probe_input(model: keras.Model, batch: int = 2, seed: int = 0, size: int = 16) -> Any:
    """A generated input for ``model``: random values of its input shape and dtype (unknown sizes
    become ``batch`` for the first axis and ``size`` for the others); several inputs in the structure
    the model takes them in (a dict keyed as its inputs were, a list)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, dtype in input_signature(model):
        full = tuple(batch if i == 0 else (size if s is None else s) for i, s in enumerate(shape))
        if "int" in dtype:
            arrays.append(rng.integers(0, 2, full).astype(dtype))
        elif dtype == "bool":
            arrays.append(rng.integers(0, 2, full).astype(bool))
        else:
            arrays.append(rng.normal(size=full).astype(dtype))
    return arrays[0] if len(arrays) == 1 else keras_private.pack_inputs(model, arrays)


# -- checking a copy ------------------------------------------------------------------------------
def _numpy_tree(values: Any) -> list[np.ndarray]:
    return [np.asarray(keras.ops.convert_to_numpy(v), dtype=np.float64) for v in keras.tree.flatten(values)]


def _close(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return False
        scale = max(1.0, float(np.nanmax(np.abs(x))) if x.size else 1.0)
        if not np.allclose(x, y, rtol=1e-3, atol=1e-5 * scale, equal_nan=True):
            return False
    return True


def layer_outputs(model: keras.Model, x: Any) -> list[tuple[str, object]]:
    """``[(path, output)]`` of every graph operation of ``model`` run on ``x`` (``training=False``),
    nested Functional/Sequential models expanded in place, in execution order."""
    recorded: list = []
    _run_recording(model, x, "", recorded)
    return recorded


def _run_recording(model: keras.Model, x: Any, prefix: str, recorded: Any) -> Any:
    def operation_fn(op: Any) -> Callable:
        path = f"{prefix}{op.name}"

        def call(*args: Any, **kwargs: Any) -> Any:
            if is_graph_model(op):
                out = _run_recording(op, args[0], f"{path}/", recorded)
            else:
                if keras_private.call_takes_training(op):
                    kwargs["training"] = False
                out = op(*args, **kwargs)
            recorded.append((path, out))
            return out

        return call

    outputs = keras_private.run_graph(keras_private.functional_graph(model), x, operation_fn)
    return outputs[0] if isinstance(outputs, (list, tuple)) and len(outputs) == 1 else outputs


def _probe_run(original: Any) -> tuple:
    """``(x, original's outputs on x)`` for a generated input of one row (a wrong config or lost
    state shows in any row). Unknown sizes are 16, or 4 when the model refuses 16 (a sequence
    model whose position embedding holds fewer positions)."""
    x = probe_input(original, batch=1)
    try:
        return x, _numpy_tree(original(x, training=False))
    except Exception:  # any failure on the longer probe: try a shorter one, else report this one
        shorter = probe_input(original, batch=1, size=4)
        try:
            return shorter, _numpy_tree(original(shorter, training=False))
        except Exception:
            pass
        raise


def check_copy(original: Any, copy: Any, *, what: str = "copy") -> None:
    """Raise ``ValueError`` unless ``copy`` computes what ``original`` computes on a generated input.

    The message names the first layer whose output differs (graph models), or the model.
    """
    x, expected = _probe_run(original)
    got = _numpy_tree(copy(x, training=False))
    if _close(expected, got):
        return
    where = f"model {original.name!r}"
    if is_graph_model(original) and is_graph_model(copy):
        # the copy runs the same graph in the same order (names may differ: Keras renames some)
        for (path, value), (_, mine) in zip(layer_outputs(original, x), layer_outputs(copy, x)):
            if not _close(_numpy_tree(value), _numpy_tree(mine)):
                where = f"layer {path!r}"
                break
    raise ValueError(
        f"the {what} of model {original.name!r} does not compute what the original computes: the "
        f"first difference is at {where}. A layer whose get_config() is incomplete, or that keeps "
        "state outside its variables, cannot be copied; give it a complete get_config() (and "
        f"load_own_variables if it derives state); received a model with {type(original).__name__} at its top."
    )


# -- the copier -----------------------------------------------------------------------------------
def copy_model(model: keras.Model, replace: Any = None, *, check: bool = True, what: str = "copy") -> keras.Model:
    """A checked copy of ``model`` sharing nothing with it.

    Args:
        model: a Functional or Sequential model (nested models and wrappers included), or a built
            subclassed model whose ``get_config``/``from_config`` rebuild it.
        replace: ``replace(op) -> layer | None`` (graph models only): the layer to put in place of
            ``op``, or ``None`` for an ordinary rebuild. A replacement computes what ``op``
            computes and holds ``op``'s variables (in the same order), or none.
        check: compare the copy with ``model`` on a generated input (see :func:`check_copy`).

    Raises:
        TypeError: ``model`` is not a ``keras.Model``.
        ValueError: a layer cannot be rebuilt, its state cannot be copied, or the copy computes
            something else (the message names the first layer that differs).
    """
    if not isinstance(model, keras.Model):
        raise TypeError(f"model must be a keras.Model; received {type(model).__name__}.")
    if is_graph_model(model):
        pairs = []

        def clone_function(op: Any) -> keras.layers.Layer:
            clone = (replace(op) if replace is not None else None) or rebuild_layer(op)
            pairs.append((op, clone))
            return clone

        new_model = keras.models.clone_model(model, clone_function=clone_function, recursive=True)
        for original, clone in pairs:
            if getattr(original, "weights", None) or getattr(clone, "weights", None):
                copy_state(original, clone)
    else:
        if replace is not None:
            raise ValueError(
                f"cannot replace layers inside subclassed model {model.name!r}; received {type(model).__name__}."
            )
        try:
            new_model = type(model).from_config(model.get_config())
        except Exception as error:
            raise ValueError(
                f"cannot copy subclassed model {model.name!r} ({type(model).__name__}): it cannot be "
                f"rebuilt from its config ({type(error).__name__}: {error}); give it get_config() and "
                f"from_config(); received {type(model).__name__}."
            ) from error
        new_model(probe_input(model), training=False)  # build its variables
        copy_state(model, new_model)
    if check:
        check_copy(model, new_model, what=what)
    return new_model
