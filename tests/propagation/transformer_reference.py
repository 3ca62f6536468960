"""References for the transformer rules, written from a model's weights without saliency_kit.

A post-norm transformer classifier (BERT's layout): ``e`` (the embeddings' sum) → layer norm →
blocks (self-attention, residual, layer norm; dense with GELU, dense, residual, layer norm) →
the first token → dense with tanh (the pooler) → the logits. Its weights are read from Keras
layers into :class:`Params` (plain NumPy arrays); then

* :func:`forward` runs it in NumPy (float64), every intermediate kept;
* :func:`stopped_logits` runs it in TensorFlow with ``tf.stop_gradient`` on exactly what the
  conservative LRP of Ali et al. (2022) holds constant: the attention probabilities, layer
  normalisation's ``1/σ``, and each element-wise activation's ratio ``f(z)/z`` (so that its
  gradient passes ``f(z)/z``: relevance unchanged); its gradient × input is LRP-0;
* :func:`deeplift` computes DeepLIFT's multipliers by hand in NumPy with the rules documented
  for the library: Rescale for GELU and tanh, the exact midpoint split for the bilinear
  attention products, the midpoint Jacobian rescaled per output for softmax (its closed-form
  Jacobian), layer norm's difference split exactly, written as a matrix (``Δy = A Δx``), and
  weights for the linear maps.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

DELTA = 1e-7  # the documented threshold: below it the plain derivative / Jacobian is used


@dataclasses.dataclass
class Norm:
    gamma: np.ndarray
    beta: np.ndarray
    epsilon: float


@dataclasses.dataclass
class Block:
    q: tuple  # (kernel [H, N, d], bias [N, d])
    k: tuple
    v: tuple
    o: tuple  # (kernel [N, d, H], bias [H])
    norm1: Norm
    ff1: tuple  # (kernel [H, F], bias [F])
    ff2: tuple
    norm2: Norm
    approximate_gelu: bool


@dataclasses.dataclass
class Params:
    norm0: Norm
    blocks: list
    pool: tuple
    logits: tuple


def _weights(layer) -> tuple:
    return tuple(np.asarray(w, np.float64) for w in layer.get_weights())


def norm_of(layer) -> Norm:
    gamma, beta = _weights(layer)
    return Norm(gamma, beta, float(layer.epsilon))


def block_of(attention, norm1, ff1, ff2, norm2, approximate_gelu: bool) -> Block:
    """A block from its Keras layers (a ``MultiHeadAttention`` and the rest)."""
    q, k, v, o = (
        _weights(layer)
        for layer in (attention._query_dense, attention._key_dense, attention._value_dense, attention._output_dense)
    )
    return Block(q, k, v, o, norm_of(norm1), _weights(ff1), _weights(ff2), norm_of(norm2), approximate_gelu)


def bert_params(classifier) -> Params:
    """The weights of a KerasHub ``BertTextClassifier`` (from after its embeddings' sum)."""
    backbone = classifier.backbone
    blocks = [
        block_of(
            layer._self_attention_layer,
            layer._self_attention_layer_norm,
            layer._feedforward_intermediate_dense,
            layer._feedforward_output_dense,
            layer._feedforward_layer_norm,
            approximate_gelu=True,
        )
        for layer in backbone.transformer_layers
    ]
    return Params(
        norm_of(backbone.embeddings_layer_norm),
        blocks,
        _weights(backbone.pooled_dense),
        _weights(classifier.get_layer("logits")),
    )


# ------------------------------------------------------------------------------------ NumPy forward


def gelu(z, approximate):
    if approximate:
        return 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))
    return 0.5 * z * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))


def layer_norm(norm: Norm, x):
    mu = x.mean(-1, keepdims=True)
    sigma = np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + norm.epsilon)
    return (x - mu) / sigma * norm.gamma + norm.beta


def softmax(s):
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    return p / p.sum(-1, keepdims=True)


