"""Which layers of a model hold ReLU-family activations, on any backend: the activation a layer
computes as a whole (:func:`relu_family_of_operation`), the layers whose call may run ReLUs the
layer level cannot see (:func:`may_hide_relus`), and the error for a model with none a backward rule
could change (:func:`nothing_to_rewrite`). Read by the rewrite, the engines' rule passes and the
command line's check before work; no framework is imported."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import keras

from ..rules import ReluFamily, relu_family_of_activation, relu_family_of_function
from .walker import is_graph_model, walk

__all__ = ["relu_family_of_operation", "may_hide_relus", "find_relu_activations", "nothing_to_rewrite"]


def _family_of_activation(activation: Any) -> ReluFamily | None:
    """The ReLU family of a layer's ``activation=`` (a function, a partial, or a ReLU layer)."""
    if isinstance(activation, keras.layers.Layer):
        return relu_family_of_activation(activation)
    return relu_family_of_function(activation) if callable(activation) else None


def relu_family_of_operation(op: Any) -> ReluFamily | None:
    """The ReLU-family activation ``op`` (a layer or a functional-graph operation) computes as a
    whole — a stand-alone activation or a layer's fused ``activation=`` — or ``None``."""
    family = relu_family_of_activation(op)
    if family is not None or isinstance(op, keras.Model) or not isinstance(op, keras.layers.Layer):
        return family
    return _family_of_activation(getattr(op, "activation", None))


def _is_keras_function(fn: Callable) -> bool:
    module = getattr(fn, "__module__", "") or ""
    return module.startswith(("keras.", "tensorflow.")) and getattr(fn, "__name__", "<lambda>") != "<lambda>"


def may_hide_relus(op: Any) -> bool:
    """Whether ``op`` may run ReLU ops the layer-level rewrite cannot see."""
    if not isinstance(op, keras.layers.Layer) or is_graph_model(op):
        return False
    if isinstance(
        op, (keras.layers.Lambda, keras.layers.Wrapper, keras.layers.Bidirectional, keras.layers.RNN, keras.Model)
    ):
        return True
    if not type(op).__module__.startswith("keras."):
        return True  # a custom layer: its call may do anything
    activation = getattr(op, "activation", None)
    return callable(activation) and not _is_keras_function(activation)


def _activation_name(op: Any) -> str | None:
    """A readable name for a non-ReLU activation in ``op``, for error messages."""
    if isinstance(op, keras.Model):
        return None
    activation = getattr(op, "activation", None)
    if callable(activation):
        name = getattr(activation, "__name__", type(activation).__name__)
        return None if name == "linear" else name
    if isinstance(op, (keras.layers.Softmax, keras.layers.ELU, keras.layers.PReLU)):
        return type(op).__name__
    return None


def find_relu_activations(model: keras.Model) -> list[tuple[str, ReluFamily]]:
    """``[(layer path, ReluFamily)]`` for every ReLU-family activation visible at the layer level
    (nested models and wrappers included; paths ``"outer/inner"``)."""
    return [(v.path, family) for v in walk(model) if (family := relu_family_of_operation(v.layer)) is not None]


def nothing_to_rewrite(model: keras.Model) -> ValueError:
    """The error for a model with no ReLU-family activation a backward rule could change (it names
    the activations it does have): ``rewrite`` raises it, and so do the guided/deconv methods, whose
    map would otherwise silently be the plain gradient."""
    others = collections.Counter(name for v in walk(model) if (name := _activation_name(v.layer)) is not None)
    listed = ", ".join(f"{name} x{count}" for name, count in others.most_common()) or "none"
    return ValueError(
        f"model {model.name!r} has no ReLU-family activation to rewrite (activations found: "
        f"{listed}). Backward rules (guided backprop, deconvnet, rewrite()) change the backward pass of "
        "relu, relu6, leaky_relu, keras.layers.ReLU and LeakyReLU only (not of ReLUs that already "
        "carry a rule from rewrite()); for this model use a plain-gradient method (e.g. "
        f"method='gradient' or 'integrated_gradients'); received model {model.name!r}."
    )
