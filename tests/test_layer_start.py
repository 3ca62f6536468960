"""Where a layer's path starts (``attribute_to=LAYER``, ``layer_start=``): at the layer's output at
the baseline input by default, at zero with ``layer_start="zero"``.

The references are written out in NumPy on float64 models whose weights are set by hand: the
layer's output ``h = W₁ᵀx + b₁`` and the score ``s = W₂ᵀ relu(h) + b₂``, so the gradient above
the layer is ``W₂ · 1[h > 0]`` and integrated gradients' trapezoid on ``steps`` evenly spaced
points, and DeepLIFT's Rescale rule ``W₂ (relu(h) − relu(h′))``, are closed forms."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import pytest

import saliency_kit as sk

F64 = "float64"
W1 = np.array([[1.0, 0.5, -1.0, 0.2], [-0.5, 1.0, 0.4, -0.3], [0.3, -0.2, 0.6, 1.0]])
B1 = np.array([0.5, -0.4, 0.3, -0.2])
W2 = np.array([[1.0, -0.5], [0.7, 0.4], [-1.2, 0.9], [0.6, 1.1]])
B2 = np.array([0.1, -0.3])
X = np.array([[1.0, 2.0, -1.0], [-0.5, 0.5, 1.5]])


def _relu(v):
    return np.maximum(v, 0.0)


def _set(layer, kernel, bias):
    layer.kernel.assign(kernel)
    layer.bias.assign(bias)


@pytest.fixture(scope="module")
def mlp():
    """x [3] → h = Dense(4) → ReLU → Dense(2), the weights above."""
    inputs = keras.Input((3,), dtype=F64, name="x")
    h, top = keras.layers.Dense(4, name="h", dtype=F64), keras.layers.Dense(2, name="top", dtype=F64)
    model = keras.Model(inputs, top(keras.layers.ReLU(dtype=F64)(h(inputs))), name="mlp")
    _set(h, W1, B1)
    _set(top, W2, B2)
    return model


def _hand_ig(h, h0, cls, steps):
    """Trapezoid integrated gradients in the layer's space from ``h0`` to ``h`` ``[N, 4]``."""
    alphas = np.linspace(0, 1, steps)
    weights = np.full(steps, 1 / (steps - 1))
    weights[[0, -1]] /= 2
    points = h0[:, None] + alphas[None, :, None] * (h - h0)[:, None]  # [N, steps, 4]
    nearest = np.abs(points[:, 1:-1]).min() if steps > 2 else 1.0
    assert nearest > 1e-6  # no inner path point on a ReLU's kink: the reference is the closed form
    gradient = W2[:, cls] * (points > 0)  # ∂s/∂h, TensorFlow's ReLU gradient 0 at 0
    return (h - h0) * np.einsum("s,nsj->nj", weights, gradient)


def _score(h, cls):
    return _relu(h) @ W2[:, cls] + B2[cls]


def test_integrated_gradients_start_at_the_layers_output_at_the_baseline_input(mlp):
    h, h0 = X @ W1 + B1, np.broadcast_to(B1, (2, 4))  # the baseline input x′ = 0: h′ = b₁
    assert np.any((h > 0) != (h0 > 0))  # some units cross their kink on the path
    for cls, steps in ((0, 8), (1, 12)):
        e = sk.explain(mlp, X, "integrated_gradients", targets=cls, attribute_to="h", steps=steps)
        want = _hand_ig(h, h0, cls, steps)
        np.testing.assert_allclose(e.attributions[:, 0], want, rtol=1e-6, atol=1e-6)
        change = _score(h, cls) - _score(h0, cls)  # s(x) − s(x′): h is a cut of the model
        np.testing.assert_allclose(e.completeness_gap[:, 0], want.sum(axis=1) - change, atol=1e-6)
    fine = sk.explain(mlp, X, "integrated_gradients", targets=1, attribute_to="h", steps=2001)
    change = _score(h, 1) - _score(h0, 1)
    np.testing.assert_allclose(fine.attributions[:, 0].sum(axis=1), change, atol=2e-3)  # completeness
    assert np.abs(fine.completeness_gap).max() < 2e-3


