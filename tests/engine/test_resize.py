"""Linear resizing of maps (``engine.resize.linear``): SciPy's ``zoom(order=1, grid_mode=True,
mode="nearest")``, the loop reference, and TensorFlow's bilinear ``tf.image.resize`` one axis at
a time (bit for bit: the weights are computed as its kernel computes them)."""

import numpy as np
import pytest
from draws_reference import linear_resize
from scipy import ndimage

from saliency_kit.engine import resize

CASES = [
    ((7,), (19,)),
    ((9,), (4,)),
    ((3, 4), (12, 12)),
    ((5, 6), (2, 9)),
    ((2, 3, 4), (5, 3, 8)),
    ((4, 4, 4), (2, 7, 3)),
]


def _maps(spatial, seed=0):
    return np.random.default_rng(seed).normal(size=(2, 3, *spatial)).astype(np.float32)


@pytest.mark.parametrize("spatial, size", CASES)
def test_linear_is_scipys_zoom_and_the_reference(spatial, size):
    maps = _maps(spatial)
    got = np.asarray(resize.linear(maps, size))
    assert got.shape == (2, 3, *size) and got.dtype == np.float32
    zoom = [1, 1, *(t / s for s, t in zip(spatial, size))]
    np.testing.assert_allclose(
        got, ndimage.zoom(maps.astype(np.float64), zoom, order=1, grid_mode=True, mode="nearest"), atol=2e-6
    )
    np.testing.assert_allclose(got, linear_resize(maps, size), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("spatial, size", [c for c in CASES if len(c[0]) == 2])
def test_linear_is_tensorflows_bilinear_bit_for_bit(spatial, size):
    import tensorflow as tf

    maps = _maps(spatial, 1)
    expected = tf.image.resize(maps.reshape(6, *spatial, 1), size, method="bilinear").numpy().reshape(2, 3, *size)
    np.testing.assert_array_equal(np.asarray(resize.linear(maps, size)), expected)


def test_same_size_and_dtypes():
    maps = _maps((4, 5))
    assert resize.linear(maps, (4, 5)) is maps
    half = np.asarray(resize.linear(maps.astype(np.float16), (8, 10)))
    assert half.dtype == np.float16
    np.testing.assert_array_equal(
        half, np.asarray(resize.linear(maps.astype(np.float16).astype(np.float32), (8, 10))).astype(np.float16)
    )
    with pytest.raises(ValueError, match="1 to 3 spatial axes"):
        resize.linear(maps, (4,))
