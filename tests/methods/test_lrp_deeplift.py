"""The "lrp" and "deeplift" methods, batched and with K classes: LRP against NumPy written here,
DeepLIFT against the one NumPy DeepLIFT of every DeepLIFT test (``propagation/numpy_reference.py``)."""

import keras
import numpy as np
import pytest
from propagation.numpy_reference import numpy_deeplift

import saliency_kit as sk
from saliency_kit.propagation import composites


@pytest.fixture(scope="module")
def mlp():
    """s = W2ᵀ relu(W1ᵀ x + b1) + b2, 4 → 5 → 3, hand-set weights of both signs."""
    rng = np.random.default_rng(3)
    W1, b1 = rng.normal(size=(4, 5)), rng.normal(size=5) * 0.2
    W2, b2 = rng.normal(size=(5, 3)), rng.normal(size=3) * 0.2
    inputs = keras.Input((4,))
    h = keras.layers.Dense(5, activation="relu")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(h))
    model.layers[1].set_weights([W1.astype("float32"), b1.astype("float32")])
    model.layers[2].set_weights([W2.astype("float32"), b2.astype("float32")])
    x = rng.normal(size=(5, 4)).astype("float32")
    return model, x, (W1, b1, W2, b2)


def numpy_lrp_epsilon(x, weights, column, eps):
    W1, b1, W2, b2 = weights
    z1 = x @ W1 + b1
    a1 = np.maximum(z1, 0)
    z2 = a1 @ W2 + b2

    def stab(z):
        return z + eps * np.where(z >= 0, 1, -1)

    R2 = np.where(np.arange(3) == column, z2, 0)
    R1 = a1 * (W2 @ (R2 / stab(z2)))  # relevance of the ReLU outputs = of z1 (Pass)
    return x * (W1 @ (R1 / stab(z1)))


