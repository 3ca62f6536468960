"""Small causal language models shared by the tests of generated text: each returns next-token
logits ``[B, T, V]`` from int token ids ``[B, T]``, built in ``keras.ops`` (any backend).

* :func:`prefix_mean_lm`: ``logits[t] = (Σ_{s ≤ t} E[x_s] / (t + 1)) W``, whose gradients have a
  closed form (:func:`prefix_mean_gradient`, NumPy);
* :func:`attention_lm`: one causal self-attention block, with a twin fed the embeddings;
* :func:`tiny_gpt2`: KerasHub's ``GPT2CausalLM`` from a tiny random config and an inline
  vocabulary (no download).
"""

import keras
import numpy as np
from keras import ops

V, D, T = 11, 6, 7


class PrefixMean(keras.layers.Layer):
    """``[B, T, D] -> [B, T, D]``: the mean of the vectors up to each position."""

    def call(self, x):
        counts = ops.cast(ops.arange(1, ops.shape(x)[1] + 1), x.dtype)[None, :, None]
        return ops.cumsum(x, axis=1) / counts


class WholeMean(keras.layers.Layer):
    """``[B, T, D] -> [B, T, D]``: the mean over every position at each position (not causal)."""

    def call(self, x):
        return ops.mean(x, axis=1, keepdims=True) + 0.0 * x


def _weights(seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(V, D)).astype("float32"), rng.normal(size=(D, V)).astype("float32")


def prefix_mean_lm(seed=0, causal=True):
    """``(model, E [V, D], W [D, V])``; ``causal=False`` mixes every position (a model that sees
    its future). Its sequences may have any length."""
    table, weight = _weights(seed)
    ids = keras.Input((None,), dtype="int32", name="ids")
    embedded = keras.layers.Embedding(V, D, name="embedding")(ids)
    mixed = (PrefixMean() if causal else WholeMean())(embedded)
    logits = keras.layers.Dense(V, use_bias=False, name="logits")(mixed)
    model = keras.Model(ids, logits)
    model.get_layer("embedding").set_weights([table])
    model.get_layer("logits").set_weights([weight])
    return model, table, weight


def log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def prefix_mean_gradient(ids, table, weight, position, token):
    """NumPy ``[T, D]``: ∂ log p(token | ids[:position]) / ∂ E[ids] of :func:`prefix_mean_lm`."""
    before = position - 1
    mean = table[ids[:position]].mean(axis=0)
    logits = mean @ weight
    p = np.exp(log_softmax(logits))
    onehot = np.eye(V)[token]
    grad_mean = weight @ (onehot - p)  # [D]
    out = np.zeros((len(ids), D), np.float32)
    out[: before + 1] = grad_mean / position
    return out


def attention_lm(seed=0):
    """``(model on ids, twin on embeddings [B, T, D])``: the same layers, one causal attention block."""
    keras.utils.set_random_seed(seed)
    embedding = keras.layers.Embedding(V, D, name="embedding")
    attention = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, name="attention")
    norm = keras.layers.LayerNormalization(name="norm")
    head = keras.layers.Dense(V, name="logits")

    def body(x):
        return head(norm(x + attention(x, x, use_causal_mask=True)))

    ids = keras.Input((T,), dtype="int32", name="ids")
    model = keras.Model(ids, body(embedding(ids)))
    vectors = keras.Input((T, D), name="vectors")
    twin = keras.Model(vectors, body(vectors))
    return model, twin


VOCABULARY = {"<|endoftext|>": 0, "a": 1, "b": 2, "Ġa": 3, "Ġb": 4, "ab": 5, "Ġab": 6, "c": 7, "Ġc": 8, "Ġ": 9}
MERGES = ["a b", "Ġ a", "Ġ b", "Ġa b", "Ġ c"]


def tiny_gpt2(seed=0, sequence_length=16):
    """KerasHub's ``GPT2CausalLM`` with two tiny blocks, random weights and an inline vocabulary."""
    import keras_hub

    keras.utils.set_random_seed(seed)
    tokenizer = keras_hub.tokenizers.GPT2Tokenizer(vocabulary=dict(VOCABULARY), merges=list(MERGES))
    preprocessor = keras_hub.models.GPT2CausalLMPreprocessor(tokenizer=tokenizer, sequence_length=sequence_length)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=len(VOCABULARY),
        num_layers=2,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=32,
    )
    # GPT-2's initialisation is small (σ = 0.02); larger weights give gradients worth comparing
    for variable in backbone.weights:
        if len(variable.shape) >= 2:
            variable.assign(np.random.default_rng(seed).normal(0, 0.5, variable.shape).astype("float32"))
    return keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=preprocessor)
