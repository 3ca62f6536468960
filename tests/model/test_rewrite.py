"""sk.rewrite: nesting, every way of writing a ReLU, the original left alone, clear errors."""

import gc

import keras
import numpy as np
import pytest
import tensorflow as tf

import saliency_kit as sk
from saliency_kit.model.rewrite import find_relu_activations


def input_gradient(model, x, index=0):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(model(x)[:, index])
    return tape.gradient(y, x).numpy()


def assert_differ(a, b):
    """Clearly different relative to their scale (random-init nets give tiny gradients)."""
    scale = max(np.abs(a).max(), np.abs(b).max())
    assert scale > 0 and np.abs(a - b).max() > 1e-2 * scale


def snapshot(model):
    return [w.copy() for w in model.get_weights()]


def assert_same_weights(model, before):
    after = model.get_weights()
    assert len(after) == len(before)
    for a, b in zip(after, before):
        np.testing.assert_array_equal(a, b)


def nested_model():
    """Functional > functional > Sequential, with ReLUs written every way at every depth."""
    innermost = keras.Sequential(
        [
            keras.Input((6, 6, 8)),
            keras.layers.Conv2D(8, 3, padding="same", activation="relu6", name="c3"),
            keras.layers.ReLU(negative_slope=0.1, name="leaky"),
        ],
        name="innermost",
    )
    mid_in = keras.Input((6, 6, 8))
    m = keras.layers.Conv2D(8, 1, name="c2")(mid_in)
    m = keras.layers.BatchNormalization(name="bn2")(m)
    m = keras.layers.Activation("relu", name="act2")(m)
    m = innermost(m)
    middle = keras.Model(mid_in, keras.layers.Add(name="add")([m, mid_in]), name="middle")

    inp = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(8, 3, activation="relu", name="c1")(inp)
    x = keras.layers.Lambda(lambda t: t * 0.5, name="halve")(x)
    x = middle(x)
    x = keras.ops.relu(x)  # an op, not a layer: Keras names it (relu, relu_1, ...); the test reads its name
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    x = keras.layers.Dense(16, activation=keras.activations.relu, name="d1")(x)
    x = keras.layers.Dropout(0.5, name="drop")(x)
    out = keras.layers.Dense(5, activation="softmax", name="probs")(x)
    model = keras.Model(inp, out, name="outer")
    # non-trivial BatchNorm statistics, so copying them matters
    bn = middle.get_layer("bn2")
    bn.set_weights(
        [w + np.random.default_rng(3).uniform(0.5, 1.5, w.shape).astype(np.float32) for w in bn.get_weights()]
    )
    return model


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(0).uniform(0, 1, (3, 8, 8, 3)).astype(np.float32)


def test_nested_paths_outputs_and_gradients(images):
    model = nested_model()
    before = snapshot(model)
    plain = input_gradient(model, images)

    guided = sk.rewrite(model, "guided")

    bare_relu = next(op.name for op in model.operations if type(op).__name__ == "Relu")  # Keras numbers it
    assert guided.rewritten_layers == [
        "c1",
        "middle/act2",
        "middle/innermost/c3",
        "middle/innermost/leaky",
        bare_relu,
        "d1",
    ]
    np.testing.assert_array_equal(guided(images).numpy(), model(images).numpy())
    assert_differ(input_gradient(guided, images), plain)
    # the nested models were rebuilt, not shared
    assert guided.get_layer("middle") is not model.get_layer("middle")
    assert guided.get_layer("middle").get_layer("bn2").moving_variance is not None
    np.testing.assert_array_equal(
        guided.get_layer("middle").get_layer("bn2").get_weights()[3],
        model.get_layer("middle").get_layer("bn2").get_weights()[3],
    )
    # the original: same weights, same activations, same plain gradient
    assert_same_weights(model, before)
    assert model.get_layer("c1").activation is keras.activations.relu
    np.testing.assert_array_equal(input_gradient(model, images), plain)


def test_find_relu_activations_names_each_variant():
    found = dict(find_relu_activations(nested_model()))
    assert found["middle/innermost/c3"].max_value == 6.0
    assert found["middle/innermost/leaky"].negative_slope == pytest.approx(0.1)
    assert found["d1"].is_plain