def test_lrp_matches_numpy_for_k_classes_and_any_batch_size(mlp):
    model, x, weights = mlp
    targets = np.array([[0, 2]] * len(x))
    one = sk.explain(model, x, "lrp", targets=targets, composite="epsilon", epsilon=0.01, batch_size=32)
    small = sk.explain(model, x, "lrp", targets=targets, composite="epsilon", epsilon=0.01, batch_size=2)
    for b in range(len(x)):
        for k, column in enumerate((0, 2)):
            want = numpy_lrp_epsilon(x[b].astype(np.float64), weights, column, 0.01)
            np.testing.assert_allclose(one.attributions[b, k], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(small.attributions, one.attributions, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(one.maps, one.attributions.sum(-1), rtol=1e-5, atol=1e-6)  # signed sum


def test_lrp_accepts_a_composite_and_zbox_bounds(mlp):
    model, x, weights = mlp
    composite = composites.Composite({keras.layers.Dense: sk.rules.Epsilon(0.01)})
    got = sk.explain(model, x, "lrp", targets=[[1]] * len(x), composite=composite)
    want = np.stack([numpy_lrp_epsilon(row.astype(np.float64), weights, 1, 0.01) for row in x])
    np.testing.assert_allclose(got.attributions[:, 0], want, rtol=1e-4, atol=1e-5)
    box = sk.explain(model, x, "lrp", targets="top1", composite="epsilon_gamma_box", low=-3.0, high=3.0)
    assert np.all(np.isfinite(box.attributions))
    with pytest.raises(ValueError, match="low and high"):
        sk.explain(model, x, "lrp", composite="epsilon_gamma_box")


def test_jacobian_through_a_composite_times_input_is_the_relevance(mlp):
    model, x, weights = mlp
    composite = composites.Composite({keras.layers.Dense: sk.rules.Epsilon(0.01)})
    jac = sk.jacobian(model, x, classes=[0, 2], rule=composite)
    for k, column in enumerate((0, 2)):
        want = np.stack([numpy_lrp_epsilon(row.astype(np.float64), weights, column, 0.01) for row in x])
        np.testing.assert_allclose(x * jac[:, k], want, rtol=1e-4, atol=1e-5)


def test_deeplift_matches_numpy_sums_to_delta_and_reports_the_gap(mlp):
    model, x, weights = mlp
    baseline = np.array([0.3, -0.2, 0.1, 0.0], "float32")
    targets = np.array([[0, 1, 2]] * len(x))
    got = sk.explain(model, x, "deeplift", targets=targets, baseline=baseline, batch_size=4)

    def logits(v):
        return np.maximum(v @ weights[0] + weights[1], 0) @ weights[2] + weights[3]

    for b in range(len(x)):
        delta = logits(x[b].astype(np.float64)) - logits(baseline.astype(np.float64))
        for k in range(3):
            layers = [("dense", weights[0], weights[1]), ("relu",), ("dense", weights[2], weights[3])]
            want = numpy_deeplift(layers, x[b].astype(np.float64), baseline.astype(np.float64), k)
            np.testing.assert_allclose(got.attributions[b, k], want, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(got.attributions[b, k].sum(), delta[k], rtol=1e-5, atol=1e-6)
    assert np.abs(got.completeness_gap).max() <= 1e-5
    again = sk.explain(model, x[:2], "deeplift", targets=targets[:2], baseline=baseline, batch_size=1)
    np.testing.assert_allclose(again.attributions, got.attributions[:2], rtol=1e-6, atol=1e-7)


def test_lrp_and_deeplift_report_the_layers_they_rewrote(mlp):
    model, x, _ = mlp
    dense = [layer.name for layer in model.layers[1:]]
    lrp = sk.explain(model, x, "lrp", targets=0, composite="epsilon")
    assert set(dense) <= set(lrp.rewritten), lrp.rewritten
    assert set(dense) <= set(sk.explain(model, x, "deeplift", targets=0).rewritten)
    assert sk.explain(model, x, "integrated_gradients", targets=0, steps=4).rewritten is None


def _copy_twin(upsampling: keras.layers.Layer, shape: tuple) -> keras.layers.Dense:
    """The upsampling layer written out as a bias-free ``Dense`` over the flattened input: its
    matrix is the layer's response to each unit vector (the layer is linear)."""
    size = int(np.prod(shape))
    columns = keras.ops.convert_to_numpy(upsampling(np.eye(size, dtype="float32").reshape(size, *shape)))
    dense = keras.layers.Dense(int(np.prod(columns.shape[1:])), use_bias=False)
    dense.build((None, size))
    dense.set_weights([columns.reshape(size, -1)])
    return dense


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_upsampling_propagates_as_the_linear_map_it_is(interpolation):
    """A segmentation net that upsamples (a U-Net decoder) against its twin that does the same by a
    bias-free Dense with the upsampling's matrix: LRP (whose epsilon rule on that Dense is the
    z-rule up to epsilon) and DeepLIFT agree, for a region target; DeepLIFT sums to the delta."""
    rng = np.random.default_rng(5)
    keras.utils.set_random_seed(5)
    inputs = keras.Input((8, 8, 2))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    h = keras.layers.MaxPooling2D(2)(h)
    h = keras.layers.Conv2D(3, 3, padding="same", activation="relu")(h)  # [4, 4, 3]
    up = keras.layers.UpSampling2D(2, interpolation=interpolation)
    head = keras.layers.Conv2D(3, 1)
    model = keras.Model(inputs, head(up(h)))
    flat = _copy_twin(up, (4, 4, 3))(keras.layers.Flatten()(h))
    twin = keras.Model(inputs, head(keras.layers.Reshape((8, 8, 3))(flat)))
    x = rng.uniform(-1, 1, size=(3, 8, 8, 2)).astype("float32")
    np.testing.assert_allclose(twin.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
    region = sk.targets.region(np.arange(64).reshape(8, 8) % 3 == 0, np.array([[0, 2]] * len(x)))

    got = sk.explain(model, x, "lrp", targets=region, composite="epsilon", epsilon=1e-7)
    want = sk.explain(twin, x, "lrp", targets=region, composite="epsilon", epsilon=1e-7)
    assert np.abs(want.attributions).max() > 1e-3
    np.testing.assert_allclose(got.attributions, want.attributions, rtol=1e-4, atol=1e-5)

    baseline = np.zeros((8, 8, 2), "float32")
    lifted = sk.explain(model, x, "deeplift", targets=region, baseline=baseline)
    twin_lifted = sk.explain(twin, x, "deeplift", targets=region, baseline=baseline)
    np.testing.assert_allclose(lifted.attributions, twin_lifted.attributions, rtol=1e-4, atol=1e-5)
    assert np.abs(lifted.completeness_gap).max() <= 1e-4


def _pooled_cnn(outputs: int, dense_output: bool = True) -> keras.Model:
    keras.utils.set_random_seed(3)
    inputs = keras.Input((8, 8, 2))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.Conv2D(outputs, 3, padding="same")(h)
    if dense_output:
        h = keras.layers.Dense(outputs)(keras.layers.Flatten()(keras.layers.ReLU()(h)))
    return keras.Model(inputs, h)


def test_deeplift_one_shared_baseline_equals_each_input_paired_with_its_own():
    """explain runs the baseline once, on its own, before the inputs; the rewrite's interleaved pairs
    ``[x_0, x₀, x_1, x₀, ...]``, differentiated here by hand, give the same multipliers."""
    import tensorflow as tf

    from saliency_kit.propagation.deeplift import rewrite_deeplift

    model = _pooled_cnn(5)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 8, 8, 2)).astype("float32")
    baseline = rng.normal(size=(8, 8, 2)).astype("float32") * 0.1
    targets = np.array([[0, 3], [4, 1], [2, 2]])
    got = sk.explain(model, x, "deeplift", targets=targets, baseline=baseline, batch_size=7)
    copy = rewrite_deeplift(model)
    rows = tf.constant(np.stack([x, np.broadcast_to(baseline, x.shape)], axis=1).reshape(6, 8, 8, 2))
    for k in range(2):
        with tf.GradientTape() as tape:
            tape.watch(rows)
            score = tf.reduce_sum(tf.gather(copy(rows)[0::2], targets[:, k], batch_dims=1))
        multipliers = tape.gradient(score, rows).numpy()[0::2]
        np.testing.assert_allclose(got.attributions[:, k], (x - baseline) * multipliers, rtol=1e-5, atol=1e-6)
    assert np.abs(got.completeness_gap).max() <= 1e-4


def test_deeplift_sums_to_delta_for_a_target_object():
    """A region of a dense output: the baseline's outputs are scored with each row's own mask."""
    model = _pooled_cnn(3, dense_output=False)  # [B, 4, 4, 3]
    x = np.random.default_rng(5).normal(size=(4, 8, 8, 2)).astype("float32")
    masks = np.zeros((4, 4, 4), bool)
    for b in range(4):
        masks[b, b : b + 2, 1:3] = True
    region = sk.targets.region(masks, [[0, 2]] * 4)
    whole = sk.explain(model, x, "deeplift", targets=region, baseline=0.2, batch_size=64)
    one = sk.explain(model, x, "deeplift", targets=region, baseline=0.2, batch_size=1)
    np.testing.assert_allclose(one.attributions, whole.attributions, rtol=1e-5, atol=1e-6)
    outputs = lambda v: np.asarray(model(v))  # noqa: E731
    at_x, at_baseline = outputs(x), outputs(np.full_like(x, 0.2))
    for b in range(4):
        for k, c in enumerate((0, 2)):
            delta = at_x[b, ..., c][masks[b]].mean() - at_baseline[b, ..., c][masks[b]].mean()
            np.testing.assert_allclose(whole.attributions[b, k].sum(), delta, rtol=1e-4, atol=1e-5)
    assert np.abs(whole.completeness_gap).max() <= 1e-4


def test_deeplift_through_one_relu_layer_called_twice_matches_numpy():
    """A layer object used at two places reads, at each, the baseline's values of that place."""
    rng = np.random.default_rng(8)
    weights = [(rng.normal(size=(4, 6)), rng.normal(size=6) * 0.3), (rng.normal(size=(6, 6)), rng.normal(size=6) * 0.3)]
    weights.append((rng.normal(size=(6, 3)), rng.normal(size=3) * 0.3))
    relu = keras.layers.ReLU()
    inputs = keras.Input((4,))
    dense = [keras.layers.Dense(w.shape[1]) for w, _ in weights]
    model = keras.Model(inputs, dense[2](relu(dense[1](relu(dense[0](inputs))))))
    for layer, (w, b) in zip(dense, weights):
        layer.set_weights([w.astype("float32"), b.astype("float32")])
    x = rng.normal(size=(5, 4)).astype("float32")
    baseline = np.array([0.5, -0.4, 0.2, 0.1], "float32")
    got = sk.explain(model, x, "deeplift", targets=[[0, 2]] * 5, baseline=baseline)
    layers = [("dense", *weights[0]), ("relu",), ("dense", *weights[1]), ("relu",), ("dense", *weights[2])]
    for b in range(5):
        for k, column in enumerate((0, 2)):
            want = numpy_deeplift(layers, x[b].astype(np.float64), baseline.astype(np.float64), column)
            np.testing.assert_allclose(got.attributions[b, k], want, rtol=1e-4, atol=1e-5)
    assert np.abs(got.completeness_gap).max() <= 1e-5


class _BatchSizes(keras.layers.Flatten):
    """Flatten (the identity on ``[B, F]``), noting the static batch size of every concrete call
    (class-wide, so the rewritten copy's clone notes into the same list)."""

    seen: list = []

    def call(self, x):
        if isinstance(x.shape[0], int):
            _BatchSizes.seen.append(x.shape[0])
        return super().call(x)


def test_deeplift_runs_its_baseline_once_as_one_row_beside_the_batch_not_in_it():
    inputs = keras.Input((6,))
    h = keras.layers.Dense(5, activation="relu")(_BatchSizes()(inputs))
    model = keras.Model(inputs, keras.layers.Dense(2)(h))
    x = np.random.default_rng(9).normal(size=(4, 6)).astype("float32")
    _BatchSizes.seen.clear()
    sk.explain(model, x, "gradient", targets=0, batch_size=4)
    batch = set(_BatchSizes.seen)
    _BatchSizes.seen.clear()
    got = sk.explain(model, x, "deeplift", targets=0, batch_size=4)
    assert sorted(set(_BatchSizes.seen)) == sorted(batch | {1}) and 5 not in _BatchSizes.seen
    assert np.abs(got.completeness_gap).max() <= 1e-5


def test_a_shared_reference_refuses_passes_that_call_their_layers_differently():
    import tensorflow as tf

    from saliency_kit.propagation.gates import SharedReference

    row, rows = tf.zeros([1, 3]), tf.ones([4, 3])
    twice = SharedReference()
    with twice.record():
        twice.exchange("relu_a", row)
    with pytest.raises(RuntimeError, match="more often than on the reference"):
        with twice.replay():
            twice.exchange("relu_a", rows)
            twice.exchange("relu_a", rows)
    skipped = SharedReference()
    with skipped.record():
        skipped.exchange("relu_a", row)
        skipped.exchange("relu_b", row)
    with pytest.raises(RuntimeError, match="relu_b' saw the reference more often"):
        with skipped.replay():
            skipped.exchange("relu_a", rows)
    reshaped = SharedReference()
    with reshaped.record():
        reshaped.exchange("relu_a", row)
    with pytest.raises(RuntimeError, match=r"saw \(3,\) per row on the reference and \(2,\)"):
        with reshaped.replay():
            reshaped.exchange("relu_a", tf.ones([4, 2]))
