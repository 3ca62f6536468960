"""Putting rule-carrying layers into a copy of a model: the one pass the LRP and DeepLIFT
rewrites share.

* :class:`WrapperLayer`: a layer of the copy that runs a clone of the original layer (made by
  :func:`clone_layer`) with a rule on its backward pass; its operations are :func:`covered` (a
  custom layer's check, :mod:`.custom`, leaves them to the rule).
* :func:`rewrite_planned`: copy a model with every planned layer replaced by its wrapper, split a
  final fused softmax/sigmoid apart (:func:`squash_apart`), and check that the copy computes what
  the model computes.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import keras

from ..model.copy import check_copy, copy_model, rebuild_layer
from . import canonizers

__all__ = ["WrapperLayer", "clone_layer", "covered", "covered_scopes", "rewrite_planned", "squash_apart"]

_SCOPES: contextvars.ContextVar[list | None] = contextvars.ContextVar("saliency_kit_covered_scopes", default=None)


@contextlib.contextmanager
def covered_scopes(scopes: list) -> Iterator[None]:
    """Within: every :func:`covered` block appends its name scope to ``scopes`` (while
    a custom layer's call is traced for its check, :mod:`.custom`)."""
    token = _SCOPES.set(scopes)
    try:
        yield
    finally:
        _SCOPES.reset(token)


@contextlib.contextmanager
def covered() -> Iterator[None]:
    """Within a rule-carrying layer's call: its operations are covered by its rule; while
    :func:`covered_scopes` records, in a name scope of their own, recorded (on PyTorch, whose
    calls run eagerly, ``scopes`` holds one entry while a covered call runs)."""
    scopes = _SCOPES.get()
    if scopes is None:
        yield
        return
    if keras.backend.backend() == "torch":
        scopes.append("covered_by_rule")
        try:
            yield
        finally:
            scopes.pop()
        return
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        with tf.name_scope("covered_by_rule") as scope:
            scopes.append(scope)
            yield
        return
    import jax

    scope = f"covered_by_rule_{len(scopes)}"
    with jax.named_scope(scope):
        scopes.append(scope)
        yield


def clone_layer(op: Any) -> Any:
    """A new, unbuilt layer from ``op``'s config, its activation the same object (one Keras cannot
    deserialise, ``torch.tanh``, included)."""
    return rebuild_layer(op)


class WrapperLayer(keras.layers.Layer):
    """A layer of the copy that runs ``inner`` (a clone of the original layer, whose weights it
    uses) with a rule on its backward pass; subclasses define ``call``."""

    def __init__(self, inner: Any, **kwargs: Any) -> None:
        super().__init__(name=inner.name, dtype=inner.dtype_policy, **kwargs)
        self.inner = inner

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with covered():  # its operations are covered by its rule (a custom layer's check)
            return super().__call__(*args, **kwargs)

    def build(self, input_shape: Any) -> None:
        if not self.inner.built:
            self.inner.build(input_shape)

    def compute_output_spec(self, x: Any, training: bool | None = None, mask: Any = None) -> Any:
        spec = self.inner.compute_output_spec(x)
        return keras.KerasTensor(spec.shape, dtype=self.compute_dtype)


def squash_apart(new_model: Any, facts: list) -> Any:
    """``new_model`` with a final layer's fused softmax/sigmoid as a separate ``Activation`` after
    the rewritten layer (which computes the logits), so that scores can be taken before it."""
    final = [
        f
        for f in facts
        if f.final
        and f.kind == "linear"
        and canonizers.activation_name(getattr(f.op, "activation", None)) in canonizers.SQUASHERS
    ]
    if not final:
        return new_model
    activation = final[0].op.activation
    squashed = keras.layers.Activation(activation, name=f"{final[0].op.name}_{canonizers.activation_name(activation)}")
    outputs = squashed(new_model.outputs[0])
    return keras.Model(new_model.inputs, outputs, name=new_model.name)


def rewrite_planned(
    model: Any, facts: list, plan: dict, wrap: Callable, *, what: str, link: Callable | None = None
) -> Any:
    """A copy of ``model`` in which every planned operation is replaced by its wrapper.

    Args:
        facts: ``canonizers.model_facts(model)``.
        plan: ``{id(op): (fact, rule)}`` for the operations to replace.
        wrap: ``wrap(fact, rule) -> keras.layers.Layer``, the layer put in the operation's place.
        what: what the copy is, for the error raised when it computes something else.
        link: ``link(wrappers)`` (``{id(op): wrapper}``) once the copy is built, before it is
            checked: for wrappers that depend on each other (a merged BatchNormalization).

    Returns:
        The copy, a final fused softmax/sigmoid split apart (:func:`squash_apart`), checked against
        ``model`` on a generated input.
    """
    wrappers = {}

    def replace(op: Any) -> Any:
        if id(op) not in plan:
            return None
        wrappers[id(op)] = wrap(*plan[id(op)])
        return wrappers[id(op)]

    new_model = copy_model(model, replace, check=False)  # checked once finished, below
    if link is not None:
        link(wrappers)
    new_model = squash_apart(new_model, facts)
    check_copy(model, new_model, what=what)
    return new_model
