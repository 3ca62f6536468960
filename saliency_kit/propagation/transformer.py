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
* the masked softmax and layer normalisation, maps that mix their inputs, by the midpoint
  Jacobian rescaled per output (:func:`~saliency_kit.propagation.gates.midpoint_gate`), which
  keeps summation to delta exact and is Rescale on an element-wise map;
* the projections, linear, by their gradient.

Both wrappers compute what the layer computes (checked with the rest of the copy): the attention
as ``MultiHeadAttention`` does without a fused kernel — scaled queries, ``einsum`` scores, its
masked softmax (its own mask merging, ``Softmax`` layer and ``-1e9`` fill), ``einsum`` with the
values, the output projection.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from ..model import keras_private
from .gates import midpoint_gate, relevance_gate
from .products import bilinear_gate
from .rewriting import WrapperLayer

__all__ = ["AttentionLayer", "LayerNormLayer", "normaliser"]


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


class LayerNormLayer(WrapperLayer):
    """A ``LayerNormalization`` with the LRP rule (``method="lrp"``: ``1/σ`` constant; with
    ``to_relevance`` its input gradient is the relevance) or DeepLIFT's midpoint rule."""

    def __init__(self, inner: Any, method: str, **kwargs: Any) -> None:
        super().__init__(inner, **kwargs)
        self.method = method
        self.to_relevance = False

    def call(self, x: Any, training: bool | None = None, mask: Any = None) -> Any:
        if self.method == "lrp":
            linear = normaliser(self.inner, x.dtype, constant_scale=True)
            return linear(relevance_gate(x) if self.to_relevance else x)
        return midpoint_gate(normaliser(self.inner, x.dtype), x, site=self)


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