def forward(params: Params, e, mask):
    """``e [T, H]`` (one row), ``mask [T]`` (1: a token, 0: padding) → ``(logits [C], trace)``."""
    trace = {"e": e}
    h = layer_norm(params.norm0, e)
    trace["h0"] = h
    key_mask = mask.astype(bool)
    for i, blk in enumerate(params.blocks):
        q = np.einsum("th,hnd->tnd", h, blk.q[0]) + blk.q[1]
        k = np.einsum("th,hnd->tnd", h, blk.k[0]) + blk.k[1]
        v = np.einsum("th,hnd->tnd", h, blk.v[0]) + blk.v[1]
        qs = q / math.sqrt(q.shape[-1])
        scores = np.einsum("snd,tnd->nts", k, qs)
        scores = np.where(key_mask[None, None, :], scores, -1e9)
        p = softmax(scores)
        ctx = np.einsum("nts,snd->tnd", p, v)
        attn = np.einsum("tnd,ndh->th", ctx, blk.o[0]) + blk.o[1]
        u1 = h + attn
        h1 = layer_norm(blk.norm1, u1)
        z1 = h1 @ blk.ff1[0] + blk.ff1[1]
        a = gelu(z1, blk.approximate_gelu)
        u2 = h1 + a @ blk.ff2[0] + blk.ff2[1]
        h2 = layer_norm(blk.norm2, u2)
        trace[i] = dict(h=h, q=q, k=k, v=v, qs=qs, scores=scores, p=p, ctx=ctx, u1=u1, h1=h1, z1=z1, a=a, u2=u2)
        h = h2
    trace["h"] = h
    zp = h[0] @ params.pool[0] + params.pool[1]
    pooled = np.tanh(zp)
    trace.update(zp=zp, pooled=pooled)
    return pooled @ params.logits[0] + params.logits[1], trace


# ------------------------------------------------------------------------------------ DeepLIFT by hand


def _rescale(m_y, x, x0, y, y0, derivative):
    dx = x - x0
    apart = np.abs(dx) > DELTA
    return m_y * np.where(apart, (y - y0) / np.where(apart, dx, 1.0), derivative)


def _rescaled_jacobian(m_y, jacobian, dx, dy):
    """``Jᵀ (m_y ⊙ Δy / (J Δx))``, the plain ``Jᵀ m_y`` where ``|J Δx| ≤ DELTA``."""
    linear = jacobian @ dx
    apart = np.abs(linear) > DELTA
    cotangent = np.where(apart, m_y * dy / np.where(apart, linear, 1.0), m_y)
    return jacobian.T @ cotangent


def _layer_norm_multipliers(norm: Norm, x, x0, m_y):
    """Per token: ``Δy = A Δx`` exactly, with ``A = diag(γ) (s·P + (Δs/Δvar)·c₀ ((c + c₀)/n)ᵀ P)``
    (``P = I − 1/n`` centres, ``c = P x``, ``s = (var(c) + ε)^-1/2``; ``Δs/Δvar`` the secant, the
    derivative where the variances agree), and the multipliers ``Aᵀ m_y``."""
    out = np.zeros_like(x)
    n = x.shape[-1]
    P = np.eye(n) - 1.0 / n
    for t in range(x.shape[0]):
        c, c0 = P @ x[t], P @ x0[t]
        var, var0 = (c**2).mean(), (c0**2).mean()
        s, s0 = 1 / np.sqrt(var + norm.epsilon), 1 / np.sqrt(var0 + norm.epsilon)
        secant = (s - s0) / (var - var0) if abs(var - var0) > 1e-12 else -0.5 * s**3
        A = norm.gamma[:, None] * (s * P + secant * np.outer(c0, (c + c0) / n) @ P)
        out[t] = A.T @ m_y[t]
    return out


def _softmax_multipliers(s, s0, m_p):
    """Per attention row: the midpoint Jacobian of softmax, ``diag(p) − p pᵀ``."""
    out = np.zeros_like(s)
    p, p0 = softmax(s), softmax(s0)
    pm = softmax((s + s0) / 2)
    for index in np.ndindex(s.shape[:-1]):
        jacobian = np.diag(pm[index]) - np.outer(pm[index], pm[index])
        out[index] = _rescaled_jacobian(m_p[index], jacobian, s[index] - s0[index], p[index] - p0[index])
    return out


