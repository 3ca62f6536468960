"""``Explanation.map_of``: the maps of an explained input by its name, whatever order
``attribute_to`` named the inputs in and whatever structure the inputs came in (list, tuple,
dict), checked against each input's gradient taken with ``tf.GradientTape`` on the model."""

import itertools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import pytest
import tensorflow as tf

import saliency_kit as sk

RNG = np.random.default_rng(41)
B = 2
NAMES = ["image", "meta", "extra"]


@pytest.fixture(scope="module")
def three_inputs():
    """An image and two tabular inputs of different widths; the gradient maps of each input by hand
    (``[B, 2, 8, 8]`` for the image, max |g| over its channels; ``[B, 2]`` for a tabular input,
    max |g| over its features)."""
    keras.utils.set_random_seed(41)
    image, meta, extra = (
        keras.Input((8, 8, 3), name="image"),
        keras.Input((5,), name="meta"),
        keras.Input((4,), name="extra"),
    )
    pooled = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3, activation="tanh")(image))
    z = keras.layers.Concatenate()([pooled, keras.layers.Dense(3, activation="tanh")(meta), extra * extra])
    model = keras.Model([image, meta, extra], keras.layers.Dense(3)(z), name="three")
    x = [RNG.normal(size=(B, 8, 8, 3)), RNG.normal(size=(B, 5)), RNG.normal(size=(B, 4))]
    x = [a.astype("float32") for a in x]
    expected = {name: [] for name in NAMES}
    for c in (0, 2):
        tensors = [tf.constant(a) for a in x]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            score = tf.reduce_sum(model(tensors)[:, c])
        for name, g in zip(NAMES, tape.gradient(score, tensors)):
            expected[name].append(np.abs(g.numpy()).max(axis=-1))
    return model, x, {name: np.stack(maps, axis=1) for name, maps in expected.items()}


ORDERS = [None, *itertools.permutations(NAMES, 2), ("extra", "image", "meta"), ("meta",)]


@pytest.mark.parametrize("structure", ["list", "tuple", "dict"])
@pytest.mark.parametrize("order", ORDERS, ids=lambda o: "default" if o is None else "-".join(o))
def test_map_of_names_the_input_whatever_the_order_and_structure(three_inputs, order, structure):
    model, x, expected = three_inputs
    given = {"list": list(x), "tuple": tuple(x), "dict": dict(zip(NAMES, x))}[structure]
    e = sk.explain(
        model, given, "gradient", targets=np.tile([0, 2], (B, 1)), attribute_to=None if order is None else list(order)
    )
    explained = NAMES if order is None else [name for name in NAMES if name in order]
    assert list(e.parts) == explained  # the model's order, the order of a list's entries
    assert np.abs(expected["meta"] - expected["extra"]).max() > 1e-3  # a mix-up of the two shows
    for name in explained:
        np.testing.assert_allclose(e.map_of(name), expected[name], rtol=1e-5, atol=1e-7, err_msg=name)
        if structure == "dict":
            assert e.maps[name] is e.map_of(name)
        else:
            assert e.maps[NAMES.index(name)] is e.map_of(name)
    for name in set(NAMES) - set(explained):
        with pytest.raises(KeyError, match=f"no part called '{name}'"):
            e.map_of(name)
