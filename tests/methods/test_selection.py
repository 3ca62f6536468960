"""The radix selection returns what a sort puts at position k, in every float dtype, on rows
with ties, zeros, subnormals, +inf and NaN."""

import numpy as np
import pytest
import tensorflow as tf

from saliency_kit.methods.selection import kth_smallest


def awkward_rows(dtype, rows=5, features=3001):
    rng = np.random.default_rng(7)
    v = np.abs(rng.standard_cauchy(size=(rows, features)))  # magnitudes over many binades
    v[0, ::3] = 0.0  # a third of a row at zero
    v[1, ::2] = 0.5  # half a row tied
    v[2, ::5] = np.inf
    v[2, 1::11] = np.nan
    v[3] = np.finfo(np.float32).tiny * rng.uniform(0, 1, features)  # float32 subnormals
    v[4, :] = 2.0  # all tied
    return tf.cast(tf.constant(v), dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("k", [0, 1, 750, 1500, 2999, 3000])
def test_the_kth_value_of_a_sort(dtype, k):
    values = awkward_rows(dtype)
    reference = np.sort(tf.cast(values, tf.float64).numpy(), axis=1)[:, k]  # exact: every value widens
    got = tf.function(lambda v: kth_smallest(v, k))(values)
    assert got.dtype == values.dtype
    np.testing.assert_array_equal(tf.cast(got, tf.float64).numpy(), reference)


def test_refuses_what_it_cannot_select():
    values = tf.ones([2, 4], tf.float32)
    with pytest.raises(ValueError, match=r"k must lie in \[0, 4\); received 4"):
        kth_smallest(values, 4)
    with pytest.raises(TypeError, match="float16, bfloat16, float32 or float64 values; received int32"):
        kth_smallest(tf.ones([2, 4], tf.int32), 1)