def deeplift(params: Params, e, e0, mask, column: int):
    """DeepLIFT's multipliers ``∂ logit[column]`` w.r.t. ``e`` ``[T, H]`` against ``e0`` (one row)."""
    _, tr = forward(params, e, mask)
    _, t0 = forward(params, e0, mask)
    m_pooled = params.logits[0][:, column]
    m_zp = _rescale(m_pooled, tr["zp"], t0["zp"], tr["pooled"], t0["pooled"], 1 - tr["pooled"] ** 2)
    m_h = np.zeros_like(tr["h"])
    m_h[0] = params.pool[0] @ m_zp
    for i in reversed(range(len(params.blocks))):
        blk, a, b = params.blocks[i], tr[i], t0[i]
        m_u2 = _layer_norm_multipliers(blk.norm2, a["u2"], b["u2"], m_h)
        m_a = m_u2 @ blk.ff2[0].T
        z = a["z1"]
        derivative = _gelu_derivative(z, blk.approximate_gelu)
        m_z1 = _rescale(m_a, a["z1"], b["z1"], a["a"], b["a"], derivative)
        m_h1 = m_u2 + m_z1 @ blk.ff1[0].T
        m_u1 = _layer_norm_multipliers(blk.norm1, a["u1"], b["u1"], m_h1)
        m_ctx = np.einsum("th,ndh->tnd", m_u1, blk.o[0])
        v_mid, p_mid = (a["v"] + b["v"]) / 2, (a["p"] + b["p"]) / 2
        m_p = np.einsum("tnd,snd->nts", m_ctx, v_mid)
        m_v = np.einsum("tnd,nts->snd", m_ctx, p_mid)
        m_s = _softmax_multipliers(a["scores"], b["scores"], m_p)
        k_mid, qs_mid = (a["k"] + b["k"]) / 2, (a["qs"] + b["qs"]) / 2
        m_q = np.einsum("nts,snd->tnd", m_s, k_mid) / math.sqrt(a["q"].shape[-1])
        m_k = np.einsum("nts,tnd->snd", m_s, qs_mid)
        m_h = (
            m_u1
            + np.einsum("tnd,hnd->th", m_q, blk.q[0])
            + np.einsum("tnd,hnd->th", m_k, blk.k[0])
            + np.einsum("tnd,hnd->th", m_v, blk.v[0])
        )
    return _layer_norm_multipliers(params.norm0, tr["e"], t0["e"], m_h)


def _gelu_derivative(z, approximate):
    if approximate:
        c = math.sqrt(2 / math.pi)
        inner = c * (z + 0.044715 * z**3)
        return 0.5 * (1 + np.tanh(inner)) + 0.5 * z * (1 - np.tanh(inner) ** 2) * c * (1 + 3 * 0.044715 * z**2)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    return cdf + z * np.exp(-(z**2) / 2) / math.sqrt(2 * math.pi)


# ------------------------------------------------------------------------------------ LRP twin


def stopped_logits(params: Params, e, mask):
    """The logits ``[B, C]`` from ``e`` ``[B, T, H]`` (a ``tf`` tensor, float32), in TensorFlow,
    with ``tf.stop_gradient`` on the attention probabilities, layer norm's ``1/σ`` and each
    activation's ``f(z)/z``: its gradient × input is the conservative LRP-0 relevance."""
    import tensorflow as tf

    def const(a):
        return tf.constant(a, tf.float32)

    def norm(n: Norm, x):
        mu = tf.reduce_mean(x, -1, keepdims=True)
        inverse = tf.math.rsqrt(tf.reduce_mean(tf.square(x - mu), -1, keepdims=True) + n.epsilon)
        return (x - mu) * tf.stop_gradient(inverse) * const(n.gamma) + const(n.beta)

    def passing(f, z):  # f(z) with gradient f(z)/z
        return z * tf.stop_gradient(tf.math.divide_no_nan(f(z), z))

    key_mask = tf.constant(np.asarray(mask).astype(bool))[:, None, None, :]
    h = norm(params.norm0, e)
    for blk in params.blocks:
        q = tf.einsum("bth,hnd->btnd", h, const(blk.q[0])) + const(blk.q[1])
        k = tf.einsum("bth,hnd->btnd", h, const(blk.k[0])) + const(blk.k[1])
        v = tf.einsum("bth,hnd->btnd", h, const(blk.v[0])) + const(blk.v[1])
        scores = tf.einsum("bsnd,btnd->bnts", k, q / math.sqrt(blk.q[0].shape[-1]))
        p = tf.stop_gradient(tf.nn.softmax(tf.where(key_mask, scores, -1e9), axis=-1))
        ctx = tf.einsum("bnts,bsnd->btnd", p, v)
        h1 = norm(blk.norm1, h + tf.einsum("btnd,ndh->bth", ctx, const(blk.o[0])) + const(blk.o[1]))
        z1 = tf.einsum("bth,hf->btf", h1, const(blk.ff1[0])) + const(blk.ff1[1])
        a = passing(lambda t, blk=blk: tf.nn.gelu(t, approximate=blk.approximate_gelu), z1)
        h = norm(blk.norm2, h1 + tf.einsum("btf,fh->bth", a, const(blk.ff2[0])) + const(blk.ff2[1]))
    pooled = passing(tf.tanh, h[:, 0] @ const(params.pool[0]) + const(params.pool[1]))
    return pooled @ const(params.logits[0]) + const(params.logits[1])
