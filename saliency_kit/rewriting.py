"""``rewrite(model, rule)``: a copy of a Keras model whose ReLU-family activations use ``rule``
on the backward pass.

The copy is made with ``keras.models.clone_model(recursive=True)``: every layer is rebuilt from its
config (nested Sequential and functional models at any depth included), the ReLU-family ones with
the rule bound in as their activation, and then every weight (BatchNorm statistics included) is
copied from the original. The user's model is only read, so gradient functions already traced on
it, and any taken later, keep computing the plain gradient.

What counts as ReLU-family:

- ``keras.layers.ReLU`` (any ``max_value``, ``negative_slope``, ``threshold``) and ``LeakyReLU``;
- ``keras.layers.Activation`` and any layer built with ``activation=`` one of
  ``relu``, ``relu6``, ``leaky_relu`` (by name, from ``keras.activations``, ``keras.ops``,
  ``tf.nn``, or a ``functools.partial`` of those);
- ``keras.ops.relu/relu6/leaky_relu`` and ``keras.activations.relu`` applied directly to a tensor
  while building a functional model.

A ReLU computed inside the ``call`` of a custom layer is invisible from outside and is not rewritten.
"""
from __future__ import annotations

import collections

import keras

from .rules import ModifiedBackprop, ReluFamily, as_rule, relu_family_of_function

__all__ = ["rewrite", "find_relu_activations", "copy_model"]


def _relu_family_of_operation(op) -> ReluFamily | None:
    """The ReLU-family activation computed by ``op`` (a layer or a functional-graph operation)."""
    if isinstance(op, keras.layers.ReLU):
        max_value = None if op.max_value is None else float(op.max_value)
        return ReluFamily(float(op.negative_slope), max_value, float(op.threshold))
    if isinstance(op, keras.layers.LeakyReLU):
        return ReluFamily(negative_slope=float(op.negative_slope))
    if isinstance(op, keras.Model):
        return None
    if isinstance(op, keras.layers.Layer):
        activation = getattr(op, "activation", None)
        return relu_family_of_function(activation) if callable(activation) else None
    # Bare operations recorded in a functional graph (keras.ops.relu(x) on a KerasTensor).
    kind = type(op).__name__
    if kind == "Relu":
        return ReluFamily()
    if kind == "Relu6":
        return ReluFamily(max_value=6.0)
    if kind == "LeakyRelu":
        return ReluFamily(negative_slope=float(op.negative_slope))
    if kind == "ReLU" and hasattr(op, "threshold"):  # keras.activations.relu(x, ...) symbolically
        max_value = None if op.max_value is None else float(op.max_value)
        return ReluFamily(float(op.negative_slope), max_value, float(op.threshold))
    return None


def _activation_name(op) -> str | None:
    """A readable name for a non-ReLU activation in ``op``, for error messages."""
    if isinstance(op, keras.Model):
        return None
    activation = getattr(op, "activation", None)
    if callable(activation):
        name = getattr(activation, "__name__", type(activation).__name__)
        return None if name == "linear" else name
    activation_layers = (keras.layers.Softmax, keras.layers.ELU, keras.layers.PReLU)
    if isinstance(op, activation_layers):
        return type(op).__name__
    return None


def _children(model):
    if isinstance(model, keras.Sequential):
        return list(model.layers)
    return list(getattr(model, "operations", model.layers))


def _is_rebuildable(model) -> bool:
    return isinstance(model, keras.Sequential) or type(model).__name__ == "Functional" or (
        hasattr(model, "operations") and hasattr(model, "_run_through_graph")
    )


def _walk(model, prefix=""):
    """Yield ``(path, op, owner)`` for every operation of ``model``, nested models included."""
    for op in _children(model):
        path = f"{prefix}{op.name}"
        yield path, op, model
        if isinstance(op, keras.Model):
            yield from _walk(op, prefix=f"{path}/")


def find_relu_activations(model) -> list[tuple[str, ReluFamily]]:
    """``[(layer path, ReluFamily)]`` for every ReLU-family activation ``rewrite`` would change.

    Paths of layers inside nested models read ``"outer/inner"``.
    """
    return [(path, family) for path, op, _ in _walk(model)
            if (family := _relu_family_of_operation(op)) is not None]


def _check_rewritable(model, found):
    if not isinstance(model, keras.Model):
        raise TypeError(f"rewrite expects a keras.Model; received {type(model).__name__}")
    if not found:
        others = collections.Counter(
            name for _, op, _ in _walk(model) if (name := _activation_name(op)) is not None
        )
        listed = ", ".join(f"{name} x{count}" for name, count in others.most_common()) or "none"
        raise ValueError(
            f"model {model.name!r} has no ReLU-family activation to rewrite (activations found: "
            f"{listed}). rewrite() changes the backward pass of relu, relu6, leaky_relu, "
            "keras.layers.ReLU and LeakyReLU only; for this model use a plain-gradient method "
            "(e.g. method='gradient' or 'integrated_gradients')."
        )
    for path, op, owner in [("", model, None), *_walk(model)]:
        if isinstance(op, keras.Model) and not _is_rebuildable(op):
            where = f"nested model {path!r}" if path else f"model {model.name!r}"
            raise ValueError(
                f"cannot rewrite {where}: it is a subclassed keras.Model "
                f"({type(op).__name__}) whose layer graph Keras cannot rebuild, so its "
                "activations cannot be swapped. Rebuild it as a functional or Sequential model "
                "(the weights can be copied over with set_weights), then rewrite that."
            )


