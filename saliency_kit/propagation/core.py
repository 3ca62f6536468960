"""The mechanism of relevance propagation: linear parts, the rule mechanism and the backward gates.

* :class:`LinearPart` / :func:`linear_parts`: a supported layer as linear maps
  ``z = apply(x, kernels, bias)`` with its current parameters (two for a separable convolution;
  a merged BatchNormalization folded into the last one), so one rule serves ``Dense``,
  ``Conv1D/2D/3D``, ``DepthwiseConv``, ``SeparableConv`` and average pooling.
* :class:`LinearRule` and :class:`Branch`: Zennit's ``BasicHook``. A rule (in :mod:`.rules`) is a
  list of branches; :meth:`LinearRule.backward` does the rest.
* The gates: ``custom_gradient`` functions that leave the forward value unchanged and replace its
  gradient (:func:`rule_gate`, :func:`pass_gate` for LRP; :func:`rescale_gate`,
  :func:`maxpool_gate` for DeepLIFT).

Putting the layers that carry these rules into a copy of a model is :mod:`.rewriting`.

Notation (Montavon et al. 2019): ``z_j = Σ_i x_i w_ij + b_j``; ``R_j`` the relevance of output
``j``; every denominator is stabilised as ``stab(d) = d + ε·sign(d)`` with ``sign(0) = +1``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Callable, Iterator, Sequence

import keras
import tensorflow as tf

from . import canonizers

__all__ = [
    "Branch",
    "DELTA_EPSILON",
    "LinearPart",
    "LinearRule",
    "halves",
    "interleave",
    "linear_parts",
    "maxpool_gate",
    "pass_gate",
    "rescale_gate",
    "rule_gate",
    "shared_reference",
    "stabilize",
    "unchanged",
]

DELTA_EPSILON = 1e-7  # DeepLIFT: below this |x − x₀| the plain derivative is the multiplier


def stabilize(d, epsilon: float):
    """``d + ε·sign(d)`` with ``sign(0) = +1``: never zero, same sign as ``d``."""
    return d + tf.where(d >= 0, tf.cast(epsilon, d.dtype), tf.cast(-epsilon, d.dtype))


def unchanged(w):
    """The identity parameter modifier."""
    return w


# ---------------------------------------------------------------------------------------------
# Linear parts


@dataclasses.dataclass(frozen=True)
class LinearPart:
    """A linear map ``z = apply(x, kernels, bias)`` with its current parameters.

    ``kernels``: ``{name: tensor}`` (empty for pooling); ``bias``: a tensor or ``None``. ``apply``
    must be linear in ``x`` when ``bias`` is ``None``.
    """

    apply: Callable
    kernels: dict
    bias: object = None


def _add_bias(z, bias, layer):
    if bias is None:
        return z
    if getattr(layer, "data_format", "channels_last") == "channels_first":
        bias = tf.reshape(bias, [1, -1] + [1] * (len(z.shape) - 2))
    return z + bias


def linear_parts(layer, absorbed_bn=None) -> list[LinearPart]:
    """The linear maps ``layer`` computes, in order (two for a separable convolution), with its
    current parameters; ``absorbed_bn`` a BatchNormalization merged into the last one."""
    dtype = layer.compute_dtype

    def value(variable):
        return tf.cast(tf.convert_to_tensor(variable), dtype)

    bias = value(layer.bias) if getattr(layer, "use_bias", False) else None
    if isinstance(layer, keras.layers.Dense):
        parts = [
            LinearPart(
                lambda x, k, b: _add_bias(
                    tf.matmul(x, k["kernel"]) if len(x.shape) == 2 else tf.tensordot(x, k["kernel"], 1), b, layer
                ),
                {"kernel": value(layer.kernel)},
                bias,
            )
        ]
    elif isinstance(layer, (keras.layers.SeparableConv1D, keras.layers.SeparableConv2D)):
        parts = _separable_parts(layer, value, bias)
    elif isinstance(layer, (keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D)):

        def depthwise(x, k, b):
            z = keras.ops.depthwise_conv(
                x,
                k["kernel"],
                strides=layer.strides,
                padding=layer.padding,
                data_format=layer.data_format,
                dilation_rate=layer.dilation_rate,
            )
            return _add_bias(z, b, layer)

        parts = [LinearPart(depthwise, {"kernel": value(layer.kernel)}, bias)]
    elif isinstance(layer, (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D)):
        parts = [
            LinearPart(
                lambda x, k, b: _add_bias(layer.convolution_op(x, k["kernel"]), b, layer),
                {"kernel": value(layer.kernel)},
                bias,
            )
        ]
    elif isinstance(layer, canonizers.AVERAGE_POOLING):
        parts = [LinearPart(lambda x, k, b: layer.call(x), {}, None)]
    else:
        raise ValueError(
            f"layer {layer.name!r} ({type(layer).__name__}) has no linear part; received {type(layer).__name__}."
        )
    if absorbed_bn is not None:
        parts[-1] = _merge(parts[-1], layer, absorbed_bn, dtype)
    return parts


def _separable_parts(layer, value, bias):
    rank = 1 if isinstance(layer, keras.layers.SeparableConv1D) else 2

    def depthwise(x, k, b):
        return keras.ops.depthwise_conv(
            x,
            k["depthwise_kernel"],
            strides=layer.strides,
            padding=layer.padding,
            data_format=layer.data_format,
            dilation_rate=layer.dilation_rate,
        )

    def pointwise(x, k, b):
        z = keras.ops.conv(
            x, k["pointwise_kernel"], strides=(1,) * rank, padding="valid", data_format=layer.data_format
        )
        return _add_bias(z, b, layer)

    return [
        LinearPart(depthwise, {"depthwise_kernel": value(layer.depthwise_kernel)}, None),
        LinearPart(pointwise, {"pointwise_kernel": value(layer.pointwise_kernel)}, bias),
    ]


def _merge(part: LinearPart, layer, bn, dtype) -> LinearPart:
    """``part`` followed by ``bn`` as one linear part: ``w·s``, ``b·s + t`` (canonizers' merge)."""
    scale, shift = canonizers.batchnorm_affine(bn, dtype)
    ((name, kernel),) = part.kernels.items()
    if isinstance(layer, (keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D)):
        merged = kernel * tf.reshape(scale, kernel.shape[-2:])
    else:
        merged = kernel * scale
    bias = shift if part.bias is None else part.bias * scale + shift
    return LinearPart(part.apply, {name: merged}, bias)


# ---------------------------------------------------------------------------------------------
# The rule mechanism


@dataclasses.dataclass(frozen=True)
class Branch:
    """One modified copy of the layer inside a rule.

    ``inputs``: ``"x"`` (the input itself), ``"positive"`` (x⁺), ``"negative"`` (x⁻), ``"ones"``, or
    ``"low"``/``"high"`` (a ZBox bound); ``kernels``: how each kernel is modified;
    ``bias``: how the bias is modified (``None``: no bias in this branch); ``sign``: ±1, the
    branch's sign in its group's denominator and in the sum of relevances; ``group``: which
    denominator the branch belongs to.
    """

    inputs: str
    kernels: Callable = unchanged
    bias: Callable | None = unchanged
    sign: float = 1.0
    group: int = 0


_PROPORTIONAL = {"x": None, "positive": "positive", "negative": "negative"}


class LinearRule:
    """Base class of the LRP rules for linear layers (Zennit's ``BasicHook``).

    For each :class:`Branch` ``k`` the layer is run on the modified input ``a_k`` with modified
    parameters, giving ``z_k``. Branches of one group ``g`` share the denominator
    ``d_g = Σ_{k∈g} sign_k · z_k``; the relevance of an input is

        ``R_i = Σ_k sign_k · a_k,i · Σ_j w^(k)_ij · scale_g · mask_g(z)_j · R_j / stab(d_g)_j``

    (``scale_g`` and ``mask_g`` are 1 unless a rule says otherwise). Subclasses set ``branches``,
    and may override ``group_scales`` and ``group_masks``.
    """

    branches: Sequence[Branch] = ()

    def __init__(self, stabilizer: float = 1e-6):
        stabilizer = float(stabilizer)
        if not stabilizer >= 0:
            raise ValueError(f"stabilizer must be a non-negative number; received {stabilizer!r}.")
        self.stabilizer = stabilizer

    def group_scales(self) -> dict:
        return {}

    def group_masks(self) -> dict:
        """``{group: "positive" | "negative"}``: keep only outputs where ``z`` has that sign."""
        return {}

    def constant_input(self, name: str, x):
        """The tensor of a non-proportional input kind (``"ones"``, ``"low"``, ``"high"``)."""
        if name == "ones":
            return tf.ones_like(x)
        raise ValueError(f"{type(self).__name__} has no input kind {name!r}")

    def _modified_input(self, kind: str, x):
        if kind == "x":
            return x
        if kind == "positive":
            return tf.maximum(x, 0)
        if kind == "negative":
            return tf.minimum(x, 0)
        return self.constant_input(kind, x)

    def backward(self, part: LinearPart, x, z, relevance):
        """``(coefficients, constant_relevance)`` for the input of ``part``.

        The input relevance is ``x ⊙ coefficients + constant_relevance``; the first term holds the
        branches whose input is proportional to ``x`` (``x``, x⁺, x⁻), the second the others
        (ones, ZBox bounds), which cannot be written as ``x`` times something where ``x = 0``.
        ``z``: the layer's output (bias included), ``relevance``: the relevance of that output.
        """
        # Branches on x⁻ contribute nothing where no input is negative (after a ReLU): skip their
        # convolutions then (tf.cond runs one side only).
        any_negative = tf.reduce_any(x < 0) if any(b.inputs == "negative" for b in self.branches) else None
        outputs = []
        for branch in self.branches:
            kernels = {name: branch.kernels(w) for name, w in part.kernels.items()}
            bias = None if branch.bias is None or part.bias is None else branch.bias(part.bias)

            def run(kernels=kernels, bias=bias, kind=branch.inputs):
                return part.apply(self._modified_input(kind, x), kernels, bias)

            if branch.inputs == "negative":
                # with no bias in the branch (all rules here): zero output when x⁻ = 0
                out = tf.cond(any_negative, run, lambda: tf.zeros_like(z)) if bias is None else run()
            else:
                out = run()
            outputs.append((branch, kernels, out))

        scales, masks = self.group_scales(), self.group_masks()
        normalised = {}
        for group in sorted({branch.group for branch in self.branches}):
            denominator = sum(branch.sign * out for branch, _, out in outputs if branch.group == group)
            ratio = relevance / stabilize(denominator, self.stabilizer)
            if group in scales:
                ratio = ratio * scales[group]
            if group in masks:
                keep = z > 0 if masks[group] == "positive" else z < 0
                ratio = tf.where(keep, ratio, tf.zeros_like(ratio))
            normalised[group] = ratio

        coefficients = tf.zeros_like(x)
        constant = None
        for branch, kernels, _ in outputs:
            if branch.inputs == "negative":
                vjp = tf.cond(
                    any_negative,
                    lambda kernels=kernels, group=branch.group: _linear_vjp(part, kernels, x, normalised[group]),
                    lambda: tf.zeros_like(x),
                )
            else:
                vjp = _linear_vjp(part, kernels, x, normalised[branch.group])
            if branch.inputs in _PROPORTIONAL:
                if branch.inputs != "x":
                    keep = x > 0 if branch.inputs == "positive" else x < 0
                    vjp = tf.where(keep, vjp, tf.zeros_like(vjp))
                coefficients = coefficients + branch.sign * vjp
            else:
                term = branch.sign * self.constant_input(branch.inputs, x) * vjp
                constant = term if constant is None else constant + term
        return coefficients, constant

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_") and k != "branches")
        return f"{type(self).__name__}({fields})"


def _linear_vjp(part: LinearPart, kernels: dict, x, cotangent):
    """``Wᵀ · cotangent`` for the linear map ``part.apply(·, kernels, None)`` (its input VJP)."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = part.apply(x, kernels, None)
    return tape.gradient(out, x, output_gradients=cotangent)


# ---------------------------------------------------------------------------------------------
# The gates: forward unchanged, gradient replaced


def rule_gate(rule: LinearRule, part: LinearPart, x, z, to_relevance: bool):
    """``z`` unchanged; its gradient w.r.t. ``x`` replaced by ``rule``'s (in gradient form, or
    the relevance itself when ``to_relevance``)."""

    @tf.custom_gradient
    def gate(x, z):
        def backward(dz):
            coefficients, constant = rule.backward(part, x, z, z * dz)
            if to_relevance:
                dx = x * coefficients + (constant if constant is not None else 0)
            else:
                dx = coefficients if constant is None else coefficients + tf.math.divide_no_nan(constant, x)
            return dx, None

        return tf.identity(z), backward

    return gate(x, z)


def pass_gate(rule, x, y, to_relevance: bool):
    """``y`` unchanged; relevance passes from ``y`` to ``x`` by ``rule.gradient(x, y, dy)`` (in
    gradient form), or unchanged when ``to_relevance``."""

    @tf.custom_gradient
    def gate(x, y):
        def backward(dy):
            if to_relevance:
                return dy, None
            return rule.gradient(x, y, dy), None

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


def rescale_gate(function, x, y):
    """``y = function(x)`` unchanged (rows: inputs and baselines interleaved, or the inputs and one
    shared baseline, see :func:`halves`); backward: DeepLIFT's Rescale multiplier
    ``(y − y₀) / (x − x₀)`` for the input rows, zero for the baseline rows."""

    @tf.custom_gradient
    def gate(x, y):
        def backward(dy):
            x1, x0 = halves(x)
            y1, y0 = halves(y)
            dy1, _ = halves(dy)
            delta_x = x1 - x0
            with tf.GradientTape() as tape:
                tape.watch(x1)
                plain = function(x1)
            derivative = tape.gradient(plain, x1)
            multiplier = tf.where(
                tf.abs(delta_x) > DELTA_EPSILON,
                (y1 - y0) / tf.where(delta_x == 0, tf.ones_like(delta_x), delta_x),
                derivative,
            )
            return interleave(dy1 * multiplier, tf.zeros_like(x0)), None

        return tf.identity(y), backward

    return gate(x, y)


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