def test_traces_before_and_after_the_rewrite(images):
    """The classic failures: a stale trace reused after the swap, or a swap nobody calls."""
    model = nested_model()
    x = tf.constant(images)

    @tf.function
    def plain_gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(model(x)[:, 0])
        return tape.gradient(y, x)

    traced_before = plain_gradient(x).numpy()
    guided = sk.rewrite(model, "guided")
    deconv = sk.rewrite(model, "deconv")

    @tf.function
    def rewritten_gradient(m, x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(m(x)[:, 0])
        return tape.gradient(y, x)

    g_guided = rewritten_gradient(guided, x).numpy()
    g_deconv = rewritten_gradient(deconv, x).numpy()
    np.testing.assert_array_equal(plain_gradient(x).numpy(), traced_before)
    np.testing.assert_allclose(rewritten_gradient(model, x).numpy(), traced_before, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(g_guided, input_gradient(guided, images), rtol=1e-5, atol=1e-7)
    for a, b in [(g_guided, traced_before), (g_deconv, traced_before), (g_guided, g_deconv)]:
        assert_differ(a, b)


def test_the_swapped_activation_is_the_one_that_runs(images):
    """Count calls of a rule: every rewritten activation must be called on the forward pass."""
    calls = []

    class Counting(sk.GuidedBackprop):
        def __call__(self, x):
            calls.append(self.activation.name)
            return super().__call__(x)

    model = nested_model()
    rewritten = sk.rewrite(model, Counting())
    calls.clear()
    rewritten(images)
    assert len(calls) == len(rewritten.rewritten_layers) == 6


def test_guided_map_of_a_relu_net_is_non_negative_where_plain_is_not(images):
    """Guided backprop passes only positive signals through a ReLU; with a ReLU right at the input,
    every input gradient is that ReLU's gated, positive signal: the map is >= 0 everywhere, while
    the plain gradient of the same net has negative entries."""
    inp = keras.Input((8, 8, 3))
    x = keras.layers.Activation("relu", name="first")(keras.layers.Lambda(lambda t: t - 0.5)(inp))
    x = keras.layers.Conv2D(4, 3, activation="relu")(x)
    x = keras.layers.Flatten()(x)
    out = keras.layers.Dense(1)(keras.layers.Dense(8, activation="relu")(x))
    model = keras.Model(inp, out)
    gg = input_gradient(sk.rewrite(model, "guided"), images)
    gp = input_gradient(model, images)
    assert (gp < 0).any()
    assert (gg >= 0).all() and (gg > 0).any()
    assert_differ(gg, gp)


def test_sequential_built_by_calling_and_mixed_precision():
    seq = keras.Sequential([keras.layers.Dense(4, activation="relu"), keras.layers.Dense(2)])
    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    seq(x)
    rewritten = sk.rewrite(seq, "deconv")
    assert len(rewritten.rewritten_layers) == 1
    np.testing.assert_array_equal(rewritten(x).numpy(), seq(x).numpy())

    inp = keras.Input((3,))
    h = keras.layers.Dense(4, activation="relu", dtype="mixed_float16")(inp)
    half = keras.Model(inp, keras.layers.Dense(2, dtype="float32")(h))
    rewritten = sk.rewrite(half, "guided")
    assert rewritten.layers[1].dtype_policy.name == "mixed_float16"
    np.testing.assert_array_equal(rewritten(x).numpy(), half(x).numpy())


@keras.saving.register_keras_serializable(package="saliency_kit_tests")
class ScaledDense(keras.layers.Layer):
    """A custom layer that exposes its activation the Keras way."""

    def __init__(self, units, activation=None, scale=2.0, **kwargs):
        super().__init__(**kwargs)
        self.units, self.scale = units, scale
        self.activation = keras.activations.get(activation)

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), initializer="glorot_uniform")

    def call(self, x):
        return self.activation(self.scale * (x @ self.kernel))

    def get_config(self):
        return {
            **super().get_config(),
            "units": self.units,
            "scale": self.scale,
            "activation": keras.activations.serialize(self.activation),
        }


def test_custom_layers_and_saving_a_rewritten_model(tmp_path):
    inp = keras.Input((3,))
    h = ScaledDense(4, activation="relu", name="custom")(inp)
    model = keras.Model(inp, keras.layers.Dense(2)(h))
    x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    rewritten = sk.rewrite(model, "guided")
    assert rewritten.rewritten_layers == ["custom"]
    np.testing.assert_array_equal(rewritten(x).numpy(), model(x).numpy())

    path = tmp_path / "guided.keras"
    rewritten.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(input_gradient(loaded, x), input_gradient(rewritten, x), rtol=1e-6)
    assert_differ(input_gradient(loaded, x), input_gradient(model, x))


def test_model_without_relu_names_what_it_found():
    inp = keras.Input((4,))
    h = keras.layers.Dense(3, activation="silu")(inp)
    h = keras.layers.Dense(3, activation="gelu")(h)
    model = keras.Model(inp, keras.layers.Dense(2, activation="softmax")(h))
    with pytest.raises(ValueError, match=r"no ReLU-family activation.*silu x1.*gelu x1.*softmax x1"):
        sk.rewrite(model, "guided")


