"""DeepLIFT (Shrikumar et al. 2017), Rescale rule, as a rewrite of the model.

``rewrite_deeplift(model)`` returns a copy that takes inputs and their baselines interleaved in one
batch, ``[x_0, x₀_0, x_1, x₀_1, ...]`` (``2B`` rows: rows ``2i`` and ``2i + 1`` are a pair), and
computes the same outputs as ``model`` on each row. Its backward pass gives, in the even rows,
DeepLIFT's *multipliers* ``m`` (odd rows: zero); the attributions are ``(x − x₀) ⊙ m`` and sum to
``s(x) − s(x₀)`` (summation to delta).

- Linear layers (Dense, convolutions, BatchNorm at inference, average pooling, Add,
  Concatenate, padding, reshaping): the plain gradient, which for a linear map is its multiplier.
- Every ReLU-family activation: the Rescale rule ``m = (f(x) − f(x₀)) / (x − x₀)``, the plain
  derivative where ``|x − x₀| ≤ 1e-7``.
- Max pooling: Captum's rule, which keeps summation to delta: the output difference
  ``y − y₀`` is split into ``max(y, y₀) − y₀`` (sent to the winner in ``x``) and ``y − max(y, y₀)``
  (sent to the winner in ``x₀``), and each input's share is divided by its ``x − x₀``.
"""
from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from . import canonizers
from .lrp import _clone, _squash_apart, linear_parts
from ..model.copy import check_copy, copy_model
from ..rules.relu import relu_family_of_function

__all__ = ["DELTA_EPSILON", "DeepLiftRewrite", "deeplift", "rewrite_deeplift"]

DELTA_EPSILON = 1e-7


def _halves(t):
    """``(inputs, baselines)``: the even and the odd rows of ``t``."""
    pairs = tf.reshape(t, tf.concat([[-1, 2], tf.shape(t)[1:]], 0))
    return pairs[:, 0], pairs[:, 1]


def _interleave(first, second):
    """Rows ``[first_0, second_0, first_1, ...]``."""
    return tf.reshape(tf.stack([first, second], 1), tf.concat([[-1], tf.shape(first)[1:]], 0))


def _rescale_gate(function, x, y):
    """``y = function(x)`` unchanged; backward: the Rescale multiplier for the first half."""

    @tf.custom_gradient
    def gate(x, y):
        def backward(dy):
            x1, x0 = _halves(x)
            y1, y0 = _halves(y)
            dy1, _ = _halves(dy)
            delta_x = x1 - x0
            with tf.GradientTape() as tape:
                tape.watch(x1)
                plain = function(x1)
            derivative = tape.gradient(plain, x1)
            multiplier = tf.where(tf.abs(delta_x) > DELTA_EPSILON,
                                  (y1 - y0) / tf.where(delta_x == 0, tf.ones_like(delta_x), delta_x),
                                  derivative)
            return _interleave(dy1 * multiplier, tf.zeros_like(x0)), None

        return tf.identity(y), backward

    return gate(x, y)


def _maxpool_gate(pool, x, y):
    """``y = pool(x)`` unchanged; backward: Captum's max-pooling multiplier for the first half."""

    @tf.custom_gradient
    def gate(x, y):
        def backward(dy):
            x1, x0 = _halves(x)
            y1, y0 = _halves(y)
            dy1, _ = _halves(dy)
            top = tf.maximum(y1, y0)
            with tf.GradientTape(persistent=True) as tape:
                tape.watch([x1, x0])
                p1, p0 = pool(x1), pool(x0)
            shares = (tape.gradient(p1, x1, output_gradients=dy1 * (top - y0))
                      + tape.gradient(p0, x0, output_gradients=dy1 * (y1 - top)))
            plain = tape.gradient(p1, x1, output_gradients=dy1)
            delta_x = x1 - x0
            multiplier = tf.where(tf.abs(delta_x) > DELTA_EPSILON,
                                  shares / tf.where(delta_x == 0, tf.ones_like(delta_x), delta_x), plain)
            return _interleave(multiplier, tf.zeros_like(x0)), None

        return tf.identity(y), backward

    return gate(x, y)


class DeepLiftRewrite:
    """The ``rule`` that makes ``sk.rewrite``/the engine build :func:`rewrite_deeplift` models."""

    def rewrite_model(self, model):
        return rewrite_deeplift(model)

    def __eq__(self, other):
        return type(other) is type(self)

    def __hash__(self):
        return hash(type(self))

    def __repr__(self) -> str:
        return "DeepLiftRewrite()"


