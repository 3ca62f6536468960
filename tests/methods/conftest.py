"""Models small enough that every method's answer can be computed by hand."""

import keras
import numpy as np
import pytest

B = 3


@pytest.fixture(scope="module")
def linear_image():
    """logits = flatten(x) · W + b on 6×5×2 "images": every gradient is a reshaped column of W."""
    keras.utils.set_random_seed(11)
    inputs = keras.Input((6, 5, 2))
    logits = keras.layers.Dense(4, name="dense")(keras.layers.Flatten()(inputs))
    model = keras.Model(inputs, keras.layers.Softmax()(logits))
    x = np.random.default_rng(0).uniform(-1, 2, size=(B, 6, 5, 2)).astype("float32")
    w = model.get_layer("dense").kernel.numpy().T.reshape(4, 6, 5, 2)  # w[k] = ∂z_k/∂x
    return model, x, w


@pytest.fixture(scope="module")
def two_layer():
    """s = v · relu(W x): v has both signs, so guided backprop differs from the gradient."""
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(4, activation="relu", use_bias=False, name="hidden")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(1, use_bias=False, name="out")(hidden))
    W = np.array([[1.0, -2.0, 0.5, 1.5], [0.5, 1.0, -1.0, 2.0], [-1.0, 0.5, 2.0, -0.5]], "float32")
    v = np.array([[2.0], [-1.0], [1.5], [-3.0]], "float32")
    model.get_layer("hidden").set_weights([W])
    model.get_layer("out").set_weights([v])
    x = np.array([[1.0, 1.0, 1.0], [2.0, -1.0, 0.5], [-1.0, 2.0, 1.0]], "float32")
    return model, x, W, v[:, 0]


@pytest.fixture(scope="module")
def tiny_cnn():
    """conv (stride 2, relu) → global average pool → dense: ∂z_k/∂A[i, j, c] = W[c, k] / (h w)."""
    keras.utils.set_random_seed(5)
    inputs = keras.Input((8, 8, 2))
    a = keras.layers.Conv2D(3, 3, strides=2, padding="same", activation="relu", name="conv")(inputs)
    z = keras.layers.Dense(2, name="dense")(keras.layers.GlobalAveragePooling2D()(a))
    model = keras.Model(inputs, keras.layers.Softmax()(z))
    dense = model.get_layer("dense")
    dense.set_weights([np.array([[1.0, -1.0], [-2.0, 2.0], [1.5, -1.0]], "float32"), np.zeros(2, "float32")])
    x = np.random.default_rng(4).normal(size=(2, 8, 8, 2)).astype("float32")
    A = keras.Model(inputs, a)(x).numpy()  # [2, 4, 4, 3]
    return model, x, A, model.get_layer("dense").kernel.numpy()
