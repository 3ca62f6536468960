"""sk.jacobian: every class's gradient, one forward pass per chunk shared by its classes."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from method_support import ForwardCounter

import saliency_kit as sk


@pytest.fixture(scope="module")
def cnn():
    keras.utils.set_random_seed(21)
    inputs = keras.Input((10, 10, 3))
    counter = ForwardCounter(name="counter")
    h = counter(inputs)
    h = keras.layers.Conv2D(6, 3, activation="relu")(h)
    h = keras.layers.Conv2D(6, 3, strides=2, activation="tanh")(h)
    h = keras.layers.Flatten()(h)
    model = keras.Model(inputs, keras.layers.Dense(7, activation="softmax", name="dense")(h))
    x = np.random.default_rng(0).normal(size=(5, 10, 10, 3)).astype("float32")
    return model, x, counter


def _tape_jacobian(model, x, classes):
    """Independent reference: one eager GradientTape per class on the pre-softmax logits."""
    dense = model.get_layer("dense")
    features = keras.Model(model.inputs, dense.input)
    rows = []
    for k in classes:
        xt = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(xt)
            z = tf.matmul(features(xt), dense.kernel) + dense.bias
            s = tf.reduce_sum(z[:, k])
        rows.append(tape.gradient(s, xt).numpy())
    return np.stack(rows, axis=1)


def test_jacobian_matches_per_class_gradients(cnn):
    model, x, _ = cnn
    J = sk.jacobian(model, x)
    assert J.shape == (5, 7, 10, 10, 3) and J.dtype == np.float32
    np.testing.assert_allclose(J, _tape_jacobian(model, x, range(7)), atol=1e-5)
    subset = sk.jacobian(model, x, classes=[6, 2])
    np.testing.assert_allclose(subset, J[:, [6, 2]], atol=1e-6)


def test_jacobian_does_not_depend_on_batch_size(cnn):
    model, x, _ = cnn
    reference = sk.jacobian(model, x, batch_size=64)
    for batch_size in (1, 3, 10):
        np.testing.assert_allclose(sk.jacobian(model, x, batch_size=batch_size), reference, atol=1e-5)


def test_classes_share_one_forward_pass(cnn):
    model, x, counter = cnn
    sk.jacobian(model, x[:4], batch_size=28)  # compile first
    before = int(counter.runs.numpy())
    sk.jacobian(model, x[:4], batch_size=28)  # 4 inputs × 7 classes = 28 rows: one call
    assert int(counter.runs.numpy()) - before == 1
    before = int(counter.runs.numpy())
    for k in range(7):  # the same work one class at a time: seven forward passes
        sk.jacobian(model, x[:4], classes=[k], batch_size=28)
    assert int(counter.runs.numpy()) - before == 7


def test_jacobian_errors(cnn):
    model, x, _ = cnn
    with pytest.raises(ValueError, match="out of range"):
        sk.jacobian(model, x, classes=[7])
    with pytest.raises(ValueError, match=r"shape \[B, 10, 10, 3\]"):
        sk.jacobian(model, x[:, :8])
    with pytest.raises(ValueError, match="score must be"):
        sk.jacobian(model, x, score="softmax")


@pytest.mark.parametrize("method", ["gradient", "guided_backprop", "gradcam"])
def test_the_vectorised_gpu_path_agrees_with_the_cpu_loop(cnn, monkeypatch, method):
    """On a GPU the K backward passes run vectorised (pfor); here that path is forced on the CPU
    and must give what the loop gives, for input gradients, rewritten models and CAMs."""
    from saliency_kit import engine

    model, x, _ = cnn
    targets = np.array([[0, 3, 6]] * len(x))
    looped = sk.explain(model, x, method, targets).attributions
    engine.clear_cache()
    monkeypatch.setattr(engine.tf, "vectorise_classes", lambda model: True)
    vectorised = sk.explain(model, x, method, targets).attributions
    engine.clear_cache()
    np.testing.assert_allclose(vectorised, looped, rtol=1e-5, atol=1e-6)