class _DeepLiftLayer(keras.layers.Layer):
    """A layer of the copy (its clone ``inner``, whose weights it uses) with DeepLIFT's backward."""

    def __init__(self, inner, kind: str, family=None, **kwargs):
        super().__init__(name=inner.name, dtype=inner.dtype_policy, **kwargs)
        self.inner = inner
        self.kind = kind
        self.family = family

    def build(self, input_shape):
        if not self.inner.built:
            self.inner.build(input_shape)

    def call(self, x, training=None, mask=None):
        if self.kind == "max_pooling":
            pool = self.inner.call
            return _maxpool_gate(pool, x, pool(x))
        if self.kind == "relu":
            return _rescale_gate(self.family.forward, x, self.family.forward(x))
        # a linear layer with a fused activation
        z = x
        for part in linear_parts(self.inner):
            z = part.apply(z, part.kernels, part.bias)
        if self.family is not None:
            return _rescale_gate(self.family.forward, z, self.family.forward(z))
        return z

    def compute_output_spec(self, x, training=None, mask=None):
        spec = self.inner.compute_output_spec(x)
        return keras.KerasTensor(spec.shape, dtype=self.compute_dtype)


def rewrite_deeplift(model: keras.Model) -> keras.Model:
    """A copy of ``model`` taking inputs and baselines interleaved (``2B`` rows) whose input
    gradient, in the even rows, holds DeepLIFT's multipliers (see the module docstring). ``model`` is never modified.

    ``rewritten_layers``: ``{layer path: rule}`` (``"rescale"``, ``"maxpool"``). A final
    softmax/sigmoid fused into the last layer becomes a separate ``Activation``. ``ValueError``
    naming a layer without a DeepLIFT rule here (attention, normalisation over features, ...).
    """
    if not isinstance(model, keras.Model):
        raise TypeError(f"rewrite_deeplift expects a keras.Model; received {type(model).__name__}.")
    facts = canonizers.model_facts(model)
    plan = {}
    for fact in facts:
        op = fact.op
        if fact.kind == "max_pooling":
            plan[id(op)] = (fact, "maxpool")
        elif fact.kind == "relu":
            plan[id(op)] = (fact, "rescale")
        elif fact.kind == "linear" and not canonizers.is_linear_activation(getattr(op, "activation", None)):
            plan[id(op)] = (fact, "rescale" if relu_family_of_function(op.activation) else "squash apart")

    def replace(op):
        if id(op) not in plan:
            return None
        fact, _ = plan[id(op)]
        if fact.kind == "max_pooling":
            return _DeepLiftLayer(_clone(op), "max_pooling")
        if fact.kind == "relu":
            family = canonizers.relu_family_of(op)
            inner = _clone(op) if isinstance(op, keras.layers.Layer) else keras.layers.Activation("linear", name=op.name)
            return _DeepLiftLayer(inner, "relu", family)
        return _DeepLiftLayer(_clone(op), "linear", relu_family_of_function(op.activation))

    new_model = copy_model(model, replace, check=False)  # checked once finished, below
    new_model = _squash_apart(model, new_model, facts)
    check_copy(model, new_model, what="DeepLIFT rewrite")
    new_model.rewritten_layers = {fact.path: rule for fact, rule in plan.values()}
    return new_model


def _logits_model(rewritten):
    last = rewritten.layers[-1]
    if isinstance(last, keras.layers.Activation) and canonizers.activation_name(last.activation) in canonizers.SQUASHERS:
        return keras.Model(rewritten.inputs, last.input)
    return rewritten


def deeplift(model, inputs, classes, baseline=0.0, *, rewritten=None):
    """DeepLIFT attributions of the logits (before a final softmax/sigmoid) for ``classes``.

    Args:
        inputs: ``[B, ...]``; ``classes``: int ``[B, K]``; ``baseline``: scalar or array
            broadcastable to one input.

    Returns:
        ``(attributions [B, K, ...], completeness_gap [B, K])``, the gap being
        ``Σ attributions − (s(x) − s(x₀))``.
    """
    rewritten = rewritten if rewritten is not None else rewrite_deeplift(model)
    logits = _logits_model(rewritten)
    x = tf.convert_to_tensor(np.asarray(inputs, dtype=np.float32))
    x0 = tf.broadcast_to(tf.cast(baseline, x.dtype), tf.shape(x))
    classes = tf.convert_to_tensor(np.asarray(classes, dtype=np.int32))
    batch, k = classes.shape
    stacked = _interleave(x, x0)
    rows = []
    for j in range(k):
        with tf.GradientTape() as tape:
            tape.watch(stacked)
            out, _ = _halves(logits(stacked))
            score = tf.gather(out, classes[:, j], axis=1, batch_dims=1)
        rows.append(_halves(tape.gradient(score, stacked))[0] * (x - x0))
    at_x, at_x0 = _halves(logits(stacked))
    delta = tf.gather(at_x, classes, axis=1, batch_dims=1) - tf.gather(at_x0, classes, axis=1, batch_dims=1)
    attributions = tf.stack(rows, 1)
    total = tf.reduce_sum(tf.reshape(attributions, [batch, k, -1]), -1)
    return attributions.numpy(), (total - delta).numpy()