def test_the_zero_start_gives_integrated_gradients_from_zero_in_the_layers_space(mlp):
    h = X @ W1 + B1
    e = sk.explain(mlp, X, "integrated_gradients", targets=0, attribute_to="h", steps=8, layer_start="zero")
    want = h * W2[:, 0] * (h > 0) * (1 - 0.5 / 7)  # every inner point on h's side of 0; α = 0 sits on the kink
    np.testing.assert_allclose(e.attributions[:, 0], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(e.completeness_gap[:, 0], want.sum(axis=1) - (_score(h, 0) - B2[0]), atol=1e-6)
    given = sk.explain(mlp, X, "integrated_gradients", targets=0, attribute_to="h", steps=8, baseline=0.0)
    np.testing.assert_array_equal(given.attributions, e.attributions)  # baseline= in the layer's space: the start


def test_deeplift_on_a_layer_sums_to_the_score_change_from_the_baseline_input(mlp):
    h, h0 = X @ W1 + B1, np.broadcast_to(B1, (2, 4))
    for cls in (0, 1):
        e = sk.explain(mlp, X, "deeplift", targets=cls, attribute_to="h")
        want = W2[:, cls] * (_relu(h) - _relu(h0))  # Rescale: Δh · W₂ · Δrelu/Δh
        np.testing.assert_allclose(e.attributions[:, 0], want, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(e.attributions[:, 0].sum(axis=1), _score(h, cls) - _score(h0, cls), atol=1e-6)
        np.testing.assert_allclose(e.completeness_gap, 0.0, atol=1e-6)
    zero = sk.explain(mlp, X, "deeplift", targets=1, attribute_to="h", layer_start="zero")
    np.testing.assert_allclose(zero.attributions[:, 0], W2[:, 1] * _relu(h), rtol=1e-6, atol=1e-6)


def test_a_baseline_input_given_per_input_moves_the_start(mlp):
    """``baseline=`` keyed by input name is the baseline input's; the layer starts at its output."""
    x0 = np.array([0.5, -1.0, 2.0])
    h, h0 = X @ W1 + B1, np.broadcast_to(x0 @ W1 + B1, (2, 4))
    e = sk.explain(mlp, X, "deeplift", targets=0, attribute_to="h", baseline={"x": x0})
    np.testing.assert_allclose(e.attributions[:, 0], W2[:, 0] * (_relu(h) - _relu(h0)), rtol=1e-6, atol=1e-6)


@pytest.fixture(scope="module")
def masked():
    """a [2], b [2] floats and padding_mask [2] int → h = Dense(4)(a ‖ b ‖ mask) → ReLU → Dense(2):
    the mask is held (not explained by default) and reaches the layer."""
    a, b = keras.Input((2,), dtype=F64, name="a"), keras.Input((2,), dtype=F64, name="b")
    mask = keras.Input((2,), dtype="int32", name="padding_mask")
    joined = keras.layers.Concatenate(dtype=F64)([a, b, keras.ops.cast(mask, F64)])
    h, top = keras.layers.Dense(4, name="h", dtype=F64), keras.layers.Dense(2, name="top", dtype=F64)
    model = keras.Model([a, b, mask], top(keras.layers.ReLU(dtype=F64)(h(joined))), name="masked")
    kernel = np.array(
        [
            [1.0, -0.5, 0.3, 0.2],
            [0.4, 0.8, -0.6, 0.1],
            [-0.7, 0.2, 0.5, -0.4],
            [0.3, -0.9, 0.2, 0.6],
            [0.5, 0.4, -0.8, 0.3],
            [-0.2, 0.6, 0.4, -0.5],
        ]
    )
    _set(h, kernel, B1)
    _set(top, W2, B2)
    return model, kernel


def test_several_inputs_explained_inputs_at_their_baseline_held_inputs_at_their_values(masked):
    """The baseline input: a and b (explained by default) at 0, the mask at its values."""
    model, kernel = masked
    a = np.array([[1.0, -2.0], [0.5, 1.5]])
    b = np.array([[-1.0, 0.5], [2.0, -0.5]])
    mask = np.array([[1, 0], [1, 0]], dtype="int32")
    h = np.concatenate([a, b, mask], axis=1) @ kernel + B1
    h0 = np.concatenate([0 * a, 0 * b, mask], axis=1) @ kernel + B1
    e = sk.explain(model, [a, b, mask], "deeplift", targets=1, attribute_to="h")
    np.testing.assert_allclose(e.attributions[:, 0], W2[:, 1] * (_relu(h) - _relu(h0)), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(e.attributions[:, 0].sum(axis=1), _score(h, 1) - _score(h0, 1), atol=1e-6)
    given = sk.explain(model, [a, b, mask], "deeplift", targets=1, attribute_to="h", baseline={"b": [1.0, 1.0]})
    h0 = np.concatenate([0 * a, 0 * b + 1.0, mask], axis=1) @ kernel + B1
    np.testing.assert_allclose(given.attributions[:, 0], W2[:, 1] * (_relu(h) - _relu(h0)), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="'padding_mask' is held at its values, which differ between rows"):
        sk.explain(model, [a, b, mask[::-1] * [[1, 0], [0, 1]]], "deeplift", targets=1, attribute_to="h")
    zero = sk.explain(model, [a, b, mask[::-1] * [[1, 0], [0, 1]]], "deeplift", 1, attribute_to="h", layer_start="zero")
    assert zero.attributions.shape == (2, 1, 4)  # the zero start needs no baseline input


@pytest.fixture(scope="module")
def text():
    """ids [5] → Embedding(7, 3) → Dense(4, relu) → Flatten → Dense(3)."""
    rng = np.random.default_rng(4)
    ids = keras.Input((5,), dtype="int32", name="ids")
    embedding = keras.layers.Embedding(7, 3, name="emb", dtype=F64)
    hidden = keras.layers.Dense(4, activation="relu", dtype=F64)
    top = keras.layers.Dense(3, dtype=F64)
    model = keras.Model(ids, top(keras.layers.Flatten(dtype=F64)(hidden(embedding(ids)))), name="text")
    embedding.embeddings.assign(rng.normal(size=(7, 3)))
    _set(hidden, rng.normal(size=(3, 4)), rng.normal(size=4) * 0.3)
    _set(top, rng.normal(size=(20, 3)), rng.normal(size=3) * 0.3)
    x = rng.integers(1, 7, size=(3, 5)).astype("int32")
    return model, x, embedding.embeddings.numpy()


@pytest.mark.parametrize("token", [0, 2])
def test_the_embedding_layer_gives_the_default_embedding_space_numbers(text, token):
    model, x, table = text
    for method, options in (("integrated_gradients", {"steps": 9}), ("deeplift", {})):
        default = sk.explain(model, x, method, targets=[0, 2, 1], baseline_token=token, **options)
        layer = sk.explain(model, x, method, targets=[0, 2, 1], attribute_to="emb", baseline_token=token, **options)
        assert layer.parts == {"emb": "layer"} and default.parts == {"ids": "embedding"}
        np.testing.assert_allclose(layer.attributions, default.attributions, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(layer.completeness_gap, default.completeness_gap, rtol=1e-6, atol=1e-6)
        start = np.broadcast_to(table[token], (5, 3))  # the token's row at every position
        np.testing.assert_allclose(layer.options["baseline"], start, rtol=1e-7)


def test_a_noisy_method_on_a_layer_does_not_depend_on_the_start(mlp):
    a = sk.explain(mlp, X, "smoothgrad", targets=0, attribute_to="h", samples=4, seed=3)
    b = sk.explain(mlp, X, "smoothgrad", targets=0, attribute_to="h", samples=4, seed=3, layer_start="zero")
    np.testing.assert_array_equal(a.attributions, b.attributions)
    g = sk.explain(mlp, X, "gradient", targets=0, attribute_to="h")
    np.testing.assert_allclose(g.attributions[:, 0], W2[:, 0] * (X @ W1 + B1 > 0), rtol=1e-6, atol=1e-6)


def test_an_unknown_start_is_refused(mlp):
    with pytest.raises(ValueError, match=r"layer_start must be one of \['baseline', 'zero'\]; received 'input'"):
        sk.explain(mlp, X, "integrated_gradients", attribute_to="h", layer_start="input")


def test_a_layer_baseline_of_the_wrong_shape_is_refused_in_the_layers_words(mlp):
    with pytest.raises(ValueError, match=r"one row of what is explained \(4,\) \(an input, or the layer's output"):
        sk.explain(mlp, X, "integrated_gradients", attribute_to="h", baseline=np.zeros(3))
    for name in ("integrated_gradients", "guided_ig", "deeplift"):
        (baseline,) = [option for option in sk.methods.get(name).options if option.name == "baseline"]
        assert "one input" not in baseline.help and "the layer's output" in baseline.help
