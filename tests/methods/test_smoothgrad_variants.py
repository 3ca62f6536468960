"""squaregrad and vargrad are smoothgrad's square and variance aggregates under their own names."""
import numpy as np
import pytest

import saliency_kit as sk

keras = pytest.importorskip("keras")


def model():
    inputs = keras.Input((4, 4, 1))
    h = keras.layers.Dense(3, activation="tanh")(keras.layers.Flatten()(inputs))
    return keras.Model(inputs, keras.layers.Dense(2)(h))


@pytest.mark.parametrize("name, aggregate", [("squaregrad", "square"), ("vargrad", "variance")])
def test_same_as_smoothgrad_aggregate(name, aggregate):
    m = model()
    x = np.random.default_rng(0).normal(size=(2, 4, 4, 1)).astype("float32")
    got = sk.explain(m, x, name, targets=1, samples=6, seed=4, batch_size=3)
    expected = sk.explain(m, x, "smoothgrad", targets=1, samples=6, seed=4, aggregate=aggregate)
    np.testing.assert_allclose(got.attributions, expected.attributions, rtol=1e-5, atol=1e-8)
    # by hand: the per-sample gradients through the documented noise are not reproduced here, but the
    # variance is the square minus the squared mean
    if name == "vargrad":
        square = sk.explain(m, x, "squaregrad", targets=1, samples=6, seed=4)
        mean = sk.explain(m, x, "smoothgrad", targets=1, samples=6, seed=4)
        np.testing.assert_allclose(got.attributions, np.maximum(square.attributions - mean.attributions**2, 0),
                                   rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="no option 'aggregate'"):
        sk.explain(m, x, name, targets=1, aggregate="mean")
    assert "aggregate" not in sk.methods.get(name).defaults