def _rewritten_clone(op, rule: ModifiedBackprop, family: ReluFamily):
    """A new layer computing what ``op`` computes, with ``rule`` bound in as its activation."""
    bound = rule.bind(family)
    if isinstance(op, keras.layers.Layer) and hasattr(op, "activation") and not isinstance(
        op, (keras.layers.ReLU, keras.layers.LeakyReLU)
    ):
        config = op.get_config()
        if "activation" not in config:
            raise ValueError(
                f"cannot rewrite layer {op.name!r} ({type(op).__name__}): it has a ReLU activation "
                "but its get_config() has no 'activation' entry to rebuild it with"
            )
        config["activation"] = bound
        clone = type(op).from_config(config)
        if getattr(clone, "activation", None) is not bound:
            raise ValueError(
                f"cannot rewrite layer {op.name!r} ({type(op).__name__}): its constructor does not "
                "keep the activation it is given, so the rule could not be put in its place"
            )
        return clone
    # A stand-alone activation (ReLU/LeakyReLU layer or a bare functional op) becomes an
    # Activation layer of the same name.
    dtype = getattr(op, "dtype_policy", None)
    return keras.layers.Activation(bound, name=op.name, dtype=dtype)


def _plain_clone(op):
    if isinstance(op, keras.layers.Lambda):
        # The same Python function, rebuilt in memory: no (unsafe) deserialisation of its code.
        return keras.layers.Lambda(
            op.function, output_shape=op._output_shape, mask=op.mask, arguments=op.arguments,
            name=op.name, dtype=op.dtype_policy,
        )
    try:
        return type(op).from_config(op.get_config())
    except Exception as error:  # any failure to rebuild a layer is reported the same way
        raise ValueError(
            f"cannot rewrite: layer {op.name!r} ({type(op).__name__}) cannot be cloned from its "
            f"config ({type(error).__name__}: {error}). Give the layer a get_config() that "
            "returns its constructor arguments."
        ) from error


def _copy_weights(original, clone):
    """Assign ``original``'s variables to ``clone``'s, variable by variable (no NumPy round trip)."""
    source = getattr(original, "weights", None) or []
    target = getattr(clone, "weights", None) or []
    if len(source) != len(target) or any(tuple(a.shape) != tuple(b.shape) for a, b in zip(source, target)):
        raise ValueError(
            f"cannot rewrite: the rebuilt layer {original.name!r} ({type(original).__name__}) does not "
            f"have the original's weights ({len(target)} variables instead of {len(source)}, or other "
            "shapes); its get_config() does not describe it fully"
        )
    for a, b in zip(source, target):
        b.assign(a.value)


def copy_model(model: keras.Model, replace=None) -> keras.Model:
    """A copy of ``model`` with every layer rebuilt (nested models too) and every weight copied.

    ``replace(op)`` may return the layer to use in place of ``op`` (``None``: an ordinary clone);
    ``Lambda`` layers are rebuilt in memory around the same function. The result shares nothing
    with ``model``.
    """
    pairs = []  # (original, clone) of every rebuilt layer, for copying weights afterwards

    def clone_function(op):
        clone = (replace(op) if replace is not None else None) or _plain_clone(op)
        pairs.append((op, clone))
        return clone

    new_model = keras.models.clone_model(model, clone_function=clone_function, recursive=True)
    if not new_model.built:
        new_model.build(model.inputs[0].shape if model.inputs else None)
    for original, clone in pairs:
        _copy_weights(original, clone)
    return new_model


def rewrite(model: keras.Model, rule) -> keras.Model:
    """A new model whose ReLU-family activations use ``rule`` on the backward pass.

    Args:
        model: a functional or Sequential ``keras.Model`` (nested models of either kind, at any
            depth, are rewritten too). It is never modified.
        rule: ``"guided"`` (:class:`~saliency_kit.GuidedBackprop`), ``"deconv"``
            (:class:`~saliency_kit.DeconvBackprop`) or a :class:`~saliency_kit.ModifiedBackprop`
            instance.

    Returns:
        A new ``keras.Model`` with the same layer names, weights (copied) and outputs on every
        input. Its attribute ``rewritten_layers`` lists the paths of the layers it changed
        (``"outer/inner"`` inside nested models).

    Raises:
        ValueError: the model has no ReLU-family activation (the message names the activations it
            has), ``rule`` is not a rule, or a part of the model cannot be rebuilt (subclassed
            models, layers without a usable ``get_config``).
    """
    rule = as_rule(rule)
    found = list(_walk(model)) if isinstance(model, keras.Model) else []
    targets = {id(op): (path, family) for path, op, _ in found
               if (family := _relu_family_of_operation(op)) is not None}
    _check_rewritable(model, targets)

    rewritten = []

    def replace(op):
        if id(op) not in targets:
            return None
        path, family = targets[id(op)]
        rewritten.append(path)
        return _rewritten_clone(op, rule, family)

    new_model = copy_model(model, replace)

    # In the order of the original model, whatever order the clone visited them in.
    order = {path: i for i, (path, _) in enumerate(targets.values())}
    new_model.rewritten_layers = sorted(rewritten, key=order.__getitem__)
    return new_model
