"""LRP and DeepLIFT through the merges of several branches: a product of two branches (its rule
derived by hand in NumPy below), a product with a constant factor (a padding mask: linear in the
other), a difference of branches (linear), and a product of three branches (refused)."""

import keras
import numpy as np
import pytest

import saliency_kit as sk
from saliency_kit.propagation import composites
from saliency_kit.propagation.lrp import rewrite_lrp

RNG = np.random.default_rng(8)


@pytest.fixture(scope="module")
def gated():
    """``s = w · (A a ⊙ B b)``, no biases: two inputs meeting in a product."""
    a, b = keras.Input((3,), name="a"), keras.Input((4,), name="b")
    left, right = keras.layers.Dense(5, use_bias=False), keras.layers.Dense(5, use_bias=False)
    head = keras.layers.Dense(2, use_bias=False)
    model = keras.Model([a, b], head(keras.layers.Multiply()([left(a), right(b)])))
    weights = [layer.get_weights()[0] for layer in (left, right, head)]
    x = [RNG.normal(size=(4, 3)).astype("float32"), RNG.normal(size=(4, 4)).astype("float32")]
    return model, weights, x


def test_deeplift_splits_a_product_by_the_mean_of_the_other_factor(gated):
    """``Δ(p ⊙ q) = (q + q₀)/2 ⊙ Δp + (p + p₀)/2 ⊙ Δq``, then the linear layers' multipliers."""
    model, (wa, wb, w), x = gated
    references = [RNG.normal(size=(3,)).astype("float32"), RNG.normal(size=(4,)).astype("float32")]
    e = sk.explain(model, x, "deeplift", targets=1, baseline=references)
    p, p0, q, q0 = x[0] @ wa, references[0] @ wa, x[1] @ wb, references[1] @ wb
    expected_a = np.einsum("bi,ij,bj->bi", x[0] - references[0], wa, w[:, 1] * (q + q0) / 2)
    expected_b = np.einsum("bi,ij,bj->bi", x[1] - references[1], wb, w[:, 1] * (p + p0) / 2)
    np.testing.assert_allclose(e.attributions[0][:, 0], expected_a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(e.attributions[1][:, 0], expected_b, rtol=1e-5, atol=1e-6)
    delta = (p * q) @ w[:, 1] - (p0 * q0) @ w[:, 1]
    np.testing.assert_allclose(e.attributions[0][:, 0].sum(1) + e.attributions[1][:, 0].sum(1), delta, rtol=1e-5)


def test_lrp_gives_each_factor_of_a_product_half_its_relevance(gated):
    """z-rule: ``R_j = p_j q_j w_j``; each factor gets ``R_j / 2``, passed back by its layer's z-rule."""
    model, (wa, wb, w), x = gated
    e = sk.explain(model, x, "lrp", targets=0, composite="epsilon", epsilon=1e-9)
    p, q = x[0] @ wa, x[1] @ wb
    share = p * q * w[:, 0] / 2
    expected_a = np.einsum("bi,ij,bj->bi", x[0], wa, share / p)
    expected_b = np.einsum("bi,ij,bj->bi", x[1], wb, share / q)
    np.testing.assert_allclose(e.attributions[0][:, 0], expected_a, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(e.attributions[1][:, 0], expected_b, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(expected_a.sum(1) + expected_b.sum(1), (p * q) @ w[:, 0], rtol=1e-5)  # conserved
    assert "product" in rewrite_lrp(model, composites.get("epsilon")).rewritten_layers.values()


def test_a_product_with_a_mask_is_linear_in_the_other_factor():
    """An integer padding mask, cast and broadcast, multiplies the tokens' features: no rule is
    needed there, and DeepLIFT's and LRP's summation over the tokens stay exact."""
    ids, mask = (
        keras.Input((5,), dtype="int32", name="token_ids"),
        keras.Input((5,), dtype="int32", name="padding_mask"),
    )
    h = keras.layers.Dense(4, use_bias=False)(keras.layers.Embedding(9, 3)(ids))
    kept = h * keras.ops.expand_dims(keras.ops.cast(mask, "float32"), -1)
    model = keras.Model(
        {"token_ids": ids, "padding_mask": mask}, keras.layers.Dense(2, use_bias=False)(keras.layers.Flatten()(kept))
    )
    padding = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], "int32")
    x = {"token_ids": RNG.integers(1, 9, (2, 5)).astype("int32") * padding, "padding_mask": padding}
    scores = np.asarray(model(x))[:, 0]
    for method, options in [("deeplift", {}), ("lrp", {"composite": "epsilon", "epsilon": 1e-9})]:
        e = sk.explain(model, x, method, targets=0, **options)
        relevance = e.attributions["token_ids"][:, 0]  # [B, T, D] on the embedding's output
        assert np.abs(relevance[0, 3:]).max() == 0  # masked tokens get nothing
        total = relevance.sum(axis=(1, 2))
        if method == "deeplift":  # the reference: the embedding of the padding id, the mask held
            reference = dict(x, token_ids=np.zeros_like(x["token_ids"]))
            np.testing.assert_allclose(total, scores - np.asarray(model(reference))[:, 0], rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_allclose(total, scores, rtol=1e-4, atol=1e-6)
    assert "product" not in rewrite_lrp(model, composites.get("epsilon")).rewritten_layers.values()


def test_a_difference_of_branches_keeps_relevance_and_summation_to_delta():
    branch = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, activation="relu", use_bias=False)])
    a, b = keras.Input((4,)), keras.Input((4,))
    model = keras.Model([a, b], keras.layers.Dense(2, use_bias=False)(keras.layers.Subtract()([branch(a), branch(b)])))
    x = [RNG.normal(size=(3, 4)).astype("float32") for _ in range(2)]
    scores = np.asarray(model(x))[:, 1]
    lrp = sk.explain(model, x, "lrp", targets=1, composite="epsilon", epsilon=1e-9)
    np.testing.assert_allclose(lrp.attributions[0][:, 0].sum(1) + lrp.attributions[1][:, 0].sum(1), scores, rtol=1e-4)
    deeplift = sk.explain(model, x, "deeplift", targets=1)
    total = deeplift.attributions[0][:, 0].sum(1) + deeplift.attributions[1][:, 0].sum(1)
    np.testing.assert_allclose(total, scores - np.asarray(model([np.zeros((1, 4)), np.zeros((1, 4))]))[:, 1], rtol=1e-5)


def test_a_product_of_three_branches_is_refused_by_name():
    inputs = [keras.Input((3,)) for _ in range(3)]
    product = keras.layers.Multiply(name="triple")([keras.layers.Dense(2)(t) for t in inputs])
    model = keras.Model(inputs, keras.layers.Dense(2)(product))
    x = [RNG.normal(size=(2, 3)).astype("float32") for _ in range(3)]
    for method in ("lrp", "deeplift"):
        with pytest.raises(ValueError, match="'triple'.*product of 3 branches"):
            sk.explain(model, x, method, targets=0)
