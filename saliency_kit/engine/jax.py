"""The JAX backend of the engine: the kernels are ``jax.jit`` functions of the model's variables.

This module is the backend object :func:`saliency_kit.engine.backend.active` returns on Keras'
JAX backend; its ``__all__`` is the backend's surface (:class:`saliency_kit.engine.backend.Backend`),
as :mod:`saliency_kit.engine.tf`'s is on TensorFlow. A kernel is one ``jax.jit`` of the method's
function over a chunk, compiled once per (model, method, options, shapes) and reused: the
model's variables are its first argument, their values read at every call and mapped into the
model with ``keras.StatelessScope`` while it is traced (so a kernel sees training and never
captures weights as constants). The :class:`Context` a method sees is in
:mod:`saliency_kit.engine.jax_context`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import jax
import keras
import numpy as np

from ..errors import translated
from ..model.inspect import derived_state, outside_any_trace, weight_sync
from ..model.scores import ScoreView, score_columns
from .context import run_method, run_values
from .jax_context import Context
from .spec import KernelSpec

__all__ = [
    "Context",
    "ScoreView",
    "build_kernel",
    "build_values_kernel",
    "vectorise_classes",
    "eagerly",
    "array_spec",
    "to_numpy",
    "rewrite",
    "weight_sync",
    "derived_state",
    "score_columns",
]


def vectorise_classes(model: keras.Model) -> bool:
    """The K backward passes of a kernel run one after another over the shared forward pass
    (XLA compiles them into one program)."""
    return False


def eagerly(fn: Callable) -> Any:
    """``fn()`` run eagerly, on the variables' own values, even while a kernel is being traced."""
    return outside_any_trace(fn)


def rewrite(model: keras.Model, rule: Any) -> keras.Model:
    """``sk.rewrite`` on JAX. A ReLU-family rule: a :class:`~saliency_kit.engine.ruled_model.RuledModel`
    (the model itself, called with the rule on its traced program). A rule that rewrites the linear
    layers too (an LRP composite, DeepLIFT): ``rule.rewrite_model(model)``, a copy each of whose
    weights reads, inside a kernel, the traced value of the model's weight it mirrors
    (:class:`_MirroredScope`), so the copy always computes with the model's current weights."""
    if not hasattr(rule, "rewrite_model"):
        from .jax_rules import with_rule
        from .ruled_model import rewrite_relus

        return rewrite_relus(model, rule, with_rule)
    copy = rule.rewrite_model(model)
    if len(copy.weights) != len(model.weights):
        raise RuntimeError(f"the rewrite of {model.name!r} does not mirror its weights")
    for source, mirror in zip(model.weights, copy.weights):
        mirror._saliency_mirrors = weakref.ref(source)  # the copy is the library's own object
    return copy


class _MirroredScope(keras.StatelessScope):
    """A ``StatelessScope`` in which a rewritten copy's weight reads the value of the model's
    weight it mirrors (set by :func:`rewrite`)."""

    def get_current_value(self, variable: Any) -> Any:
        value = super().get_current_value(variable)
        if value is None:
            source = getattr(variable, "_saliency_mirrors", None)
            source = source() if source is not None else None
            if source is not None:
                return super().get_current_value(source)
        return value


class _Stateless:
    """The model's variables, mapped to a kernel's traced values while the kernel is traced."""

    def __init__(self, model: keras.Model):
        self.variables = list(model.variables)

    def values(self) -> list:
        return [variable.value for variable in self.variables]

    def scope(self, values: list) -> keras.StatelessScope:
        return _MirroredScope(state_mapping=list(zip(self.variables, values)))


def _compiled(body: Callable, stateless: _Stateless, doing: str) -> Callable:
    """``call(*args)``: ``jax.jit(body)`` called with the variables' current values first; an error
    raised while it is traced or run reaches the user as one line (:func:`saliency_kit.errors.translated`).

    It is traced and run with 64-bit types enabled (``jax.enable_x64``, for this call only): the
    methods keep some bookkeeping in float64 and the draws' keys are 64-bit, as on TensorFlow;
    the model itself runs in its own dtypes."""

    def traced(values: list, *args: Any) -> Any:
        with stateless.scope(values):
            return body(*args)

    compiled = jax.jit(traced)

    def call(*args: Any) -> Any:
        try:
            with jax.enable_x64(True):
                return compiled(stateless.values(), *args)
        except Exception as error:  # noqa: BLE001 - every error leaves as the project's one line
            raise translated(error, doing) from None

    return call


def build_kernel(spec: KernelSpec) -> Callable:
    """The compiled ``kernel(x, targets, index, keys, seed, payload, *arrays) -> dict`` of one method,
    with the contract of :func:`saliency_kit.engine.tf.build_kernel`."""
    view = eagerly(lambda: spec.views())  # the score view is built before tracing, on real values
    stateless = _Stateless(view.model)

    def kernel(x: Any, targets: Any, index: Any, keys: Any, seed: Any, leaves: Any, *arrays: Any) -> dict:
        return run_method(spec, Context, (x, targets, index, keys, seed, leaves, arrays))

    return _compiled(kernel, stateless, spec.doing)


def build_values_kernel(
    views: Any,
    n: int,
    shape: tuple,
    dtype: Any,
    traced: Any,
    doing: str = "the forward pass",
    raw: bool | str = False,
    taps: tuple = (),
) -> Callable:
    """The compiled ``kernel(x [n, ...]) -> [n, C]``, with the contract of
    :func:`saliency_kit.engine.tf.build_values_kernel`."""
    view = eagerly(views)
    stateless = _Stateless(view.model)
    several = isinstance(shape, list)

    def kernel(x: Any) -> Any:
        traced()
        return run_values(views(), x, several, raw, taps)

    return _compiled(kernel, stateless, doing)


def array_spec(value: np.ndarray) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(value.shape, value.dtype)


def to_numpy(tensor: Any) -> np.ndarray:
    return np.asarray(tensor)
