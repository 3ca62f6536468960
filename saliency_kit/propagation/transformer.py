"""Layer normalisation and multi-head attention in the LRP and DeepLIFT copies.

**LRP** (conservative propagation, Ali et al. 2022, "XAI for Transformers: Better Explanations
through Conservative Propagation"; the basis of AttnLRP, Achtibat et al. 2024): in the backward
pass the attention probabilities (the softmax output) and layer normalisation's ``1/σ`` are
constants, so attention is linear in the values and layer normalisation is linear (centering,
then a constant scale). In the gradient form the LRP copies carry (``R = value ⊙ gradient``)
that is exactly the gradient with ``tf.stop_gradient`` on those two quantities: LRP-0 on the
centering (its ``β`` absorbing like a bias), the composite's rule on the value and output
projections (``EinsumDense``: the dense layers' rule), nothing through the queries and keys.

**DeepLIFT** (rows of inputs and references, :mod:`~saliency_kit.propagation.gates`):

* the scores ``Q·Kᵀ`` and the weighted sum ``P·V``, bilinear maps of two tensors that both move,
  by the exact split ``Δ(AB) = ΔA·(B + B₀)/2 + (A + A₀)/2·ΔB``
  (:func:`~saliency_kit.propagation.products.bilinear_gate`);
* the masked softmax, a map that mixes its inputs, by the midpoint Jacobian rescaled per output
  (:func:`~saliency_kit.propagation.gates.midpoint_gate`), which keeps summation to delta exact
  and is Rescale on an element-wise map;
* layer normalisation ``y = γ ⊙ c·s + β`` (``c`` the centred input, ``s = (var(c) + ε)^-1/2``)
  by the exact split ``Δ(c·s) = Δc·s + c₀·Δs``, ``Δs = (Δs/Δvar)·mean((c + c₀) ⊙ Δc)``
  (:func:`layer_norm_multipliers`): linear in ``Δc``, and well conditioned where the
  reference's variance is zero (a zero baseline before a block whose biases are zero), where
  ``c₀ = 0`` and the midpoint Jacobian, taken where the map has saturated, is nearly zero;
* the projections, linear, by their gradient.

Both wrappers compute what the layer computes (checked with the rest of the copy): the attention
as ``MultiHeadAttention`` does without a fused kernel — scaled queries, ``einsum`` scores, its
masked softmax (its own mask merging, ``Softmax`` layer and ``-1e9`` fill), ``einsum`` with the
values, the output projection.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops

from ..model import keras_private
from .gates import midpoint_gate, relevance_gate
from .products import bilinear_gate
from .rewriting import WrapperLayer

__all__ = ["AttentionLayer", "LayerNormLayer", "layer_norm_multipliers", "normaliser"]


def normaliser(layer: Any, dtype: Any, constant_scale: bool = False) -> Any:
    """``layer`` (a ``LayerNormalization``) as a function of its input, with its current
    parameters read now (a gate's function must not read variables), computed as Keras computes
    it (in at least float32); ``constant_scale``: ``1/σ`` under ``stop_gradient`` (LRP)."""
    compute = "float64" if keras.backend.standardize_dtype(dtype) == "float64" else "float32"
    gamma = None if layer.gamma is None else ops.cast(ops.convert_to_tensor(layer.gamma), compute)
    beta = None if getattr(layer, "beta", None) is None else ops.cast(ops.convert_to_tensor(layer.beta), compute)
    epsilon = ops.cast(layer.epsilon, compute)

    def normalise(x: Any) -> Any:
        rank = len(x.shape)
        axes = sorted(a % rank for a in ([layer.axis] if isinstance(layer.axis, int) else layer.axis))
        shape = [x.shape[a] if a in axes else 1 for a in range(rank)]

        def parameter(value: Any) -> Any:
            return value if axes == [rank - 1] else ops.reshape(value, shape)

        x = ops.cast(x, compute)
        mean = ops.mean(x, axis=axes, keepdims=True)  # the moments as tf.nn.moments computes them
        variance = ops.mean(ops.square(x - ops.stop_gradient(mean)), axis=axes, keepdims=True)
        inverse = ops.rsqrt(variance + epsilon)
        if constant_scale:
            inverse = ops.stop_gradient(inverse)
        y = x * inverse if layer.rms_scaling else (x - mean) * inverse  # Keras' rms_scaling: not centred
        if gamma is not None:
            y = y * parameter(gamma)
        if beta is not None and not layer.rms_scaling:
            y = y + parameter(beta)
        return ops.cast(y, dtype)

    return normalise


def layer_norm_multipliers(layer: Any, dtype: Any) -> Any:
    """DeepLIFT's multipliers of ``layer`` (a ``LayerNormalization``), ``(x, x0, y, y0, dy) -> m_x``:
    with ``g = γ ⊙ dy``, ``m_c = s·g + Σ(g ⊙ c₀)·(Δs/Δvar)·(c + c₀)/n`` and ``m_x`` its centred
    part (``m_c`` itself under ``rms_scaling``), the plain ``ds/dvar`` where ``|Δvar| ≤ 1e-12``;
    ``Σ Δx ⊙ m_x = Σ Δy ⊙ dy`` exactly (see the module docstring). ``x0``: one row or one per row."""
    compute = "float64" if keras.backend.standardize_dtype(dtype) == "float64" else "float32"
    gamma = None if layer.gamma is None else ops.cast(ops.convert_to_tensor(layer.gamma), compute)
    epsilon = ops.cast(layer.epsilon, compute)

    def multipliers(x: Any, x0: Any, y: Any, y0: Any, dy: Any) -> Any:
        rank = len(x.shape)
        axes = sorted(a % rank for a in ([layer.axis] if isinstance(layer.axis, int) else layer.axis))
        shape = [x.shape[a] if a in axes else 1 for a in range(rank)]
        size = float(np.prod([x.shape[a] for a in axes]))
        x, x0, dy = (ops.cast(t, compute) for t in (x, x0, dy))

        def centred(t: Any) -> Any:
            return t if layer.rms_scaling else t - ops.mean(t, axis=axes, keepdims=True)

        c, c0 = centred(x), centred(x0)
        variance = ops.mean(ops.square(c), axis=axes, keepdims=True)
        variance0 = ops.mean(ops.square(c0), axis=axes, keepdims=True)
        s, s0 = ops.rsqrt(variance + epsilon), ops.rsqrt(variance0 + epsilon)
        change = variance - variance0
        apart = ops.abs(change) > 1e-12
        secant = ops.where(apart, (s - s0) / ops.where(apart, change, ops.ones_like(change)), -0.5 * s * s * s)
        g = dy if gamma is None else dy * (gamma if axes == [rank - 1] else ops.reshape(gamma, shape))
        m_c = s * g + ops.sum(g * c0, axis=axes, keepdims=True) * secant * (c + c0) / size
        return ops.cast(centred(m_c), dtype)

    return multipliers


class LayerNormLayer(WrapperLayer):
    """A ``LayerNormalization`` with the LRP rule (``method="lrp"``: ``1/σ`` constant; with
    ``to_relevance`` its input gradient is the relevance) or DeepLIFT's exact split
    (:func:`layer_norm_multipliers`)."""

    def __init__(self, inner: Any, method: str, **kwargs: Any) -> None:
        super().__init__(inner, **kwargs)
        self.method = method
        self.to_relevance = False

    def call(self, x: Any, training: bool | None = None, mask: Any = None) -> Any:
        if self.method == "lrp":
            linear = normaliser(self.inner, x.dtype, constant_scale=True)
            return linear(relevance_gate(x) if self.to_relevance else x)
        return midpoint_gate(
            normaliser(self.inner, x.dtype), x, site=self, multipliers=layer_norm_multipliers(self.inner, x.dtype)
        )


class AttentionLayer(WrapperLayer):
    """A ``keras.layers.MultiHeadAttention`` (not gated, its attention not overridden) with the
    LRP or DeepLIFT rules of the module docstring. Same call as ``MultiHeadAttention``.

    ``inner``: built. ``projection``: ``projection(einsum_dense, role) -> layer``, the layer that
    runs a projection (``role``: ``"query"``, ``"key"``, ``"value"``, ``"output"``) with its rule,
    or ``None`` for the projection itself.
    """

    def __init__(self, inner: Any, method: str, projection: Any = None, **kwargs: Any) -> None:
        super().__init__(inner, **kwargs)
        self.method = method
        self.to_relevance = False  # LRP: the value projection's input gradient is the relevance
        self.supports_masking = True
        if not inner.built:
            raise ValueError(f"AttentionLayer needs a built MultiHeadAttention; received {inner.name!r}, unbuilt.")
        dense = keras_private.attention_projections(inner)
        projections = {
            role: (projection(layer, role) if projection is not None else None) or layer
            for role, layer in dense.items()
        }
        object.__setattr__(self, "projections", projections)  # helpers, not tracked: the weights are inner's

    def build(self, query_shape: Any, value_shape: Any = None, key_shape: Any = None) -> None:
        pass  # inner is built

    def call(
        self,
        query: Any,
        value: Any,
        key: Any = None,
        query_mask: Any = None,
        value_mask: Any = None,
        key_mask: Any = None,
        attention_mask: Any = None,
        return_attention_scores: bool = False,
        training: bool | None = None,
        use_causal_mask: bool = False,
    ) -> Any:
        mha = self.inner
        if key is None:
            key = value
        mask = keras_private.attention_mask(
            mha,
            query,
            value,
            query_mask=keras_private.keras_mask(query),  # as MultiHeadAttention reads it
            value_mask=value_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
        )
        projections = self.projections
        q = projections["query"](query)
        k = projections["key"](key)
        v = projections["value"](relevance_gate(value) if self.to_relevance and self.method == "lrp" else value)
        q = q * ops.cast(keras_private.attention_scale(mha), q.dtype)
        dot_product, combination = keras_private.attention_equations(mha)

        def scores_of(k: Any, q: Any) -> Any:
            return ops.einsum(dot_product, k, q)

        def softmax(scores: Any) -> Any:
            return keras_private.attention_softmax(mha, scores, mask)

        def combine(p: Any, v: Any) -> Any:
            return ops.einsum(combination, p, v)

        if self.method == "lrp":
            probabilities = ops.stop_gradient(softmax(scores_of(k, q)))
            context = combine(probabilities, v)
        else:
            probabilities = midpoint_gate(softmax, bilinear_gate(scores_of, k, q, site=self), site=self)
            context = bilinear_gate(combine, probabilities, v, site=self)
        output = projections["output"](context)
        if return_attention_scores:
            return output, probabilities
        return output

    def compute_output_spec(self, query: Any, value: Any, key: Any = None, **kwargs: Any) -> Any:  # type: ignore[override]
        return self.inner.compute_output_spec(query, value, key, **kwargs)

    def compute_mask(self, query: Any, value: Any, key: Any = None, **kwargs: Any) -> Any:
        return keras_private.keras_mask(query)
