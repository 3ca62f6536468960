"""The mechanism of relevance propagation: linear parts and the rule mechanism.

* :class:`LinearPart` / :func:`linear_parts`: a supported layer as linear maps
  ``z = apply(x, kernels, bias)`` with its current parameters (two for a separable convolution;
  a merged BatchNormalization folded into the last one), so one rule serves ``Dense``,
  ``EinsumDense``, ``Conv1D/2D/3D``, ``DepthwiseConv``, ``SeparableConv`` and average pooling.
* :class:`LinearRule` and :class:`Branch`: Zennit's ``BasicHook``. A rule (in :mod:`.rules`) is a
  list of branches; :meth:`LinearRule.backward` does the rest.

The ``custom_gradient`` gates that put these rules on a backward pass are :mod:`.gates`; putting
the layers that carry them into a copy of a model is :mod:`.rewriting`.

Notation (Montavon et al. 2019): ``z_j = Σ_i x_i w_ij + b_j``; ``R_j`` the relevance of output
``j``; every denominator is stabilised as ``stab(d) = d + ε·sign(d)`` with ``sign(0) = +1``.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import keras
from keras import ops

from . import canonizers
from .autodiff import eager_pullback, pullback

__all__ = [
    "Branch",
    "LinearPart",
    "LinearRule",
    "linear_parts",
    "linear_vjp",
    "positive_part",
    "stabilize",
    "unchanged",
]


def stabilize(d: Any, epsilon: float) -> Any:
    """``d + ε·sign(d)`` with ``sign(0) = +1``: never zero, same sign as ``d``."""
    return d + ops.where(d >= 0, ops.cast(epsilon, d.dtype), ops.cast(-epsilon, d.dtype))


def unchanged(w: Any) -> Any:
    """The identity parameter modifier."""
    return w


# ---------------------------------------------------------------------------------------------
# Linear parts


@dataclasses.dataclass(frozen=True)
class LinearPart:
    """A linear map ``z = apply(x, kernels, bias)`` with its current parameters.

    ``kernels``: ``{name: tensor}`` (empty for pooling); ``bias``: a tensor or ``None``. ``apply``
    must be linear in ``x`` when ``bias`` is ``None``. ``pull``: ``c ↦ Wᵀc`` for these ``kernels``,
    recorded by the layer's forward pass where that spares a second one
    (:func:`~saliency_kit.propagation.autodiff.eager_pullback`), else ``None``.
    """

    apply: Callable
    kernels: dict
    bias: object = None
    pull: Callable | None = None


def _add_bias(z: Any, bias: Any, layer: Any) -> Any:
    if bias is None:
        return z
    if getattr(layer, "data_format", "channels_last") == "channels_first":
        bias = ops.reshape(bias, [1, -1] + [1] * (len(z.shape) - 2))
    return z + bias


def linear_parts(layer: Any, absorbed_bn: Any = None) -> list[LinearPart]:
    """The linear maps ``layer`` computes, in order (two for a separable convolution), with its
    current parameters; ``absorbed_bn`` a BatchNormalization merged into the last one."""
    dtype = layer.compute_dtype

    def value(variable: Any) -> Any:
        return ops.cast(ops.convert_to_tensor(variable), dtype)

    bias = value(layer.bias) if getattr(layer, "use_bias", False) else None
    if isinstance(layer, keras.layers.Dense):
        parts = [
            LinearPart(
                lambda x, k, b: _add_bias(
                    ops.matmul(x, k["kernel"]) if len(x.shape) == 2 else ops.tensordot(x, k["kernel"], 1), b, layer
                ),
                {"kernel": value(layer.kernel)},
                bias,
            )
        ]
    elif isinstance(layer, keras.layers.EinsumDense):
        _refuse_modified_einsum(layer)

        def einsum(x: Any, k: Any, b: Any) -> Any:
            z = ops.einsum(layer.equation, x, k["kernel"])
            return z if b is None else z + b

        einsum_bias = value(layer.bias) if layer.bias is not None else None
        parts = [LinearPart(einsum, {"kernel": value(layer.kernel)}, einsum_bias)]
    elif isinstance(layer, (keras.layers.SeparableConv1D, keras.layers.SeparableConv2D)):
        parts = _separable_parts(layer, value, bias)
    elif isinstance(layer, (keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D)):

        def depthwise(x: Any, k: Any, b: Any) -> Any:
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
                lambda x, k, b: _add_bias(_convolution(layer, x, k["kernel"]), b, layer),
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


def _convolution(layer: Any, x: Any, kernel: Any) -> Any:
    """``layer``'s convolution of ``x`` with ``kernel`` (no bias), as its ``call`` computes it: a
    causal ``Conv1D`` pads the time axis with ``dilation · (size − 1)`` zeros on the left first
    (a linear step, so every rule passes through it)."""
    if layer.padding != "causal":
        return layer.convolution_op(x, kernel)
    left = layer.dilation_rate[0] * (layer.kernel_size[0] - 1)
    time_axis = 1 if layer.data_format == "channels_last" else 2
    widths = [[0, 0], [0, 0], [0, 0]]
    widths[time_axis] = [left, 0]
    return ops.conv(
        ops.pad(x, widths),
        kernel,
        strides=layer.strides,
        padding="valid",
        dilation_rate=layer.dilation_rate,
        data_format=layer.data_format,
    )


def _refuse_modified_einsum(layer: Any) -> None:
    if getattr(layer, "quantization_mode", None) or getattr(layer, "lora_enabled", False):
        raise ValueError(
            f"layer {layer.name!r} (EinsumDense) is quantized or has LoRA weights; the LRP rules read a "
            "plain kernel. Explain the model before quantizing it, or merge the LoRA weights; received "
            f"quantization_mode={getattr(layer, 'quantization_mode', None)!r}, "
            f"lora_enabled={getattr(layer, 'lora_enabled', False)!r}."
        )


def _separable_parts(layer: Any, value: Any, bias: Any) -> Any:
    rank = 1 if isinstance(layer, keras.layers.SeparableConv1D) else 2

    def depthwise(x: Any, k: Any, b: Any) -> Any:
        return keras.ops.depthwise_conv(
            x,
            k["depthwise_kernel"],
            strides=layer.strides,
            padding=layer.padding,
            data_format=layer.data_format,
            dilation_rate=layer.dilation_rate,
        )

    def pointwise(x: Any, k: Any, b: Any) -> Any:
        z = keras.ops.conv(
            x, k["pointwise_kernel"], strides=(1,) * rank, padding="valid", data_format=layer.data_format
        )
        return _add_bias(z, b, layer)

    return [
        LinearPart(depthwise, {"depthwise_kernel": value(layer.depthwise_kernel)}, None),
        LinearPart(pointwise, {"pointwise_kernel": value(layer.pointwise_kernel)}, bias),
    ]


def _merge(part: LinearPart, layer: Any, bn: Any, dtype: Any) -> LinearPart:
    """``part`` followed by ``bn`` as one linear part: ``w·s``, ``b·s + t`` (canonizers' merge)."""
    scale, shift = canonizers.batchnorm_affine(bn, dtype)
    ((name, kernel),) = part.kernels.items()
    if isinstance(layer, (keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D)):
        merged = kernel * ops.reshape(scale, kernel.shape[-2:])
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

    def __init__(self, stabilizer: float = 1e-6) -> None:
        stabilizer = float(stabilizer)
        if not stabilizer >= 0:
            raise ValueError(f"stabilizer must be a non-negative number; received {stabilizer!r}.")
        self.stabilizer = stabilizer

    def group_scales(self) -> dict:
        return {}

    def group_masks(self) -> dict:
        """``{group: "positive" | "negative"}``: keep only outputs where ``z`` has that sign."""
        return {}

    def constant_input(self, name: str, x: Any) -> Any:
        """The tensor of a non-proportional input kind (``"ones"``, ``"low"``, ``"high"``)."""
        if name == "ones":
            return ops.ones_like(x)
        raise ValueError(f"{type(self).__name__} has no input kind {name!r}")

    def _modified_input(self, kind: str, x: Any) -> Any:
        if kind == "x":
            return x
        if kind == "positive":
            return ops.maximum(x, 0)
        if kind == "negative":
            return ops.minimum(x, 0)
        return self.constant_input(kind, x)

    def backward(self, part: LinearPart, x: Any, z: Any, relevance: Any, nonnegative: bool = False) -> Any:
        """``(coefficients, constant_relevance)`` for the input of ``part``.

        The input relevance is ``x ⊙ coefficients + constant_relevance``; the first term holds the
        branches whose input is proportional to ``x`` (``x``, x⁺, x⁻), the second the others
        (ones, ZBox bounds), which cannot be written as ``x`` times something where ``x = 0``.
        ``z``: the layer's output (bias included), ``relevance``: the relevance of that output.
        ``nonnegative``: ``x >= 0`` by construction (it comes from a ReLU), so ``x⁺ = x`` and the
        branches on ``x⁻`` are zero: they are left out. The coefficients may then differ where
        ``x = 0``, which the ReLU before turns into zero relevance and zero gradient.
        """
        branches = [b for b in self.branches if not (nonnegative and b.inputs == "negative")]
        # Branches on x⁻ contribute nothing where no input is negative (after a ReLU): skip their
        # convolutions then (ops.cond runs one side only).
        any_negative = ops.any(x < 0) if any(b.inputs == "negative" for b in branches) else None
        outputs = []
        for branch in branches:
            kernels = (
                part.kernels if branch.kernels is unchanged else {n: branch.kernels(w) for n, w in part.kernels.items()}
            )
            bias = None if branch.bias is None or part.bias is None else branch.bias(part.bias)
            kind = "x" if nonnegative and branch.inputs == "positive" else branch.inputs

            def run(kernels: Any = kernels, bias: Any = bias, kind: Any = kind) -> Any:
                return part.apply(self._modified_input(kind, x), kernels, bias)

            pull = None
            if kind == "negative":
                # with no bias in the branch (all rules here): zero output when x⁻ = 0
                out = ops.cond(any_negative, run, lambda: ops.zeros_like(z)) if bias is None else run()
            elif kind == "x" and kernels is part.kernels and (part.bias is None or branch.bias is unchanged):
                out = z  # the layer's own output: its convolution is not run a second time
            else:  # the branch's pull-back from this same evaluation (its map is linear: any point serves)
                out, pull = eager_pullback(
                    lambda m, kernels=kernels, bias=bias: part.apply(m, kernels, bias), self._modified_input(kind, x)
                )
            outputs.append((branch, kind, kernels, out, pull))

        scales, masks = self.group_scales(), self.group_masks()
        normalised = {}
        for group in sorted({branch.group for branch in branches}):
            terms = [
                out if branch.sign == 1.0 else branch.sign * out
                for branch, _, _, out, _ in outputs
                if branch.group == group
            ]
            denominator = functools.reduce(operator.add, terms)  # no pass over a zero start, none for a sign of 1
            ratio = relevance / stabilize(denominator, self.stabilizer)
            if group in scales:
                ratio = ratio * scales[group]
            if group in masks:
                keep = z > 0 if masks[group] == "positive" else z < 0
                ratio = ops.where(keep, ratio, ops.zeros_like(ratio))
            normalised[group] = ratio

        coefficients = None
        constant = None
        for branch, kind, kernels, _, pull in outputs:
            if kind == "negative":
                vjp = ops.cond(
                    any_negative,
                    lambda kernels=kernels, group=branch.group: linear_vjp(part, kernels, x, normalised[group]),
                    lambda: ops.zeros_like(x),
                )
            else:
                vjp = linear_vjp(part, kernels, x, normalised[branch.group], pull)
            if kind in _PROPORTIONAL:
                if kind != "x":
                    keep = x > 0 if kind == "positive" else x < 0
                    vjp = ops.where(keep, vjp, ops.zeros_like(vjp))
                term = vjp if branch.sign == 1.0 else branch.sign * vjp
                coefficients = term if coefficients is None else coefficients + term
            else:
                term = branch.sign * self.constant_input(branch.inputs, x) * vjp
                constant = term if constant is None else constant + term
        return (ops.zeros_like(x) if coefficients is None else coefficients), constant

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_") and k != "branches")
        return f"{type(self).__name__}({fields})"


def positive_part(part: LinearPart) -> LinearPart:
    """``part`` with ``w⁺`` and ``b⁺``: for ``x >= 0`` it computes ``z⁺ = Σ_i x_i w⁺_ij + b⁺_j``."""
    kernels = {name: ops.maximum(w, 0) for name, w in part.kernels.items()}
    return LinearPart(part.apply, kernels, None if part.bias is None else ops.maximum(part.bias, 0))


def linear_vjp(part: LinearPart, kernels: dict, x: Any, cotangent: Any, pull: Callable | None = None) -> Any:
    """``Wᵀ · cotangent`` for the linear map ``part.apply(·, kernels, None)`` (its input VJP): by
    ``pull``, that map's pull-back recorded where its output was computed
    (:func:`~saliency_kit.propagation.autodiff.eager_pullback`), or the forward pass's recorded one
    where ``kernels`` are the part's own; else from a new evaluation."""
    if pull is not None:
        return pull(cotangent)
    if kernels is part.kernels and part.pull is not None:
        return part.pull(cotangent)
    _, pull = pullback(lambda x: part.apply(x, kernels, None), x)
    return pull(cotangent)
