"""The gates: ``custom_gradient`` functions that leave a forward value unchanged and replace its
gradient by a propagation rule's.

* LRP: :func:`rule_gate` (a linear part with a :class:`~saliency_kit.propagation.core.LinearRule`)
  and :func:`pass_gate` (an element-wise activation with ``Pass``).
* DeepLIFT: :func:`rescale_gate` and :func:`maxpool_gate`, whose rows are inputs and references,
  interleaved in pairs or (:func:`shared_reference`) the inputs followed by one shared reference
  row; :func:`halves` and :func:`interleave` read and write that layout.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import tensorflow as tf

from .core import LinearPart, LinearRule

__all__ = [
    "DELTA_EPSILON",
    "halves",
    "interleave",
    "maxpool_gate",
    "pass_gate",
    "rescale_gate",
    "rule_gate",
    "shared_reference",
]

DELTA_EPSILON = 1e-7  # DeepLIFT: below this |x − x₀| the plain derivative is the multiplier


def rule_gate(rule: LinearRule, part: LinearPart, x, z, to_relevance: bool, nonnegative: bool = False):
    """``z`` unchanged; its gradient w.r.t. ``x`` replaced by ``rule``'s (in gradient form, or
    the relevance itself when ``to_relevance``); ``nonnegative``: ``x >= 0`` by construction."""

    @tf.custom_gradient
    def gate(x, z):
        def backward(dz):
            coefficients, constant = rule.backward(part, x, z, z * dz, nonnegative)
            if to_relevance:
                dx = x * coefficients + (constant if constant is not None else 0)
            else:
                dx = coefficients if constant is None else coefficients + tf.math.divide_no_nan(constant, x)
            return dx, None

        return tf.identity(z), backward

    return gate(x, z)


def pass_gate(rule, x, y, to_relevance: bool, family=None):
    """``y`` unchanged; relevance passes from ``y`` to ``x`` by ``rule.gradient(x, y, dy, family)``
    (in gradient form; ``family``: the ReLU family ``y = f(x)`` is, when it is one), or unchanged
    when ``to_relevance``."""

    @tf.custom_gradient
    def gate(x, y):
        def backward(dy):
            if to_relevance:
                return dy, None
            return rule.gradient(x, y, dy, family), None

        return tf.identity(y), backward

    return gate(x, y)


#: Whether the rows a reference rule's gates see are ``[x_0, …, x_{n−1}, x₀]``: every input
#: against one reference row, last (:func:`shared_reference`), instead of interleaved pairs.
_SHARED = contextvars.ContextVar("saliency_kit_shared_reference", default=False)


@contextlib.contextmanager
def shared_reference() -> Iterator[None]:
    """Within (while a backward pass is traced): the DeepLIFT gates read their rows as the inputs
    followed by one reference row they all share, so the reference runs through the model once
    for the whole batch (``n + 1`` rows instead of ``2n``)."""
    token = _SHARED.set(True)
    try:
        yield
    finally:
        _SHARED.reset(token)


def halves(t):
    """``(inputs, baselines)``: the even and the odd rows of ``t``; with a shared reference
    (:func:`shared_reference`), the rows but the last, and the last as one row ``[1, ...]``
    (it broadcasts against them in every elementwise step, never materialised per row)."""
    if _SHARED.get():
        return t[:-1], t[-1:]
    pairs = tf.reshape(t, tf.concat([[-1, 2], tf.shape(t)[1:]], 0))
    return pairs[:, 0], pairs[:, 1]


def interleave(first, second):
    """Rows ``[first_0, second_0, first_1, ...]``; with a shared reference, ``first`` and one
    zero row (``second`` is the baselines' backward, zero in every gate: the reference's own
    gradient is never read)."""
    if _SHARED.get():
        return tf.concat([first, tf.zeros_like(first[:1])], 0)
    return tf.reshape(tf.stack([first, second], 1), tf.concat([[-1], tf.shape(first)[1:]], 0))


def rescale_gate(family, x, y):
    """``y = family.forward(x)`` unchanged (rows: inputs and baselines interleaved, or the inputs and
    one shared baseline, see :func:`halves`); backward: DeepLIFT's Rescale multiplier
    ``(y − y₀) / (x − x₀)`` for the input rows (the plain derivative where ``|x − x₀| ≤ 1e-7``),
    zero for the baseline rows.

    With a shared baseline every row is read against the last one in place (no copies of the
    rows): the baseline row itself meets ``x − x₀ = 0`` and gets the plain derivative, a gradient
    that stays in its own row (every layer treats rows apart) and is never read.
    """

    @tf.custom_gradient
    def gate(x, y):
        def backward(dy):
            if _SHARED.get():
                return _rescaled(family, x, x[-1:], y, y[-1:], dy), None
            x1, x0 = halves(x)
            y1, y0 = halves(y)
            dy1, _ = halves(dy)
            return interleave(_rescaled(family, x1, x0, y1, y0, dy1), tf.zeros_like(x0)), None

        return tf.identity(y), backward

    return gate(x, y)


def _rescaled(family, x, x0, y, y0, dy):
    """``dy · (y − y₀) / (x − x₀)``, or ``dy · f'(x)`` (``family.backward``) where ``|x − x₀| ≤ 1e-7``."""
    delta_x = x - x0
    apart = tf.abs(delta_x) > DELTA_EPSILON
    multiplier = (y - y0) / tf.where(apart, delta_x, tf.ones((), delta_x.dtype))
    return tf.where(apart, dy * multiplier, family.backward(x, dy))


def maxpool_gate(pool, x, y):
    """``y = pool(x)`` unchanged (rows interleaved as for :func:`rescale_gate`); backward:
    Captum's max-pooling multiplier for the input rows."""

    @tf.custom_gradient
    def gate(x, y):
        def backward(dy):
            x1, x0 = halves(x)
            x0 = tf.broadcast_to(x0, tf.shape(x1))  # each row's share goes to the reference's winners
            y1, y0 = halves(y)
            dy1, _ = halves(dy)
            top = tf.maximum(y1, y0)
            with tf.GradientTape(persistent=True) as tape:
                tape.watch([x1, x0])
                p1, p0 = pool(x1), pool(x0)
            shares = tape.gradient(p1, x1, output_gradients=dy1 * (top - y0)) + tape.gradient(
                p0, x0, output_gradients=dy1 * (y1 - top)
            )
            plain = tape.gradient(p1, x1, output_gradients=dy1)
            delta_x = x1 - x0
            multiplier = tf.where(
                tf.abs(delta_x) > DELTA_EPSILON, shares / tf.where(delta_x == 0, tf.ones_like(delta_x), delta_x), plain
            )
            return interleave(multiplier, tf.zeros_like(x0)), None

        return tf.identity(y), backward

    return gate(x, y)