class SubclassedNet(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.d = keras.layers.Dense(5, activation="relu")
        self.out = keras.layers.Dense(2)

    def call(self, x):
        return self.out(tf.nn.relu6(self.d(x) * 4.0))


def test_subclassed_models_are_rewritten_and_left_alone():
    net = SubclassedNet()
    x = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    net(x)
    plain = input_gradient(net, x)
    guided = sk.rewrite(net, "guided")
    assert len(guided.rewritten_layers) == 2  # the fused relu and the relu6 in call()
    np.testing.assert_array_equal(guided(x).numpy(), net(x).numpy())

    # independent: the forward written out in NumPy, guided backprop by hand
    k1, b1 = net.d.get_weights()
    k2, _ = net.out.get_weights()
    h = x @ k1 + b1
    r = np.maximum(h, 0) * 4.0
    dz = np.broadcast_to(k2[:, 0], r.shape)
    dr = np.where(dz > 0, dz * ((r > 0) & (r < 6)), 0.0) * 4.0
    expected = np.where(dr > 0, dr * (h > 0), 0.0) @ k1.T
    np.testing.assert_allclose(input_gradient(guided, x), expected, rtol=1e-5, atol=1e-6)

    @tf.function
    def compiled(m, x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(m(x)[:, 0])
        return tape.gradient(y, x)

    np.testing.assert_allclose(compiled(guided, tf.constant(x)).numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(input_gradient(net, x), plain)

    inp = keras.Input((3,))
    wrapper = keras.Model(inp, keras.layers.Dense(1, activation="relu", name="top")(net(inp)))
    rewritten = sk.rewrite(wrapper, "guided")
    assert set(rewritten.rewritten_layers) == {net.name, "top"}
    np.testing.assert_array_equal(rewritten(x).numpy(), wrapper(x).numpy())
    with pytest.raises(TypeError, match="keras.Model"):
        sk.rewrite(lambda x: x, "guided")


def count_relu_layers_by_config(model):
    """Independent count: walk the configs, not the activation functions."""
    count = 0
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            count += count_relu_layers_by_config(layer)
            continue
        config = layer.get_config()
        if type(layer).__name__ in ("ReLU", "LeakyReLU") or config.get("activation") in ("relu", "relu6"):
            count += 1
    return count


APPLICATIONS = [
    ("ResNet50", (32, 32)),
    ("VGG16", (32, 32)),
    ("MobileNetV2", (32, 32)),
    ("DenseNet121", (32, 32)),
    ("InceptionV3", (75, 75)),
]


@pytest.mark.parametrize("name,size", APPLICATIONS, ids=[a[0] for a in APPLICATIONS])
def test_keras_applications(name, size):
    keras.backend.clear_session()
    model = getattr(keras.applications, name)(weights=None, input_shape=(*size, 3), classes=7)
    before = snapshot(model)
    x = np.random.default_rng(0).uniform(-1, 1, (2, *size, 3)).astype(np.float32)
    plain = input_gradient(model, x)

    guided = sk.rewrite(model, "guided")

    expected = count_relu_layers_by_config(model)
    assert expected > 0
    assert len(guided.rewritten_layers) == expected
    np.testing.assert_array_equal(guided(x).numpy(), model(x).numpy())
    through_copy = input_gradient(guided, x)
    assert_differ(through_copy, plain)
    # the guided method applies the rule at the op level, in its own kernel, with no copy: a
    # second route, which must give what the layer-level rewrite gives
    explanation = sk.explain(model, x, "guided_backprop", targets=0, score="output")
    np.testing.assert_allclose(
        explanation.attributions[:, 0], through_copy, rtol=1e-3, atol=1e-4 * np.abs(through_copy).max()
    )
    assert len(explanation.rewritten) == expected
    assert_same_weights(model, before)
    np.testing.assert_array_equal(input_gradient(model, x), plain)
    del guided, model
    gc.collect()


@pytest.mark.parametrize("name,found", [("EfficientNetB0", "silu"), ("ConvNeXtTiny", "gelu")])
def test_applications_without_relu(name, found):
    keras.backend.clear_session()
    model = getattr(keras.applications, name)(weights=None, input_shape=(32, 32, 3), classes=3)
    with pytest.raises(ValueError, match=found):
        sk.rewrite(model, "guided")


def test_the_original_stays_plain_in_another_thread_while_its_rewrite_runs():
    import threading

    net = SubclassedNet()
    x = np.random.default_rng(2).normal(size=(6, 3)).astype(np.float32)
    net(x)
    plain = input_gradient(net, x)
    guided = sk.rewrite(net, "guided")
    guided_map = input_gradient(guided, x)
    assert_differ(guided_map, plain)
    errors = []

    def plain_worker():
        try:
            for _ in range(30):
                np.testing.assert_allclose(input_gradient(net, x), plain, rtol=1e-6, atol=1e-7)
        except Exception as error:  # reported by the main thread
            errors.append(error)

    thread = threading.Thread(target=plain_worker)
    thread.start()
    for _ in range(10):
        np.testing.assert_allclose(input_gradient(guided, x), guided_map, rtol=1e-6, atol=1e-7)
    thread.join()
    assert not errors, errors
