"""The seeded draws and the map resizing give the reference's numbers on every backend: run it in
the TensorFlow process and with ``KERAS_BACKEND=jax``, each against the same pure-Python
reference (``draws_reference``), so the backends agree with each other through it. A JAX process
never imports TensorFlow for them."""

import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
from draws_reference import linear_resize, normal_draws, uniform_draws
from keras import ops

from saliency_kit.engine import draws, resize

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEED, KEYS, IDS = 2**33 + 17, [0, 7, 2**40 + 5, 2**63 - 1], [0, 3, 1]


def _ids():
    return ops.convert_to_tensor(np.array(IDS, np.int32))


def _compiled(fn):
    """``fn`` inside the backend's compiled function (as a kernel runs it)."""
    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(fn)()
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.function(fn)()
    return fn()


@pytest.mark.parametrize("compiled", [False, True])
def test_draws_are_the_reference_numbers(compiled):
    seed, keys, shape = draws.words(np.int64(SEED)), draws.words(np.array(KEYS, np.int64)), (3, 5)

    def draw():
        return (
            draws.normal(seed, keys, _ids(), shape, "float32"),
            draws.uniform(seed, keys, _ids(), shape, "float32"),
            draws.shared_uniform(seed, _ids(), shape, "float32"),
        )

    normal, uniform, shared = (np.asarray(t) for t in (_compiled(draw) if compiled else draw()))
    assert normal.shape == uniform.shape == (4, 3, 3, 5) and shared.shape == (3, 3, 5)
    for b, key in enumerate(KEYS):
        np.testing.assert_array_equal(uniform[b], uniform_draws(SEED, key, IDS, shape).astype(np.float32))
        np.testing.assert_allclose(normal[b], normal_draws(SEED, key, IDS, shape), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(shared, uniform_draws(SEED, None, IDS, shape).astype(np.float32))


def test_many_normal_draws_stay_within_float32_precision_of_the_reference():
    """Box–Muller's log, cos and sin are each backend's own: over 6,000 draws the largest
    relative difference from the float64 reference stays below 1e-6."""
    seed, keys = draws.words(np.int64(3)), draws.words(np.array([1, 2], np.int64))
    got = np.asarray(draws.normal(seed, keys, ops.convert_to_tensor(np.arange(3, dtype=np.int32)), (1000,)))
    expected = np.stack([normal_draws(3, key, range(3), (1000,)) for key in (1, 2)])
    relative = np.abs(got - expected) / np.maximum(np.abs(expected), 1e-30)
    assert relative.max() < 1e-6, relative.max()


@pytest.mark.parametrize("spatial, size", [((7,), (19,)), ((3, 4), (12, 12)), ((5, 6), (2, 9)), ((2, 3, 4), (5, 3, 8))])
def test_linear_resize_is_the_reference(spatial, size):
    maps = np.random.default_rng(0).normal(size=(2, 3, *spatial)).astype(np.float32)
    got = np.asarray(_compiled(lambda: resize.linear(ops.convert_to_tensor(maps), size)))
    np.testing.assert_allclose(got, linear_resize(maps, size), rtol=1e-6, atol=1e-6)


def test_a_jax_process_imports_no_tensorflow():
    """In a fresh process (the test session's seed fixture reaches TensorFlow through Keras):
    drawing and resizing on JAX import no TensorFlow."""
    if keras.backend.backend() != "jax":
        pytest.skip("a JAX process's imports")
    code = (
        "import sys, numpy as np\n"
        "from saliency_kit.engine import draws, resize\n"
        "w = draws.words(np.arange(2))\n"
        "draws.normal(w[0], w, np.arange(2, dtype=np.int32), (3,))\n"
        "resize.linear(np.ones((1, 1, 2, 2), np.float32), (4, 4))\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\n"
    )
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
